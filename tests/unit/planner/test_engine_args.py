"""User engine arguments: the integer ones are options.INT_ENGINE_ARGS (one home), with the planner's messages."""

from __future__ import annotations

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.engine_args import (
    INT_ARGS,
    normalise_engine_args,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.errors import PlanError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.options import INT_ENGINE_ARGS
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import rules_for

RULES = rules_for("0.32.0")


def test_int_args_are_the_rules_int_engine_args() -> None:
    assert set(INT_ARGS) == {key.replace("_", "-") for key in INT_ENGINE_ARGS}
    assert {"kv-cache-memory-bytes", "optimization-level", "data-parallel-size"} <= set(INT_ARGS)


@pytest.mark.parametrize("key", ["tensor_parallel_size", "max_model_len", "kv_cache_memory_bytes", "max_num_seqs"])
def test_positive_ints_refuse_zero(key: str) -> None:
    with pytest.raises(PlanError, match=rf"--{key.replace('_', '-')} must be positive, not 0"):
        normalise_engine_args({key: 0}, RULES)


@pytest.mark.parametrize("key", ["seed", "optimization_level"])
def test_zero_is_allowed_where_the_rules_start_at_zero(key: str) -> None:
    assert normalise_engine_args({key: 0}, RULES) == {key.replace("_", "-"): 0}
    with pytest.raises(PlanError, match=rf"--{key.replace('_', '-')} must be 0 or more, not -1"):
        normalise_engine_args({key: -1}, RULES)


def test_ints_are_converted() -> None:
    assert normalise_engine_args({"max-num-seqs": "64", "tp": 2.0, "seed": "7"}, RULES) == {
        "max-num-seqs": 64, "tensor-parallel-size": 2, "seed": 7}
