"""The same host and model planned for vLLM 0.32 and 0.33 differ exactly where vLLM differs.

vLLM 0.33 (rules.VERIFIED["0.33.0"]):
- creates the cuBLAS/cuBLASLt handles before its memory snapshot: their memory leaves the budget's non-torch part
  and joins the outside-budget part (CUDA context, NCCL) — v1/worker/gpu_worker.py:519-529;
- keeps GB10 (cc 12.1) on the small scheduler tier: 2048 batched tokens and 256 sequences for `vllm serve`
  (engine/arg_utils.py:2961-2987).
Everything else the planner models (KV arithmetic, CUDA graphs, activation, weights, defaults) is unchanged.
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.hardware import CUBLAS_HANDLES_MIB

from .planner_data import facts, model

CUBLAS_GIB = CUBLAS_HANDLES_MIB / 1024
GB10 = {"gpu_name": "NVIDIA GB10", "gpu_count": 1}  # nvidia-smi has no memory figure on GB10: the catalogue's


def both(gpu: dict[str, Any], model_name: str, **options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    return (plan(gpu, model(model_name), vllm_version="0.32.0", **options),
            plan(gpu, model(model_name), vllm_version="0.33.0", **options))


@pytest.mark.parametrize(("gpu", "model_name", "engine_args"), [
    ("h200x2", "llama-3.1-8b", {}),                                   # TP1, one replica per GPU
    ("h200x2", "llama-3.1-8b", {"tensor_parallel_size": 2}),          # TP2: NCCL outside too, custom all-reduce in
    ("h100x8_nvswitch", "llama-3.1-70b", {}),
    ("l40s_x4_pcie", "gpt-oss-20b", {}),                              # sliding window + MXFP4 MoE
    ("a100_80gb_x8", "qwen3-30b-a3b", {}),                            # MoE, expert parallel
])
def test_only_the_cublas_handles_move(gpu: str, model_name: str, engine_args: dict[str, Any]) -> None:
    """With the budget fraction pinned, the plans differ only by the cuBLAS handles: 60 MiB leave the budget's
    non-torch part (so the KV cache grows by them) and join the outside-budget part. (Where the pool is what limits
    max-num-seqs or max-model-len, those 60 MiB can also raise them a step: a consequence, not a rule change.)"""
    pinned = {**engine_args, "gpu_memory_utilization": 0.9}
    old, new = both(facts(gpu), model_name, engine_args=pinned)
    assert new["cli_args"] == old["cli_args"]
    assert new["parallel"] == old["parallel"]
    mo, mn = old["memory_gib"], new["memory_gib"]
    for same in ("total", "budget", "weights", "activation", "cuda_graph"):
        assert mn[same] == mo[same], same
    assert mo["non_torch"] - mn["non_torch"] == pytest.approx(CUBLAS_GIB, abs=0.0015)
    assert mn["outside_budget"] - mo["outside_budget"] == pytest.approx(CUBLAS_GIB, abs=0.0015)
    assert mn["kv_cache"] - mo["kv_cache"] == pytest.approx(CUBLAS_GIB, abs=0.0015)
    assert mn["headroom"] - mo["headroom"] == pytest.approx(-CUBLAS_GIB, abs=0.0015)
    # The KV pool grows by 60 MiB worth of blocks, no more.
    po, pn = old["prediction"], new["prediction"]
    assert pn["block_size"] == po["block_size"] and pn["max_model_len"] == po["max_model_len"]
    assert pn["kv_cache_tokens"] - po["kv_cache_tokens"] >= 0
    assert pn["gpu_blocks"] >= po["gpu_blocks"]


def test_planned_utilisation_leaves_room_for_the_handles() -> None:
    """Unpinned, the planner's fraction shrinks so the handles fit outside the budget: the per-GPU budget plus what
    sits outside it stays within the same total."""
    old, new = both(facts("h100x8_nvswitch"), "llama-3.1-70b")
    mo, mn = old["memory_gib"], new["memory_gib"]
    assert new["engine_args"]["gpu-memory-utilization"] <= old["engine_args"]["gpu-memory-utilization"]
    assert mn["budget"] + mn["outside_budget"] <= mo["budget"] + mo["outside_budget"] + CUBLAS_GIB
    assert "cuBLAS handles" in new["reasons"]["gpu-memory-utilization"]
    assert "cuBLAS" not in old["reasons"]["gpu-memory-utilization"]


@pytest.mark.parametrize(("profile", "tokens", "seqs_cap"), [("chat", (8192, 2048), (256, 256)),
                                                             ("batch", (16384, 8192), (1024, 512))])
def test_gb10_moves_to_the_small_tier(profile: str, tokens: tuple[int, int], seqs_cap: tuple[int, int]) -> None:
    """GB10 in 0.33: vLLM's defaults drop to 2048 tokens / 256 sequences, so the planner's step size and
    sequence cap (which start from vLLM's defaults) drop with them; the reasons quote each version's default."""
    old, new = both(GB10, "llama-3.1-8b", profile=profile)
    assert (old["engine_args"]["max-num-batched-tokens"], new["engine_args"]["max-num-batched-tokens"]) == tokens
    assert old["engine_args"]["max-num-seqs"] <= seqs_cap[0] and new["engine_args"]["max-num-seqs"] <= seqs_cap[1]
    assert "vLLM 0.32 default 1024 for this GPU" in old["reasons"]["max-num-seqs"]
    assert "vLLM 0.33 default 256 for this GPU; small tier: vLLM keeps cc 12.1 on it" in new["reasons"]["max-num-seqs"]
    # what follows from the smaller step: a smaller activation peak; the rest of the memory model is the same
    assert new["memory_gib"]["activation"] < old["memory_gib"]["activation"]
    assert new["memory_gib"]["weights"] == old["memory_gib"]["weights"]


def test_a_large_gpu_that_is_not_gb10_keeps_its_tier() -> None:
    old, new = both(facts("h200x2"), "llama-3.1-8b", engine_args={"gpu_memory_utilization": 0.9})
    for key in ("max-num-seqs", "max-num-batched-tokens"):
        assert new["engine_args"][key] == old["engine_args"][key]


def test_env_and_args_follow_the_version() -> None:
    """The Ray compiled-DAG variables are refused for 0.33 only; --monokernel only exists from 0.33."""
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError

    ray = ["VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE=nccl"]
    plan(facts("h200x2"), model("tiny-llama"), vllm_version="0.32.0", extra_args=ray)
    with pytest.raises(PlanError, match=r"VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE no longer exists in vLLM 0\.33\.0"):
        plan(facts("h200x2"), model("tiny-llama"), vllm_version="0.33.0", extra_args=ray)
    with pytest.raises(PlanError, match=r"--monokernel does not exist in vLLM 0.32.0.*new in vLLM 0.33"):
        plan(facts("h200x2"), model("tiny-llama"), vllm_version="0.32.0", engine_args={"monokernel": True})
    new = plan(facts("h200x2"), model("tiny-llama"), vllm_version="0.33.0", engine_args={"monokernel": True})
    assert new["engine_args"]["monokernel"] is True and "--monokernel" in new["cli_args"]
    ignored = plan(facts("h200x2"), model("tiny-llama"), vllm_version="0.33.0",
                   engine_args={"mamba_cache_mode": "align"})
    assert any("--mamba-cache-mode is accepted but ignored by vLLM 0.33.0" in w for w in ignored["warnings"])
