"""Weights per GPU by layout (issue 33 item 2) and expert parallelism by rule (issue 35 item 3).

The per-GPU split (planner/weight_split.py) is checked on the real published config.json fixtures of
tests/fixtures/planner/checkpoints (sources in SOURCES.json): against the published per-GPU sizes where a public log
gives one at a stated layout (DeepSeek-R1 TP 8, experts sliced; Qwen3-235B-A22B-FP8 TP 8 + EP), and by behaviour for
the DP layouts (no public "Model loading took" line of a DP + EP DeepSeek or Qwen3 start was found: the DP figures are
checked as the same tensors, re-laid: experts / (DP x TP), the rest whole per rank).
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model import (
    stage_layers,
    weights_bytes_per_gpu,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import load_model
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.weight_split import weight_split

from .planner_data import facts, model
from .test_checkpoint_formats import CHECKPOINTS, GIB, SOURCES, spec_of

H100X8 = facts("h100x8_nvswitch")


def _split(fixture: str, tp: int, dp: int = 1, pp: int = 1, ep: bool = False) -> Any:
    spec = spec_of(fixture)
    return spec, weight_split(spec, tp, pp, 2, spec.quantization, tp * dp, ep, dp=dp)


def _parts(split: Any) -> dict[str, int]:
    return {p.name: p.bytes for p in split.parts}


@pytest.mark.parametrize(("fixture", "tp", "ep"), [("deepseek-r1", 8, False), ("qwen3-235b-a22b-fp8", 8, True)])
def test_the_split_adds_up_to_the_published_per_gpu_size(fixture: str, tp: int, ep: bool) -> None:
    """The parts add up to the memory plan's figure, which is within 3 % of the published per-GPU log at its layout
    (SOURCES.json: HabanaAI/vllm-fork#809 'took 79.41 GiB' for R1 at TP 8; the L40S TP 8 + EP case's 27.72 GiB)."""
    published = SOURCES[fixture]["published"]
    assert published["per_gpu"] and published["tp"] == tp and published.get("expert_parallel", False) == ep
    spec, split = _split(fixture, tp, ep=ep)
    assert split.total == pytest.approx(max(weights_bytes_per_gpu(spec, tp, 1, 2, spec.quantization, tp)), abs=16)
    assert split.total == pytest.approx(published["value_gib"] * GIB, rel=0.03)
    assert all(line.count("\n") == 0 and "GiB per GPU: " in line for line in split.reasons().values())


@pytest.mark.parametrize("fixture", [
    "../architectures/nemotron-3-nano-30b-a3b-bf16",  # Nemotron-H: a block is a mixer or an MLP / MoE, one norm
    "../architectures/nemotron-h-56b-base-8k",
    "qwen3.6-35b-a3b-nvfp4",  # gated delta + MoE, vision tower, an NVFP4 lm_head
    "kimi-k2.5",  # MLA + MoE, vision tower
])
@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 2), (4, 1)])
def test_the_split_is_the_memory_plans_weights_for_every_layer_kind(fixture: str, tp: int, pp: int) -> None:
    """The reason lines' parts come from the same per-layer parts the memory plan sums (model.layer_parts,
    model.edge_parts). They had been counted on their own: for Nemotron-H every block as a mixer plus an MLP, so
    Nemotron-3-Nano's parts added up to 2.2x its weights."""
    spec = spec_of(fixture)
    split = weight_split(spec, tp, pp, 2, spec.quantization, tp, False)
    assert split.total == pytest.approx(max(weights_bytes_per_gpu(spec, tp, pp, 2, spec.quantization, tp)), abs=64)


