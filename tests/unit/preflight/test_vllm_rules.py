"""Preflight reads vLLM's facts from the planner's rules (keyed by the host's target vLLM) and CUDA vs driver
from provision/cuda_driver.py: where the old copies disagreed, vLLM's behaviour is pinned here."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import rules
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.engine_args import (
    check_engine_args,
    check_env,
    check_extra_args,
    vllm_rules,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.images import check_driver_cuda
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.inputs import check_host_inputs
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.provision import cuda_driver as cd


def args_errors(args: dict[str, Any], version: str | None = None) -> list[str]:
    return check_engine_args("h1", args, vllm_version=version)


def test_dtypes_are_vllms_model_dtype() -> None:
    """vLLM 0.32 `--dtype` takes exactly config/model.py ModelDType; `bf16`/`fp16` exit 2 (the planner used to
    accept them, preflight did not)."""
    assert list(rules.KNOWN_DTYPES) == ["auto", "half", "float16", "bfloat16", "float", "float32"]
    assert rules.rules_for("0.32.0").dtypes == rules.KNOWN_DTYPES
    for spelling in rules.KNOWN_DTYPES:
        assert args_errors({"dtype": spelling}) == []
    for spelling in ("bf16", "fp16", "BF16"):
        assert "is not one of auto, half, float16, bfloat16, float, float32" in args_errors({"dtype": spelling})[0]


@pytest.mark.parametrize("kv", ["fp8_inc", "fp8_ds_mla", "int4"])
def test_kv_cache_dtypes_are_the_ones_the_planner_sizes(kv: str) -> None:
    """fp8_inc is Intel Gaudi only and fp8_ds_mla a DeepSeek sparse-MLA page layout: vLLM knows them, the planner
    cannot size them, so preflight refuses them as the planner does (it used to accept both)."""
    assert kv not in rules.KV_DTYPES
    assert f"kv_cache_dtype = {kv!r} is not one of auto, fp8" in args_errors({"kv_cache_dtype": kv})[0]
    for good in rules.KV_DTYPES:
        assert args_errors({"kv_cache_dtype": good}) == []


def test_one_removed_table_gives_every_spelling() -> None:
    entry = rules.rules_for("0.32.0").removed_arg("--worker-use-ray")
    assert entry is not None and entry is rules.rules_for("0.32.0").removed_arg("worker_use_ray")
    assert (entry.name, entry.key, entry.flag) == ("worker_use_ray", "worker-use-ray", "--worker-use-ray")
    assert rules.rules_for("0.32.0").removed_flags["worker-use-ray"] == "--distributed-executor-backend ray"
    assert entry.replacement("args") == "distributed_executor_backend: ray"
    engine = args_errors({"worker_use_ray": True}, "0.32.0")
    flag = check_extra_args("h1", ["--worker-use-ray"], vllm_version="0.32.0")
    assert engine == ["h1: vllm_fleet_engine_args.worker_use_ray is not a vLLM 0.32 engine argument: "
                      "use distributed_executor_backend: ray"]
    assert flag == ["h1: vllm_fleet_extra_args has --worker-use-ray, which vLLM 0.32 rejects (exit 2, unrecognized "
                    "arguments): use vllm_fleet_engine_args.distributed_executor_backend: ray"]


def test_ignored_flag_is_not_called_rejected() -> None:
    flag = check_extra_args("h1", ["--max-parallel-loading-workers=4"], vllm_version="0.32.0")
    assert flag and "which vLLM 0.32 accepts but ignores: drop it" in flag[0] and "exit 2" not in flag[0]
    assert "accepted but ignored by vLLM 0.32" in args_errors({"max_parallel_loading_workers": 4}, "0.32.0")[0]
    # 0.33 parses --mamba-cache-mode, warns it is deprecated and does nothing (engine/arg_utils.py:462-465)
    assert args_errors({"mamba_cache_mode": "align"}, "0.32.0") == []
    assert "accepted but ignored by vLLM 0.33" in args_errors({"mamba_cache_mode": "align"}, "0.33.0")[0]


def test_removed_names_follow_the_target_version() -> None:
    """vLLM 0.6 still had --swap-space (V0); --calculate-kv-scales went in 0.28."""
    assert args_errors({"swap_space": 4}, "0.6.3.post1") == []
    assert "swap_space is not a vLLM 0.32 engine argument" in args_errors({"swap_space": 4}, "0.32.0")[0]
    assert args_errors({"calculate_kv_scales": True}, "0.27.1") == []
    assert "not a vLLM 0.28 engine argument" in args_errors({"calculate_kv_scales": True}, "0.28.0")[0]
    host = check_host_inputs("h1", {"vllm_fleet_model": "/m", "vllm_fleet_api_key_required": False,
                                    "vllm_fleet_vllm_version": "0.6.3.post1",
                                    "vllm_fleet_engine_args": {"swap_space": 4}}, ["gpu_t4"])
    assert host == []


def test_unset_or_bad_version_uses_the_default_rules() -> None:
    assert vllm_rules(None).text == rules.DEFAULT_VLLM_VERSION
    assert vllm_rules("garbage").text == rules.DEFAULT_VLLM_VERSION
    assert vllm_rules("0.5.0").text == rules.DEFAULT_VLLM_VERSION  # the planner refuses it, by name


def test_removed_env_comes_from_the_planner_rules() -> None:
    """Each variable from the release that removed it: 0.33 dropped the Ray compiled-DAG knobs, 0.32 still has them."""
    every = {name: "1" for name in rules.REMOVED_ENV_VARS}
    assert "h1: vllm_fleet_env.VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE is unknown to vLLM 0.33: drop it (removed in " \
        "vLLM 0.33 with the Ray compiled DAG)" in check_env("h1", every, vllm_version="0.33.0")
    errors = check_env("h1", every, vllm_version="0.32.0")
    assert errors == [
        "h1: vllm_fleet_env.VLLM_ATTENTION_BACKEND is unknown to vLLM 0.32: "
        "use vllm_fleet_engine_args.attention_backend: NAME",
        "h1: vllm_fleet_env.VLLM_USE_V1 is unknown to vLLM 0.32: drop it (V1 is the only engine)",
    ]


@pytest.mark.parametrize("cuda", ["12.2", "12.4", "12.9", "13.0", "13.1", "13.2"])
@pytest.mark.parametrize("driver", ["535.261.03", "550.163.01", "575.57.08", "580.159.04", "590.48.01", "595.58.03"])
def test_preflight_and_provisioning_agree_on_driver_vs_cuda(driver: str, cuda: str) -> None:
    facts = {"gpu_count": 1, "driver_version": driver, "cuda_version": None}
    assert (check_driver_cuda("h1", facts, cuda) == []) is cd.driver_runs_cuda(driver.split(".")[0], cuda)
