"""Decode context parallelism (``decode_context_parallel_size``) in the KV plan (issue 26, item 3).

vLLM 0.32/0.33 shard a full-attention request's tokens over the DCP ranks (each keeps cdiv(len, dcp) tokens:
FullAttentionSpec.max_memory_usage_bytes, v1/kv_cache_interface.py:602-607 / :643-648) while the pool per GPU is
unchanged, and require TP to be a multiple of DCP (config/parallel.py:590-596). No public start-up log with DCP that
prints both "Available KV cache memory" and "GPU KV cache size" was found: behaviour only, against vLLM's rule.
DeepSeek-R1's config is the verbatim fixture of test_checkpoint_sizes.py.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan

from .planner_data import FIXTURES, facts

R1 = json.loads((FIXTURES / "planner" / "checkpoints" / "deepseek-r1" / "config.json").read_text())
QWEN35 = json.loads((FIXTURES / "planner" / "architectures" / "qwen3.5-27b" / "config.json").read_text())


def h200x8() -> dict:
    f = facts("h200x2")
    f["gpus"] = [dict(f["gpus"][0], index=i) for i in range(8)]
    f["nvlink_domains"], f["gpu_count"] = [list(range(8))], 8
    return copy.deepcopy(f)


def test_dcp_divides_the_blocks_a_request_needs_not_the_pool() -> None:
    base = plan(h200x8(), R1, vllm_version="0.33.0", engine_args={"tensor_parallel_size": 8, "max_model_len": 32768})
    args = {"tensor_parallel_size": 8, "max_model_len": 32768, "decode_context_parallel_size": 8}
    dcp = plan(h200x8(), R1, vllm_version="0.33.0", engine_args=args)
    assert dcp["prediction"]["gpu_blocks"] == base["prediction"]["gpu_blocks"]
    block = base["prediction"]["block_size"]
    per_request = math.ceil(math.ceil(32768 / 8) / block)
    assert dcp["prediction"]["max_concurrency"] == pytest.approx(dcp["prediction"]["gpu_blocks"] / per_request, abs=0.01)
    assert dcp["prediction"]["kv_cache_tokens"] == pytest.approx(8 * base["prediction"]["kv_cache_tokens"], rel=0.01)
    assert dcp["engine_args"]["decode-context-parallel-size"] == 8
    assert "1/8 of a request's full-attention tokens" in dcp["reasons"]["decode-context-parallel"]


def test_dcp_picks_only_tensor_parallel_sizes_it_divides() -> None:
    args = {"decode_context_parallel_size": 8, "max_model_len": 32768}
    result = plan(h200x8(), R1, vllm_version="0.33.0", engine_args=args)
    assert result["engine_args"]["tensor-parallel-size"] == 8 and "data-parallel-size" not in result["engine_args"]


def test_dcp_is_refused_where_vllm_refuses_it_or_the_planner_does_not_model_it() -> None:
    with pytest.raises(PlanError, match=r"tp_size=4 must be divisible by dcp_size=8"):
        plan(h200x8(), R1, engine_args={"tensor_parallel_size": 4, "decode_context_parallel_size": 8})
    with pytest.raises(PlanError, match=r"sliding-window, chunked or state layers is not planned"):
        plan(h200x8(), QWEN35, engine_args={"tensor_parallel_size": 2, "decode_context_parallel_size": 2})