def test_dp16_with_ep_shards_the_experts_over_all_16_ranks_and_keeps_the_rest_whole_per_rank() -> None:
    """DeepSeek-R1 over DP 16 x TP 1 with EP: 256 experts / 16 = 16 whole experts per GPU in each of the 58 MoE
    layers (determine_expert_map); attention, dense layers, shared experts, routers and the vocab-parallel embedding
    and lm_head are whole on every rank (TP 1). Against TP 8 (the published layout) the experts per GPU halve and the
    attention grows eightfold, except MLA's replicated latent projections."""
    dp16 = _split("deepseek-r1", 1, dp=16, ep=True)[1]
    tp1 = _split("deepseek-r1", 1)[1]
    tp8 = _split("deepseek-r1", 8)[1]
    wide, whole, tp8_parts = _parts(dp16), _parts(tp1), _parts(tp8)
    assert wide["routed_experts"] == pytest.approx(whole["routed_experts"] / 16, rel=1e-9)
    assert wide["routed_experts"] == pytest.approx(tp8_parts["routed_experts"] / 2, rel=1e-9)
    for part in ("attention", "dense_mlp", "shared_experts", "routers", "embedding", "lm_head"):
        assert wide[part] == whole[part], part
    assert tp8_parts["routers"] == wide["routers"]  # routers are replicated on every GPU at any TP
    assert tp8_parts["embedding"] == pytest.approx(wide["embedding"] / 8, rel=1e-9)  # vocab-parallel over TP
    assert 1 < wide["attention"] / tp8_parts["attention"] < 8  # the latent down-projections are not split
    # The whole-copy figure preflight refused with (111 GiB on one H100: each rank holding every expert) vs the
    # sharded one: about half.
    assert dp16.total / GIB == pytest.approx(55.84, abs=0.01)
    assert dp16.total == pytest.approx(tp1.total - whole["routed_experts"] * 15 / 16, abs=16)
    reasons = dp16.reasons()
    assert reasons["weights.routed_experts"].startswith(
        "38.07 GiB per GPU: 256 experts x 58 MoE layers over the expert-parallel group of 16 GPUs (DP 16 x TP 1): "
        "16 whole experts per GPU (vllm/model_executor/layers/fused_moe/expert_map_manager.py:67-69)")
    assert "a copy on each of the 16 data-parallel ranks (DP-attention)" in reasons["weights.attention"]
    assert "whole on every GPU" in reasons["weights.routers"]


def test_uneven_experts_say_which_ranks_hold_one_more() -> None:
    """determine_expert_map gives the first E % EP ranks one expert more (expert_map_manager.py:66-69)."""
    split = _split("gpt-oss-20b", 1, dp=3, ep=True)[1]  # 32 experts over 3 GPUs
    assert "10 or 11 whole experts per GPU (the first 2 ranks hold one more" in split.reasons()["weights.routed_experts"]


@pytest.mark.parametrize(("layers", "pp", "expected"), [
    (61, 2, [31, 30]), (61, 4, [15, 15, 16, 15]), (80, 3, [27, 27, 26]), (62, 4, [15, 16, 16, 15]), (32, 4, [8] * 4),
])
def test_pipeline_stages_split_the_layers_as_get_pp_indices(layers: int, pp: int, expected: list[int]) -> None:
    """vLLM 0.32 distributed/utils.py:153-158 (0.33 :225-230): an even split, then ``partitions[-i] += 1`` for i in
    2 .. remainder + 1: the extra layers go to the stages before the last, from the second-to-last backwards."""
    assert stage_layers(layers, pp) == expected
    assert sum(expected) == layers


def test_the_largest_stage_sizes_the_gpu_and_the_plan_says_which() -> None:
    """Llama-3.1-70B (80 layers) over PP 3: stages of 27, 27, 26 layers; the first holds the embedding, the last
    lm_head; the plan's weights are the fullest stage's (the first: 27 layers and the embedding) and its reason
    names it."""
    result = plan(H100X8, model("llama-3.1-70b"), vllm_version="0.32.0", policy={"max_nodes": 3},
                  engine_args={"tensor_parallel_size": 8, "pipeline_parallel_size": 3})
    line = result["reasons"]["weights.stages"]
    assert line == "pipeline stages hold [27, 27, 26] layers; stage 0 (layers 0-26) holds the most weights and sizes the GPU"
    parts = {k: v for k, v in result["reasons"].items() if k.startswith("weights.") and k != "weights.stages"}
    total = sum(float(v.split(" GiB")[0]) for v in parts.values())
    assert total == pytest.approx(result["memory_gib"]["weights"], abs=0.05)


