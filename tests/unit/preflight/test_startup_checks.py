"""vLLM's start-up rules refused in preflight (preflight/startup.py), through record.fleet_launch as the fleet
step runs it: each bad setting is refused with vLLM's own words, the host and the fix, before planning; the good
neighbour of each is accepted. Models: the example Llama 3.1 8B (dense) and Qwen/Qwen3-235B-A22B-FP8's real
config.json (tests/fixtures/preflight/models/SOURCES.json); facts: the recorded 8x H100 host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import startup
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import (
    fleet_launch,
    host_input,
)

from ._recorded import H100, H100_B, MODEL_8B

ROOT = Path(__file__).resolve().parents[3]
FP8_MOE = str(ROOT / "tests/fixtures/preflight/models/qwen3-235b-a22b-fp8")
BASE = {"vllm_fleet_model": MODEL_8B, "vllm_fleet_vllm_version": "0.32.0", "vllm_fleet_api_key": "sk-unit-st-7d1e0a"}


def _input(engine_args: dict[str, Any], host: str = "h1", facts: dict[str, Any] = H100, **variables: Any
           ) -> dict[str, Any]:
    merged = {**BASE, "vllm_fleet_engine_args": engine_args, **variables}
    return host_input(merged, host, sku="gpu_h100", facts=facts, address=host,
                      model_dir=str(merged["vllm_fleet_model"]), ports={"vllm_serve_port": 8000})


def _errors(engine_args: dict[str, Any], **variables: Any) -> list[str]:
    return fleet_launch({"h1": _input(engine_args, **variables)}, check_image=False)["errors"]


REFUSED = [
    ("chunked_prefill_off", {"enable_chunked_prefill": False, "max_model_len": 8192, "max_num_batched_tokens": 2048},
     {}, "h1: vLLM would refuse it: 'max_num_batched_tokens (2048) is smaller than max_model_len (8192)."),
    ("tokens_below_seqs", {"max_num_seqs": 512, "max_num_batched_tokens": 256},
     {}, "'max_num_batched_tokens (256) must be greater than or equal to max_num_seqs (512).'"),
    ("active_above_seqs", {"max_num_seqs": 64, "max_num_active_seqs": 128},
     {}, "'max_num_active_seqs (128) cannot be greater than max_num_seqs (64).'"),
    ("long_prefill_above_len", {"max_model_len": 4096, "long_prefill_token_threshold": 8192},
     {}, "'long_prefill_token_threshold (8192) cannot be greater than the max_model_len (4096).'"),
    ("quantization_not_the_checkpoint", {"quantization": "gptq"}, {"vllm_fleet_model": FP8_MOE},
     "'Quantization method specified in the model config (fp8) does not match the quantization method specified "
     "in the `quantization` argument (gptq)': remove vllm_fleet_engine_args.quantization"),
    ("quantization_of_an_unquantized_checkpoint", {"quantization": "awq"}, {},
     "'Cannot find the config file for awq'"),
    ("deprecated_quantization", {"quantization": "fbgemm_fp8"}, {},
     "The quantization method fbgemm_fp8 is deprecated and will be removed"),
    ("attention_backend_unknown", {"attention_backend": "XFORMERS"}, {},
     "h1: vLLM 0.32 would refuse it: \"Unknown attention backend: 'XFORMERS'\""),
    ("attention_backend_of_0_33_on_0_32", {"attention_backend": "FLASH_ATTN_MLA_SPARSE_FA4"}, {},
     "Unknown attention backend: 'FLASH_ATTN_MLA_SPARSE_FA4'"),
    ("expert_parallel_dense", {"enable_expert_parallel": True, "tensor_parallel_size": 2}, {},
     "'Number of experts in the model must be greater than 0 when expert parallelism is enabled.'"),
    ("lora_cpu_below_loras", {"enable_lora": True, "max_loras": 4, "max_cpu_loras": 2}, {},
     "'max_cpu_loras (2) must be >= max_loras (4).'"),
    ("eplb_with_ep_pinned_off", {"enable_eplb": True, "enable_expert_parallel": False, "tensor_parallel_size": 8},
     {"vllm_fleet_model": FP8_MOE}, "h1: vLLM would refuse it: 'enable_expert_parallel must be True to use EPLB.'"),
    ("dcp_gqa", {"decode_context_parallel_size": 2, "tensor_parallel_size": 4}, {},
     "requires `--tensor-parallel-size` (4) to be greater than the model's total number of KV heads (8)"),
    ("cuda_visible_devices", {}, {"vllm_fleet_env": {"CUDA_VISIBLE_DEVICES": "0,1"}},
     "h1: vllm_fleet_env.CUDA_VISIBLE_DEVICES fights the launch record"),
    ("vllm_port_on_the_api_port", {}, {"vllm_fleet_env": {"VLLM_PORT": "8000"}},
     "h1: vllm_fleet_env.VLLM_PORT = 8000 is vLLM's first internal port and also a port of the launch record"),
]


@pytest.mark.parametrize(("case", "args", "variables", "words"), REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_with_vllms_words_and_the_fix(case: str, args: dict[str, Any], variables: dict[str, Any],
                                              words: str) -> None:
    errors = _errors(args, **variables)
    assert any(words in line for line in errors), errors
    assert all(line.startswith("h1: ") for line in errors), errors
    assert len(errors) == 1, errors


ACCEPTED = [
    ("chunked_prefill_on", {"max_model_len": 8192, "max_num_batched_tokens": 2048}, {}),
    ("chunked_off_with_enough_tokens", {"enable_chunked_prefill": False, "max_model_len": 8192,
                                        "max_num_batched_tokens": 8192}, {}),
    ("quantization_as_the_checkpoint", {"quantization": "fp8", "tensor_parallel_size": 8},
     {"vllm_fleet_model": FP8_MOE}),
    ("expert_parallel_moe", {"enable_expert_parallel": True, "tensor_parallel_size": 8},
     {"vllm_fleet_model": FP8_MOE}),
    ("attention_backend_known", {"attention_backend": "FLASHINFER"}, {}),
    # EP left unset: the planner turns it on for EPLB ("required"), so vLLM gets both
    ("eplb_ep_left_to_the_planner", {"enable_eplb": True, "tensor_parallel_size": 8}, {"vllm_fleet_model": FP8_MOE}),
    ("lora_cpu_default", {"enable_lora": True, "max_loras": 4}, {}),
    ("vllm_port_clear", {}, {"vllm_fleet_env": {"VLLM_PORT": "29600"}}),
]


@pytest.mark.parametrize(("case", "args", "variables"), ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_the_good_neighbour_is_accepted(case: str, args: dict[str, Any], variables: dict[str, Any]) -> None:
    assert _errors(args, **variables) == []


def test_the_0_33_backend_is_known_to_0_33() -> None:
    assert _errors({"attention_backend": "FLASH_ATTN_MLA_SPARSE_FA4"}, vllm_fleet_vllm_version="0.33.0") == []


def test_the_plans_own_scheduler_values_are_checked() -> None:
    """check_plan reads the launch's final engine args (dashed), whoever set them."""
    plan = {"engine_args": {"max-model-len": 8192, "max-num-batched-tokens": 2048, "enable-chunked-prefill": False,
                            "max-num-seqs": 256}}
    assert startup.check_plan("h1", plan) == [
        "h1: vLLM would refuse it: 'max_num_batched_tokens (2048) is smaller than max_model_len (8192). [...] "
        "Please increase max_num_batched_tokens or decrease max_model_len.' (chunked prefill is off in the plan): "
        "remove enable_chunked_prefill: false, or pin max_num_batched_tokens >= 8192, or a max_model_len <= 2048"]
    plan["engine_args"]["max-num-batched-tokens"] = 8192
    assert startup.check_plan("h1", plan) == []


