"""MoE layouts on one host (gpu_lane.compare_moe_layouts): when the TP layout the planner picks needs more than one GPU
per replica, it is compared against DP-attention with expert parallelism over all the host's GPUs, by predicted KV
capacity on the host, with both figures in the reason; an MoE that fits one GPU keeps its independent replicas.

vLLM 0.32 facts the memory model relies on (cited in model.moe_expert_shards, memory.activation_bytes and
gpu_lane.compare_moe_layouts): routed experts are spread over DP x TP GPUs (fused_moe/config.py:1097-1105, 1218-1221),
the EP group is DP x TP (distributed/parallel_state.py:2289-2300), and MLA's latent KV cache is not split by TP
(mla_attention.py:1354-1357, ``max_tp_shards=1``): every TP rank stores the whole latent.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan

from .planner_data import facts, model

H100X8 = facts("h100x8_nvswitch")


def _grown(name: str, count: int) -> dict[str, Any]:
    """Recorded facts of one host with its GPU repeated to ``count`` (one NVLink domain)."""
    host = copy.deepcopy(facts(name))
    first = host["gpus"][0]
    host["gpus"] = [dict(first, index=i) for i in range(count)]
    host["gpu_count"] = count
    host["nvlink_domains"] = [list(range(count))]
    return host


H200X8 = _grown("h200x2", 8)  # the recorded H200 (143,771 MiB, cc 9.0), eight of them
L4X4 = _grown("l4_x1", 4)  # the recorded L4, four of them


def _plan(host: dict[str, Any], name: str, **engine_args: Any) -> dict[str, Any]:
    return plan(host, model(name), vllm_version="0.32.0", engine_args=engine_args)


def test_mla_moe_on_4_l4_picks_dp_attention_with_ep() -> None:
    """DeepSeek-V2-Lite (MLA, 64 experts of 3 x 2048 x 1408 in 26 MoE layers) on 4 L4: TP 1 does not fit (29.7 GiB
    before any KV cache against a 20.5 GiB budget) and TP 2 holds 133,568 tokens, less than one 163,840-token request,
    so the planner's TP pick is TP 4, plain TP (EP off: the recipes' form): the comparison runs. KV per token per GPU
    is 27 layers x (512 + 64) x 2 B = 31,104 B at any TP (the latent is whole on every TP rank), so TP 4 holds one
    GPU's worth: 10.646 GiB / (16 x 31,104 B) = 22,970 blocks = 367,520 tokens for the engine.

    Experts: 26 x 64 x 3 x 2048 x 1408 x 2 B = 28,789,702,656 B (26.812 GiB); spread over 4 GPUs either way
    (7,197,425,664 B = 6.703 GiB). DP 4 x TP 1 adds the replicated attention, dense layer, shared experts and
    embeddings (2.443 GiB): 9.146 GiB per GPU (TP 4: 7.363), which leaves 8.526 GiB of KV per GPU, 18,396 blocks of
    16 x 31,104 B = 294,336 tokens per engine, x 4 engines = 1,177,344 tokens: DP-attention wins."""
    result = _plan(L4X4, "deepseek-v2-lite")
    par, args, reasons = result["parallel"], result["engine_args"], result["reasons"]
    assert par == {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "replicas": 1, "gpus_per_replica": 4,
                   "nodes": 1, "data_parallel_size": 4}
    assert result["cli_args"][:4] == ["--data-parallel-size", "4", "--tensor-parallel-size", "1"]
    assert args["enable-expert-parallel"] is True
    line = "DP 4 x TP 1 with EP: 1,177,344 tokens vs TP 4: 367,520 tokens"
    assert reasons["data-parallel-size"].startswith(
        f"picked by predicted KV capacity on the host (chat profile): {line}: 4 engines in one container")
    assert reasons["data-parallel-size"].endswith("294,336 tokens each, 1,177,344 in all over the 4 engines")
    assert line in reasons["tensor-parallel-size"] and "\n" not in reasons["data-parallel-size"]
    assert reasons["enable-expert-parallel"].startswith("better: DP-attention with EP, picked by the layout comparison")
    assert "DP x TP = 4 GPUs" in reasons["enable-expert-parallel"]
    pred, mem = result["prediction"], result["memory_gib"]
    assert pred["kv_cache_tokens"] == 294_336 == pred["gpu_blocks"] * 16  # per engine; blocks of 16 tokens
    assert abs(pred["gpu_blocks"] - int(mem["kv_cache"] * 2**30) // (16 * 31_104)) <= 1  # 8.53 GiB per GPU
    assert (mem["weights"], mem["kv_cache"]) == (9.146, 8.526)
    assert pred["gpu_blocks"] == 18_396  # the docstring's arithmetic, from the plan
    assert int(args["max-num-seqs"]) == 224  # per rank (reasons say so)
    assert reasons["max-num-seqs"].endswith("; per data-parallel rank (each of the 4 engines schedules its own)")
    tp4 = _plan(L4X4, "deepseek-v2-lite", tensor_parallel_size=4)  # the TP side of the comparison, pinned
    assert (tp4["prediction"]["kv_cache_tokens"], tp4["prediction"]["gpu_blocks"]) == (367_520, 22_970)
    assert (tp4["memory_gib"]["weights"], tp4["memory_gib"]["kv_cache"]) == (7.363, 10.646)
    assert abs(22_970 - int(10.646 * 2**30) // (16 * 31_104)) <= 1
    assert "enable-expert-parallel" not in tp4["engine_args"]  # plain TP, as the comparison weighed it
    tp2 = _plan(L4X4, "deepseek-v2-lite", tensor_parallel_size=2)  # why TP 4: TP 2 cannot hold one full request
    assert tp2["prediction"]["kv_cache_tokens"] == 133_568 < 163_840


@pytest.mark.parametrize(("host", "name", "replicas"), [
    (H200X8, "deepseek-v2-lite", 8),
    (facts("l40s_x4_pcie"), "gpt-oss-20b", 4),
])
def test_an_moe_that_fits_one_gpu_keeps_independent_replicas(host: dict[str, Any], name: str, replicas: int) -> None:
    """No comparison when TP 1 holds the model with a useful KV pool: N independent replicas, no lock-step between
    ranks and no all-to-all over the interconnect (PCIe on the L40S host). DeepSeek-V2-Lite on an H200 holds
    29.256 GiB of weights and 3,627,776 tokens per GPU."""
    result = _plan(host, name)
    par, args, reasons = result["parallel"], result["engine_args"], result["reasons"]
    assert (par["tensor_parallel_size"], par["data_parallel_size"], par["replicas"]) == (1, 1, replicas)
    assert "data-parallel-size" not in args and "enable-expert-parallel" not in args
    assert reasons["data-parallel-size"] == (
        f"not set: the MoE fits one GPU per replica: {replicas} independent replicas (no lock-step, no all-to-all "
        "between GPUs); pin data_parallel_size for DP-attention with EP")
    assert not any("lock step" in w for w in result["warnings"])
    if name == "deepseek-v2-lite":
        assert (result["prediction"]["kv_cache_tokens"], result["memory_gib"]["weights"]) == (3_627_776, 29.256)
        # Pinned as the note says: DP 8 x TP 1 with EP, experts over 8 GPUs (3.352 GiB + 2.443 GiB replicated).
        dp = _plan(host, name, data_parallel_size=8)
        assert (dp["parallel"]["data_parallel_size"], dp["engine_args"]["enable-expert-parallel"]) == (8, True)
        assert (dp["prediction"]["kv_cache_tokens"], dp["memory_gib"]["weights"]) == (4_389_280, 5.795)
        assert round(28_789_702_656 / 8 / 2**30, 3) == 3.352


def test_mla_tp_8_holds_one_gpus_worth_of_latent_cache() -> None:
    """Pinned TP 8 (no comparison, plain TP: EP off): every GPU stores the whole latent, so 129.756 GiB per GPU holds
    floor(129.756 GiB / (16 x 31,104 B)) = 279,957 blocks = 4,479,312 tokens for the whole engine, about an eighth
    of what 8 pinned DP engines hold (8 x 4,389,280)."""
    pinned = _plan(H200X8, "deepseek-v2-lite", tensor_parallel_size=8)
    assert pinned["parallel"]["data_parallel_size"] == 1 and pinned["parallel"]["tensor_parallel_size"] == 8
    assert "data-parallel-size" not in pinned["engine_args"] and "data-parallel-size" not in pinned["reasons"]
    assert "enable-expert-parallel" not in pinned["engine_args"]
    assert pinned["reasons"]["enable-expert-parallel"].startswith("off: plain TP 8 slices each of the 64 experts")
    pred = pinned["prediction"]
    assert (pred["kv_cache_tokens"], pred["gpu_blocks"], pinned["memory_gib"]["kv_cache"]) == (
        4_479_312, 279_957, 129.756)
    assert abs(pred["gpu_blocks"] - int(129.756 * 2**30) // (16 * 31_104)) <= 1


def test_non_mla_moe_keeps_tp_when_it_holds_more() -> None:
    """Qwen3-30B-A3B (4 KV heads of 128, 48 layers) on 4 L4: only TP 4 holds the weights, and TP 4 (plain TP) splits
    the KV heads (1 per GPU: 2 x 1 x 128 x 2 B x 48 = 24,576 B per token) where DP 2 x TP 2 keeps 2 per GPU
    (49,152 B) and repeats the attention in both ranks: 10,012 blocks of 16 x 24,576 B (3.667 GiB per GPU) =
    160,192 tokens for the TP engine against 2 x 4,672 blocks of 16 x 49,152 B (3.422 GiB) = 2 x 74,752 = 149,504 for
    the DP pair. TP stays; the reason names both figures, which are the settled predictions."""
    result = _plan(L4X4, "qwen3-30b-a3b")
    assert result["parallel"]["tensor_parallel_size"] == 4 and result["parallel"]["data_parallel_size"] == 1
    assert "data-parallel-size" not in result["engine_args"]
    assert result["reasons"]["data-parallel-size"] == (
        "not set: MoE layouts compared by predicted KV capacity on the host (chat profile): "
        "TP 4: 160,192 tokens vs DP 2 x TP 2 with EP: 149,504 tokens")
    pred = result["prediction"]
    assert (pred["kv_cache_tokens"], pred["gpu_blocks"], result["memory_gib"]["kv_cache"]) == (160_192, 10_012, 3.667)
    assert abs(10_012 - int(3.667 * 2**30) // (16 * 24_576)) <= 1  # 3.667 GiB is rounded to 0.5 MiB
    assert "enable-expert-parallel" not in result["engine_args"]
    dp = _plan(L4X4, "qwen3-30b-a3b", data_parallel_size=2, tensor_parallel_size=2)
    assert (dp["prediction"]["kv_cache_tokens"], dp["prediction"]["gpu_blocks"]) == (74_752, 4_672)
    assert 74_752 * 2 == 149_504  # the pinned layout predicts what was compared


@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-3.1-70b", "qwen3-14b", "gemma-3-27b"])
def test_a_dense_model_never_gets_data_parallelism(name: str) -> None:
    result = _plan(H100X8, name)
    assert result["parallel"]["data_parallel_size"] == 1
    assert "data-parallel-size" not in result["engine_args"] and "data-parallel-size" not in result["reasons"]


def test_a_pinned_layout_skips_the_comparison() -> None:
    """On 4 L4 DeepSeek-V2-Lite needs TP 4, where the comparison would pick DP 4 x TP 1; any pin keeps it off."""
    for pins in ({"tensor_parallel_size": 4}, {"data_parallel_size": 2}, {"enable_expert_parallel": False},
                 {"kv_cache_memory_bytes": 2 * 2**30}):
        result = _plan(L4X4, "deepseek-v2-lite", **pins)
        assert "picked by predicted KV capacity" not in result["reasons"].get("data-parallel-size", ""), pins
        assert "MoE layouts compared" not in result["reasons"].get("data-parallel-size", ""), pins
        assert "fits one GPU per replica" not in result["reasons"].get("data-parallel-size", ""), pins
    pinned_tp1 = _plan(H200X8, "deepseek-v2-lite", tensor_parallel_size=1)
    assert (pinned_tp1["parallel"]["replicas"], pinned_tp1["prediction"]["kv_cache_tokens"]) == (8, 3_627_776)
    assert "data-parallel-size" not in pinned_tp1["reasons"]
    group = plan(L4X4, model("deepseek-v2-lite"), vllm_version="0.32.0", policy={"max_nodes": 2})
    assert group["parallel"]["data_parallel_size"] == 1  # one host only: a multi-node group keeps its TP/PP layout
    older = plan(L4X4, model("deepseek-v2-lite"), vllm_version="0.28.0")
    assert older["parallel"]["data_parallel_size"] == 1  # the comparison follows vLLM 0.32's source


# qwen3-30b-a3b: hidden 2048, moe_intermediate_size 768, 48 MoE layers, 128 experts, bf16: one expert of one layer is
# 3 x 2048 x 768 x 2 bytes = 9,437,184 bytes.
_EXPERT = 3 * 2048 * 768 * 2


def test_eplb_budgets_the_redundant_experts_and_the_migration_buffers() -> None:
    """vLLM 0.32 places E + R physical experts over the EP group (fused_moe/layer.py:72-85, 248-268) and allocates one
    MoE layer's local experts as EPLB's buffer before the profile, plus the profile's reservation of another copy
    unless the communicator is NIXL (eplb_state.py:492, rebalance_execute.py:704-718)."""
    base = _plan(H100X8, "qwen3-30b-a3b", tensor_parallel_size=4)
    eplb = _plan(H100X8, "qwen3-30b-a3b", tensor_parallel_size=4, enable_eplb=True,
                 eplb_config={"num_redundant_experts": 16})
    nixl = _plan(H100X8, "qwen3-30b-a3b", tensor_parallel_size=4, enable_eplb=True,
                 eplb_config={"num_redundant_experts": 16, "communicator": "nixl"})
    redundant = 48 * 16 // 4 * _EXPERT  # 4 more experts per GPU in each of the 48 layers
    buffer = (128 + 16) // 4 * _EXPERT  # one layer's 36 local experts
    gib = {name: p["memory_gib"]["weights"] for name, p in (("base", base), ("eplb", eplb), ("nixl", nixl))}
    assert gib["eplb"] - gib["base"] == pytest.approx((redundant + 2 * buffer) / 1024**3, abs=0.002), gib
    assert gib["nixl"] - gib["base"] == pytest.approx((redundant + buffer) / 1024**3, abs=0.002), gib
    kv = [p["prediction"]["kv_cache_tokens"] for p in (base, nixl, eplb)]
    assert kv[0] > kv[1] > kv[2], kv
    assert eplb["engine_args"]["enable-eplb"] is True
    assert eplb["engine_args"]["eplb-config"] == {"num_redundant_experts": 16}
    assert eplb["engine_args"]["enable-expert-parallel"] is True
    reason = eplb["reasons"]["enable-eplb"]
    assert reason.startswith("set by you: 144 experts over 4 GPUs (36 per GPU, 16 redundant)") and "2.32 GiB" in reason
    assert "one copy (NIXL)" in nixl["reasons"]["enable-eplb"]


def test_eplb_with_data_parallelism_spreads_the_experts_over_dp_x_tp() -> None:
    result = _plan(H100X8, "qwen3-30b-a3b", data_parallel_size=8, enable_eplb=True,
                   eplb_config={"num_redundant_experts": 8})
    assert result["parallel"]["data_parallel_size"] == 8
    assert result["reasons"]["enable-eplb"].startswith("set by you: 136 experts over 8 GPUs (17 per GPU, 8 redundant)")


@pytest.mark.parametrize(("engine_args", "needle"), [
    ({"eplb_config": {"num_redundant_experts": 8}},
     "eplb_config.num_redundant_experts = 8 needs EPLB (vLLM refuses it otherwise): set enable_eplb: true"),
    ({"enable_eplb": True},
     "--enable-eplb needs the experts spread over more than one GPU (vLLM: TP x DP > 1) but the plan runs TP 1 x DP 1"),
    ({"enable_eplb": True, "tensor_parallel_size": 4, "eplb_config": {"num_redundant_experts": 6}},
     "128 + 6 redundant = 134 experts evenly over the expert-parallel group of 4 GPUs (DP 1 x TP 4), and 134 is not a "
     "multiple of 4: set eplb_config.num_redundant_experts to 8"),
    ({"enable_eplb": True, "tensor_parallel_size": 4, "enable_expert_parallel": False},
     "--enable-eplb needs expert parallelism"),
    ({"enable_eplb": True, "tensor_parallel_size": 4, "eplb_config": {"num_redundant_experts": -1}},
     "eplb_config.num_redundant_experts must be a whole number >= 0, got -1"),
    ({"enable_eplb": True, "tensor_parallel_size": 4, "eplb_config": "{not json"}, "--eplb-config '{not json' is not JSON"),
])
def test_eplb_that_vllm_would_refuse_is_refused_with_what_to_change(engine_args: dict[str, Any], needle: str) -> None:
    with pytest.raises(PlanError) as err:
        _plan(H100X8, "qwen3-30b-a3b", **engine_args)
    assert needle in str(err.value)


def test_eplb_on_a_dense_model_is_refused() -> None:
    with pytest.raises(PlanError, match="balances the experts of an MoE model, and this model has none"):
        _plan(H100X8, "llama-3.1-8b", tensor_parallel_size=2, enable_eplb=True)


def test_eplb_on_the_cpu_lane_is_refused() -> None:
    cpu = json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "planner" / "cpu_host.json").read_text())
    with pytest.raises(PlanError, match=r"^--enable-eplb is not planned on the CPU lane: vLLM 0.32 runs EPLB on CUDA, "
                                        r"ROCm and XPU devices only"):
        plan(cpu, model("tiny-llama"), vllm_version="0.32.0", engine_args={"enable_eplb": True})