def _checkpoint(name: str) -> dict[str, Any]:
    return load_model(str(CHECKPOINTS / name))[0]


def test_ep_is_off_for_plain_tp_as_the_recipes_run_it() -> None:
    """gpt-oss-120b (MXFP4 experts) pinned to TP 2 on H100s: plain TP, the form vLLM's recipe serves it in
    (vllm-project/recipes OpenAI/GPT-OSS.md:46, '--tensor-parallel-size 2', no --enable-expert-parallel)."""
    result = plan(H100X8, _checkpoint("gpt-oss-120b"), vllm_version="0.32.0", engine_args={"tensor_parallel_size": 2})
    assert "enable-expert-parallel" not in result["engine_args"]
    reason = result["reasons"]["enable-expert-parallel"]
    assert reason.startswith("off: plain TP 2 slices each of the 128 experts over the 2 GPUs")
    assert "OpenAI/GPT-OSS.md:46-47" in reason
    assert "each sliced over 2 GPUs (DP 1 x TP 2, expert parallelism off)" in result["reasons"]["weights.routed_experts"]
    pinned = plan(H100X8, _checkpoint("gpt-oss-120b"), vllm_version="0.32.0",
                  engine_args={"tensor_parallel_size": 2, "enable_expert_parallel": True})
    assert pinned["engine_args"]["enable-expert-parallel"] is True
    assert pinned["reasons"]["enable-expert-parallel"] == "set by you"


def test_block_fp8_experts_sliced_by_tp_load_on_0_32_so_ep_stays_off() -> None:
    """Qwen3-235B-A22B-FP8 (block FP8, 128 x 128) at TP 8: each expert's 1536-wide shard is 192, not a multiple of
    128; vLLM 0.32 refines the scales to a 64 block (fused_moe/oracle/fp8.py:311-317, gcd(128, 128, 192, 4096)) and
    loads it on the Triton kernels, so plain TP is what vLLM runs: EP stays off, by rule, and pinning it still wins."""
    config = _checkpoint("qwen3-235b-a22b-fp8")
    result = plan(H100X8, config, vllm_version="0.32.0", engine_args={"tensor_parallel_size": 8})
    assert result["engine_args"].get("enable-expert-parallel") in (None, False)
    assert result["reasons"]["enable-expert-parallel"].startswith("off: plain TP 8 slices each of the 128 experts")
    on = plan(H100X8, config, vllm_version="0.32.0",
              engine_args={"tensor_parallel_size": 8, "enable_expert_parallel": True})
    assert on["engine_args"]["enable-expert-parallel"] is True and on["reasons"]["enable-expert-parallel"] == \
        "set by you"


def test_ep_with_data_parallelism_is_better_and_eplb_requires_it() -> None:
    dp = plan(H100X8, model("qwen3-30b-a3b"), vllm_version="0.32.0", engine_args={"data_parallel_size": 8})
    assert dp["engine_args"]["enable-expert-parallel"] is True
    reason = dp["reasons"]["enable-expert-parallel"]
    assert reason.startswith("better: DP-attention with EP, data parallelism set by you")
    assert "DeepSeek/DeepSeek-V3.md:70-73" in reason
    eplb = plan(H100X8, model("qwen3-30b-a3b"), vllm_version="0.32.0",
                engine_args={"tensor_parallel_size": 4, "enable_eplb": True})
    assert eplb["engine_args"]["enable-expert-parallel"] is True
    assert eplb["reasons"]["enable-expert-parallel"].startswith("required: --enable-eplb needs expert parallelism")


# --- The per-GPU split of the checkpoints with a published size (test_checkpoint_sizes.py), by layout ------------


