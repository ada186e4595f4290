"""Data parallelism (gpu_lane.py) inside one host (every rank in one replica) and over a multi-node group's hosts
(policy max_nodes: the ranks spread evenly, one container per host): the per-GPU plan of its TP layout.

On the recorded 8x H100 NVSwitch facts (tests/fixtures/gpu/h100x8_nvswitch). vLLM 0.32 runs each data-parallel rank as
its own engine of TP x PP GPUs (v1/engine/core.py:1473-1482), with its own scheduler (config/scheduler.py:99):
the memory plan, max_num_seqs, max_num_batched_tokens and the logged KV size are per engine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan

from vllm_fleet.cli import format_plan

from .planner_data import facts, model

H100X8 = facts("h100x8_nvswitch")
CPU = json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "planner" / "cpu_host.json").read_text())


def _plan(model_name: str = "llama-3.1-8b", host: dict[str, Any] | None = None, **engine_args: Any) -> dict[str, Any]:
    return plan(H100X8 if host is None else host, model(model_name), vllm_version="0.32.0", engine_args=engine_args)


def test_dp4_x_tp2_is_one_replica_of_all_eight_gpus() -> None:
    result = _plan(data_parallel_size=4, tensor_parallel_size=2)
    assert result["parallel"] == {"tensor_parallel_size": 2, "pipeline_parallel_size": 1, "replicas": 1,
                                  "gpus_per_replica": 8, "nodes": 1, "data_parallel_size": 4}
    assert result["engine_args"]["data-parallel-size"] == 4 and result["engine_args"]["tensor-parallel-size"] == 2
    assert result["cli_args"][:4] == ["--data-parallel-size", "4", "--tensor-parallel-size", "2"]
    reason = result["reasons"]["data-parallel-size"]
    assert "DP x TP = 4 x 2 = 8 GPUs per replica, 1 replica(s) on the host's 8 GPUs" in reason
    assert "\n" not in reason and "per engine" in reason


def test_dp2_x_tp2_is_two_replicas_of_four_gpus() -> None:
    result = _plan(data_parallel_size=2, tensor_parallel_size=2)
    par = result["parallel"]
    assert (par["replicas"], par["gpus_per_replica"], par["data_parallel_size"]) == (2, 4, 2)
    assert "DP x TP = 2 x 2 = 4 GPUs per replica, 2 replica(s)" in result["reasons"]["data-parallel-size"]
    staged = _plan(data_parallel_size=2, tensor_parallel_size=2, pipeline_parallel_size=2)
    assert (staged["parallel"]["replicas"], staged["parallel"]["gpus_per_replica"], staged["parallel"]["nodes"]) == (
        1, 8, 1)
    assert "DP x TP x PP = 2 x 2 x 2 = 8 GPUs per replica" in staged["reasons"]["data-parallel-size"]
    assert staged["reasons"]["pipeline-parallel-size"] == "set by you"  # its stages stay on this host


def test_the_per_gpu_plan_is_the_tp_plans_and_the_scheduler_is_per_rank() -> None:
    """Each rank holds the whole model over its TP GPUs: memory, KV prediction and scheduler limits do not change."""
    alone, ranks = _plan(tensor_parallel_size=2), _plan(data_parallel_size=4, tensor_parallel_size=2)
    assert ranks["memory_gib"] == alone["memory_gib"]
    assert ranks["prediction"] == alone["prediction"]
    for key in ("gpu-memory-utilization", "max-model-len", "max-num-seqs", "max-num-batched-tokens"):
        assert ranks["engine_args"][key] == alone["engine_args"][key], key
    for key in ("max-num-seqs", "max-num-batched-tokens"):
        assert ranks["reasons"][key] == alone["reasons"][key] + (
            "; per data-parallel rank (each of the 4 engines schedules its own)")
    assert alone["parallel"]["replicas"] == 4 and alone["parallel"]["data_parallel_size"] == 1
    assert "data-parallel-size" not in alone["engine_args"]


def test_the_planner_picks_tp_from_the_gpus_each_rank_may_use() -> None:
    result = _plan("llama-3.1-70b", data_parallel_size=2)
    par = result["parallel"]
    assert (par["tensor_parallel_size"], par["gpus_per_replica"], par["replicas"]) == (4, 8, 1)
    assert "2 data-parallel ranks leave each at most 4 of the 8 GPUs" in result["reasons"]["tensor-parallel-size"]
    small = _plan(data_parallel_size=4)  # 8B fits one GPU: 4 ranks of TP 1, two replicas on the host
    assert (small["parallel"]["tensor_parallel_size"], small["parallel"]["gpus_per_replica"],
            small["parallel"]["replicas"]) == (1, 4, 2)


def test_cli_says_the_kv_line_is_logged_once_per_engine() -> None:
    text = format_plan(_plan(data_parallel_size=4, tensor_parallel_size=2))
    assert "parallel: DP=4 TP=2 PP=1 replicas=1 nodes=1" in text
    assert "1,096,032 tokens" in text and (
        "once per engine (each of the 4 data-parallel engines logs its own; 4,384,128 tokens in all)" in text)
    assert "vllm serve " in text and "--data-parallel-size 4 --tensor-parallel-size 2" in text


def test_moe_with_pinned_data_parallelism_counts_the_experts_over_dp_x_tp() -> None:
    """Qwen3-30B-A3B (128 experts of 3 x 2048 x 768 in 48 layers, bf16): 57,982,058,496 expert bytes. Pinned DP 4 x TP 2
    spreads them over 8 GPUs (7,247,757,312 B each), TP 2 alone over 2 (28,991,029,248 B); the rest (attention split by
    TP 2 plus the router, 931,528,704 B; embedding and lm_head 622,329,856 B) is the same: 8.197 vs 28.447 GiB."""
    result = _plan("qwen3-30b-a3b", data_parallel_size=4, tensor_parallel_size=2)
    alone = _plan("qwen3-30b-a3b", tensor_parallel_size=2)
    assert result["parallel"]["gpus_per_replica"] == 8
    assert (result["memory_gib"]["weights"], alone["memory_gib"]["weights"]) == (8.197, 28.447)
    assert round((7_247_757_312 + 931_528_704 + 622_329_856) / 2**30, 3) == 8.197
    assert result["prediction"]["kv_cache_tokens"] == 1_418_912 > alone["prediction"]["kv_cache_tokens"]
    assert not any("the KV prediction is low" in w for w in result["warnings"])
    assert any("vLLM runs the 4 ranks as one group in lock step" in w for w in result["warnings"])
    assert "DP x TP = 8 GPUs" in result["reasons"]["enable-expert-parallel"]
    assert result["reasons"]["data-parallel-size"].endswith(
        "vLLM logs one KV line per engine: 1,418,912 tokens each, 5,675,648 in all over the 4 engines")
    pinned = _plan("qwen3-30b-a3b", data_parallel_size=4, tensor_parallel_size=1, enable_expert_parallel=True)
    assert pinned["engine_args"]["enable-expert-parallel"] is True  # passed through, as without DP
    assert pinned["reasons"]["enable-expert-parallel"] == "set by you"
    # DP 4 x TP 1: experts over 4 GPUs (14,495,514,624 B), attention and router whole (48 x 38,281,216 B), embedding
    # and lm_head whole (1,244,659,712 B): 17,577,672,704 B.
    assert pinned["memory_gib"]["weights"] == round(17_577_672_704 / 2**30, 3) == 16.37


@pytest.mark.parametrize(("engine_args", "message"), [
    ({"data_parallel_size": 3, "tensor_parallel_size": 4},
     "--data-parallel-size 3 x --tensor-parallel-size 4 needs 12 GPUs but the host has 8: data parallelism runs "
     "every rank inside one host; lower data_parallel_size to at most 2"),
    ({"data_parallel_size": 9},
     "--data-parallel-size 9 needs 9 GPUs but the host has 8: data parallelism runs every rank inside one host; "
     "lower data_parallel_size to at most 8"),
    ({"data_parallel_size": 2, "tensor_parallel_size": 2, "pipeline_parallel_size": 3},
     "--data-parallel-size 2 x --tensor-parallel-size 2 x --pipeline-parallel-size 3 needs 12 GPUs but the host has "
     "8: data parallelism runs every rank inside one host; lower data_parallel_size to at most 1"),
])
def test_data_parallelism_that_does_not_fit_the_host_is_refused(engine_args: dict[str, Any], message: str) -> None:
    with pytest.raises(PlanError) as err:
        _plan(**engine_args)
    assert str(err.value) == message


def test_data_parallelism_over_several_hosts_spreads_the_ranks() -> None:
    """policy max_nodes (a multi-node group's size): the ranks spread over the hosts, one container per host."""
    result = plan(H100X8, model("llama-3.1-8b"), vllm_version="0.32.0",
                  engine_args={"data_parallel_size": 4, "tensor_parallel_size": 4}, policy={"max_nodes": 2})
    assert result["parallel"] == {"tensor_parallel_size": 4, "pipeline_parallel_size": 1, "replicas": 1,
                                  "gpus_per_replica": 8, "nodes": 2, "data_parallel_size": 4}
    assert result["cli_args"][:4] == ["--data-parallel-size", "4", "--tensor-parallel-size", "4"]
    assert "4 engines over the multi-node group's 2 hosts, 2 per host" in result["reasons"]["data-parallel-size"]
    alone = _plan(tensor_parallel_size=4)
    assert result["memory_gib"] == alone["memory_gib"] and result["prediction"] == alone["prediction"]
    picked = plan(H100X8, model("llama-3.1-70b"), vllm_version="0.32.0", engine_args={"data_parallel_size": 4},
                  policy={"max_nodes": 2})  # TP picked from the 8 // 2 GPUs each rank may use; never PP
    assert (picked["parallel"]["tensor_parallel_size"], picked["parallel"]["pipeline_parallel_size"]) == (4, 1)
    assert "2 data-parallel ranks per host leave each at most 4 of a host's 8 GPUs" in (
        picked["reasons"]["tensor-parallel-size"])
    assert format_plan(result).count("parallel: DP=4 TP=4 PP=1 replicas=1 nodes=2") == 1


@pytest.mark.parametrize(("engine_args", "nodes", "message"), [
    ({"data_parallel_size": 3}, 2,
     "--data-parallel-size 3 does not split evenly over the 2 hosts of the multi-node group: every host runs the same "
     "number of ranks (data_parallel_size / 2); set data_parallel_size to a multiple of 2 (2, 4) on every host of "
     "the group"),
    ({"data_parallel_size": 2, "tensor_parallel_size": 2, "pipeline_parallel_size": 2}, 2,
     "--pipeline-parallel-size 2 with --data-parallel-size 2 over the 2 hosts of the multi-node group is refused: "
     "each data-parallel rank runs as one tensor-parallel instance inside one host (no pipeline stages across "
     "hosts): drop pipeline_parallel_size from the group's hosts"),
    ({"data_parallel_size": 6, "tensor_parallel_size": 8}, 3,
     "--data-parallel-size 6 x --tensor-parallel-size 8 over the 3 hosts of the multi-node group puts 2 ranks of 8 "
     "GPUs = 16 GPUs on each host but a host has 8: lower data_parallel_size to at most 3 or tensor_parallel_size to "
     "at most 4"),
])
def test_data_parallelism_over_hosts_that_cannot_be_laid_out_is_refused(
        engine_args: dict[str, Any], nodes: int, message: str) -> None:
    with pytest.raises(PlanError) as err:
        plan(H100X8, model("llama-3.1-8b"), vllm_version="0.32.0", engine_args=engine_args,
             policy={"max_nodes": nodes})
    assert str(err.value) == message


def test_data_parallelism_on_the_cpu_lane_is_refused() -> None:
    with pytest.raises(PlanError, match=r"^--data-parallel-size 2 is not planned on the CPU lane: .*leave "
                                        r"data_parallel_size unset and add hosts$"):
        _plan("tiny-llama", host=CPU, data_parallel_size=2)


def test_an_moes_data_parallel_step_is_divided_by_the_ranks_whose_tokens_its_experts_gather() -> None:
    """vLLM 0.32's default allgather all2all hands each rank's experts DP x max_num_batched_tokens rows (all2all.py:
    109-124, unchunked workspaces: modular_kernel.py:1274-1298), so the planner divides the profile's step by DP (not
    below 2048); a dense model's ranks never meet and keep the profile's step; a pinned value always wins."""
    moe = _plan("qwen3-30b-a3b", data_parallel_size=4, tensor_parallel_size=2)
    dense = _plan(data_parallel_size=4, tensor_parallel_size=2)
    alone = _plan("qwen3-30b-a3b", tensor_parallel_size=2)
    assert alone["engine_args"]["max-num-batched-tokens"] == dense["engine_args"]["max-num-batched-tokens"] == 8192
    assert moe["engine_args"]["max-num-batched-tokens"] == 2048
    assert "each rank's experts see 4 x 2048 = 8192 rows" in moe["reasons"]["max-num-batched-tokens"]
    pinned = _plan("qwen3-30b-a3b", data_parallel_size=4, tensor_parallel_size=2, max_num_batched_tokens=8192)
    assert pinned["engine_args"]["max-num-batched-tokens"] == 8192
    assert pinned["memory_gib"]["activation"] > moe["memory_gib"]["activation"]