def _group(model_b: str = MODEL_8B, version_b: str = "0.32.0") -> dict[str, Any]:
    return {"h1": _input({}, "h1", H100, vllm_fleet_multinode_group="big"),
            "h2": _input({}, "h2", H100_B, vllm_fleet_multinode_group="big", vllm_fleet_model=model_b,
                         vllm_fleet_vllm_version=version_b)}


def test_one_multinode_group_one_checkpoint() -> None:
    errors = fleet_launch(_group(model_b=FP8_MOE), check_image=False)["errors"]
    assert len(errors) == 1, errors
    assert errors[0].startswith("h1: multi-node group big runs one model instance, but its hosts name 2 different "
                                "checkpoints (h1: ")
    assert "set vllm_fleet_model once for the group (group_vars)" in errors[0]


def test_one_multinode_group_one_version() -> None:
    errors = fleet_launch(_group(version_b="0.33.0"), check_image=False)["errors"]
    assert errors == ["h1: multi-node group big runs one model instance, but its hosts name 2 different vLLM "
                      "versions (h1: 0.32.0; h2: 0.33.0): set vllm_fleet_vllm_version once for the group (group_vars)"]


def test_a_consistent_group_passes_the_group_check() -> None:
    assert startup.check_groups(_group()) == []


@pytest.mark.parametrize(("args", "words"), [
    ({"decode_context_parallel_size": 3, "tensor_parallel_size": 8}, "'tp_size=8 must be divisible by dcp_size=3.'"),
    ({"decode_context_parallel_size": 4, "tensor_parallel_size": 16},
     "'`--decode-context-parallel-size` (4) exceeds the maximum supported value (2) for `--tensor-parallel-size` "
     "(16) and 8 model KV heads.'"),
    ({"attention_backend": "FLASHINFER", "attention_config": {"backend": "FLASH_ATTN"}},
     "'attention_backend and attention_config.backend are mutually exclusive'"),
])
def test_decode_context_parallel_and_backend_rules(args: dict[str, Any], words: str) -> None:
    """Llama 3.1 8B: 32 query heads, 8 KV heads (its config.json), so TP 16 allows DCP 2 at most."""
    ctx = {"args": args, "config": startup_config(MODEL_8B), "env": {}, "ports": {}, "facts": H100, "series": "0.32"}
    errors = startup.decode_context_parallel("h1", ctx) + startup.attention_backend_exists("h1", ctx)
    assert len(errors) == 1 and words in errors[0], errors
    ok = {**ctx, "args": {"decode_context_parallel_size": 2, "tensor_parallel_size": 16}}
    assert startup.decode_context_parallel("h1", ok) == []


def startup_config(model: str) -> dict[str, Any]:
    return dict(json.loads((Path(model) / "config.json").read_text()))