@pytest.mark.parametrize("fixture", ["ldcc-qwen2.5-72b-instruct-ko-awq", "gsjl-qwen2.5-32b-instruct-gptq-marlin",
                                     "solidrust-meta-llama-3-8b-instruct-awq"])
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_dense_quantized_checkpoints_split_by_tp_and_copy_per_dp_rank(fixture: str, tp: int) -> None:
    """AWQ / GPTQ dense checkpoints: every linear layer, the embedding and lm_head split over TP (8 KV heads divide
    TP <= 8), only the norms whole; a DP rank holds its own copy, so DP 2 x TP t weighs what TP t weighs. The TP 1
    figure is the published size (test_checkpoint_sizes.py), so TP t is that size / t plus the norms."""
    published = SOURCES[fixture]["published"]
    whole = _parts(_split(fixture, 1)[1])
    split = _parts(_split(fixture, tp)[1])
    norms = whole["norms"]
    assert split["norms"] == norms
    for name in ("attention", "dense_mlp", "embedding", "lm_head"):
        assert split[name] == pytest.approx(whole[name] / tp, rel=1e-6), name
    total = sum(split.values())
    assert total == pytest.approx((sum(published["shards_gb"]) * 1e9 - norms) / tp + norms, rel=0.03)
    assert _split(fixture, tp, dp=2)[1].total == sum(split.values())


def test_nvfp4_moe_experts_follow_ep_and_dp_while_attention_stays_whole_per_rank() -> None:
    """nvidia/Qwen3.6-35B-A3B-NVFP4 (256 experts, 40 layers, 10 full-attention + 30 gated-delta mixers): at TP 2 the
    W4A16-NVFP4 experts are sliced in two; at DP 2 x TP 1 with EP each GPU holds 128 whole experts per layer and a
    whole copy of everything else (DP-attention); at DP 4 + EP 64 experts; the FP8 attention is the same bytes in
    every layout that has TP 1."""
    whole = _parts(_split("qwen3.6-35b-a3b-nvfp4", 1)[1])
    tp2 = _parts(_split("qwen3.6-35b-a3b-nvfp4", 2)[1])
    for dp in (2, 4):
        _spec, split = _split("qwen3.6-35b-a3b-nvfp4", 1, dp=dp, ep=True)
        parts = _parts(split)
        assert parts["routed_experts"] == pytest.approx(whole["routed_experts"] / dp, rel=1e-9)
        for name in ("attention", "shared_experts", "routers", "embedding", "lm_head", "vision"):
            assert parts[name] == whole[name], name
        assert f"{256 // dp} whole experts per GPU" in split.reasons()["weights.routed_experts"]
    assert tp2["routed_experts"] == pytest.approx(whole["routed_experts"] / 2, rel=1e-9)
    assert tp2["routers"] == whole["routers"]  # the router is whole on every GPU
    assert whole["routed_experts"] > 0.6 * sum(whole.values())  # most of the 22 GB are the experts


def test_gemma4_full_attention_layers_replicate_their_4_kv_heads_beyond_tp_4() -> None:
    """nvidia/Gemma-4-31B-IT-NVFP4: the 10 full-attention layers have 4 KV heads of 512 (the 50 sliding ones 16 of
    256). At TP 8 each GPU keeps one whole KV head of a full layer (vLLM replicates KV heads when TP > KV heads),
    so those layers' k/v bytes stop halving after TP 4 while q/o keep splitting."""
    spec = spec_of("gemma-4-31b-it-nvfp4")
    assert (spec.full_kv, spec.head_dim, spec.num_kv_heads) == ((4, 512), 256, 16)
    h, heads = spec.hidden_size, spec.num_heads
    for tp, kv_heads in ((1, 4), (4, 1), (8, 1)):
        split, repl = spec.attention_params_per_layer(tp, "full")
        assert (split, repl) == (2 * h * heads * 512 / tp + 2 * h * 512 * kv_heads, 0.0)
    assert spec.attention_params_per_layer(1, "sliding")[0] == 2 * h * heads * 256 + 2 * h * 256 * 16
