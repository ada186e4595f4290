"""Profiles with service targets: TP, max_num_seqs and max_num_batched_tokens chosen by predicted p99 TTFT / TPOT.

Hand-checked floors: a decode step reads every weight of the GPU once, so p99 TPOT can never be below
weights per GPU / achievable HBM bandwidth + the fixed step overhead (perf.STEP_OVERHEAD_S). Llama-3.1-8B is
8.03 B parameters, 16.06 GB in bf16 (14.96 GiB); an H100 SXM streams 3,350 GB/s x 0.841 (perf.BANDWIDTH_EFFICIENCY,
measured) = 2,818 GB/s: 5.70 ms + 1.5 ms = 7.2 ms at TP 1. Llama-3.1-70B is 70.6 B parameters, 141 GB in bf16:
25.0 ms per step at TP 2, 6.3 ms at TP 8 (+ 1.5 ms each).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import perf, targets
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.errors import PlanError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.inputs import resolve_profile
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import plan_for_model
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.planning import try_plan

from vllm_fleet.cli import main

ROOT = Path(__file__).resolve().parents[3]
LLAMA8B = str(ROOT / "tests/fixtures/planner/models/llama-3.1-8b")
LLAMA70B = str(ROOT / "tests/fixtures/planner/models/llama-3.1-70b")
H100 = "NVIDIA H100 80GB HBM3"
H100_BW = 3350e9 * perf.BANDWIDTH_EFFICIENCY
SHAPE = {"prompt_tokens": 1024, "output_tokens": 256}


def _plan(model: str, gpus: int, profile: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return plan_for_model({"gpu_name": H100, "gpu_count": gpus}, model, profile={**SHAPE, **profile}, **kw)


def _floor_ms(plan: dict[str, Any]) -> float:
    """Weights per GPU over the achievable bandwidth + the step overhead: no decode step is faster."""
    return (plan["memory_gib"]["weights"] * 2**30 / H100_BW + perf.STEP_OVERHEAD_S) * 1000


def test_tpot_target_binds_max_num_seqs() -> None:
    # 128 clients on one H100, a loose TTFT target: more sequences per step raise throughput and TPOT together,
    # so the largest max_num_seqs whose p99 TPOT meets 12 ms wins and the next step up is named as missing it.
    profile = {"p99_ttft_ms": 60000, "p99_tpot_ms": 12, "max_concurrency": 128}
    plan = _plan(LLAMA8B, 1, profile)
    seqs = plan["engine_args"]["max-num-seqs"]
    reason = plan["reasons"]["max-num-seqs"]
    up = targets.SEQS_LADDER[targets.SEQS_LADDER.index(seqs) + 1]
    assert f"p99 TPOT target binds: max_num_seqs {up} predicts p99 TPOT" in reason
    got = plan["performance"]
    assert got["targets"]["met"] and got["predicted"]["p99_tpot_ms"] <= 12
    assert got["predicted"]["p99_tpot_ms"] >= _floor_ms(plan) > 7.0  # the roofline floor, 7.2 ms by hand
    # the neighbour the reason names, pinned: predicted over the target; one step down: less throughput
    pins = {"max-num-seqs": up, "max-num-batched-tokens": plan["engine_args"]["max-num-batched-tokens"]}
    over = _plan(LLAMA8B, 1, profile, engine_args=pins)
    assert over["performance"]["predicted"]["p99_tpot_ms"] > 12 and not over["performance"]["targets"]["met"]
    down = targets.SEQS_LADDER[targets.SEQS_LADDER.index(seqs) - 1]
    under = _plan(LLAMA8B, 1, profile, engine_args={"max-num-seqs": down})
    assert under["performance"]["predicted"]["output_throughput"] < got["predicted"]["output_throughput"]
    assert "targets" in plan["reasons"] and plan["reasons"]["targets"].startswith("p99 TTFT <= 60000 ms, p99 TPOT")


def test_tpot_target_binds_tp() -> None:
    # Two H100s at 2 requests/s. TP 1 cannot decode a step under 7.2 ms (floor above), so a 6 ms p99 TPOT
    # target needs TP 2; the reason names the target and TP 1's miss. A loose target lets no target bind TP.
    tight = _plan(LLAMA8B, 2, {"p99_ttft_ms": 1000, "p99_tpot_ms": 6, "request_rate": 2})
    assert tight["parallel"]["tensor_parallel_size"] == 2
    assert "p99 TPOT target binds: TP 1 would serve" in tight["reasons"]["tensor-parallel-size"]
    assert "at its best predicts p99 TPOT" in tight["reasons"]["tensor-parallel-size"]
    assert tight["performance"]["targets"]["met"]
    tp1 = _plan(LLAMA8B, 2, {"p99_ttft_ms": 1000, "p99_tpot_ms": 6, "request_rate": 2},
                engine_args={"tensor-parallel-size": 1})
    assert tp1["performance"]["predicted"]["p99_tpot_ms"] >= _floor_ms(tp1) > 6
    loose = _plan(LLAMA8B, 2, {"p99_ttft_ms": 1000, "p99_tpot_ms": 50, "request_rate": 2})
    assert "no target binds TP" in loose["reasons"]["tensor-parallel-size"]
    # the request rate is the host's: one replica's share is simulated
    assert tp1["performance"]["workload"]["request_rate"] == 1.0
    assert tp1["performance"]["replicas_sharing_the_load"] == 2


def test_70b_tpot_target_needs_more_than_tp2() -> None:
    # 141 GB over two H100s: 25 ms per decode step at least; 20 ms needs TP 4 or 8
    plan = _plan(LLAMA70B, 8, {"p99_ttft_ms": 5000, "p99_tpot_ms": 20, "max_concurrency": 16})
    assert plan["parallel"]["tensor_parallel_size"] in (4, 8)
    assert "TP 2 misses: p99 TPOT" in plan["reasons"]["tensor-parallel-size"]
    assert 141e9 / 2 / H100_BW * 1000 > 20
    # 64 clients: TP 8 would serve more per GPU but queues the first tokens past 2 s; the TTFT target keeps TP 4
    busy = _plan(LLAMA70B, 8, {"p99_ttft_ms": 2000, "p99_tpot_ms": 30, "max_concurrency": 64})
    assert busy["parallel"]["tensor_parallel_size"] == 4 and busy["parallel"]["replicas"] == 2
    assert "p99 TTFT target binds: TP 8 would serve" in busy["reasons"]["tensor-parallel-size"]
    assert busy["performance"]["targets"]["met"] and busy["performance"]["workload"]["max_concurrency"] == 32


def test_impossible_targets_say_the_best_it_can_do() -> None:
    # 2 ms p99 TPOT for 70B: even TP 8 reads 17.6 GB per GPU per step, 6.3 ms + 1.5 ms. Nothing meets it.
    plan = _plan(LLAMA70B, 8, {"p99_ttft_ms": 100, "p99_tpot_ms": 2, "max_concurrency": 16})
    got = plan["performance"]["targets"]
    assert got["met"] is False
    floor = _floor_ms(plan)
    assert floor > 7.5 and got["missed_by_ms"]["p99_tpot_ms"] >= floor - 2
    assert plan["parallel"]["tensor_parallel_size"] == 8  # the closest: the fewest bytes per GPU per step
    assert any(w.startswith("service targets not met: ") and "ms > 2 ms (by " in w for w in plan["warnings"])
    assert "no layout meets them; the best predicts" in plan["reasons"]["max-num-seqs"]
    assert "no layout meets the targets; this one comes closest" in plan["reasons"]["tensor-parallel-size"]


def test_pinned_values_are_predicted_not_changed() -> None:
    profile = {"p99_ttft_ms": 60000, "p99_tpot_ms": 12, "max_concurrency": 128}
    plan = _plan(LLAMA8B, 1, profile, engine_args={"max-num-seqs": 128, "max-num-batched-tokens": 4096})
    assert plan["engine_args"]["max-num-seqs"] == 128 and plan["engine_args"]["max-num-batched-tokens"] == 4096
    assert plan["reasons"]["max-num-seqs"].startswith("set by you; p99 TTFT <= 60000 ms")
    assert plan["reasons"]["max-num-batched-tokens"].startswith("set by you; ")
    assert plan["performance"]["targets"]["met"] is False  # 128 sequences per step: p99 TPOT above 12 ms
    assert plan["performance"]["targets"]["missed_by_ms"]["p99_tpot_ms"] > 0
    pinned_tp = _plan(LLAMA70B, 8, {"p99_ttft_ms": 5000, "p99_tpot_ms": 20, "max_concurrency": 16},
                      engine_args={"tensor-parallel-size": 2})
    assert pinned_tp["parallel"]["tensor_parallel_size"] == 2
    assert pinned_tp["reasons"]["tensor-parallel-size"].startswith("set by you")
    assert pinned_tp["performance"]["targets"]["met"] is False
    assert pinned_tp["performance"]["predicted"]["p99_tpot_ms"] >= _floor_ms(pinned_tp) > 20


def test_without_targets_the_plan_is_unchanged() -> None:
    base = plan_for_model({"gpu_name": H100, "gpu_count": 1}, LLAMA8B, profile="chat")
    assert "targets" not in base["reasons"]
    assert base["performance"]["workload"]["max_concurrency"] == 16  # the chat profile's min_concurrency
    # a load without targets: predicted at that load, nothing chosen by it
    loaded = plan_for_model({"gpu_name": H100, "gpu_count": 1}, LLAMA8B, profile={**SHAPE, "max_concurrency": 32})
    assert loaded["performance"]["workload"]["max_concurrency"] == 32 and "targets" not in loaded["performance"]


def test_cpu_plan_notes_that_targets_are_not_used() -> None:
    plan = plan_for_model({"gpus": []}, LLAMA8B, profile={**SHAPE, "p99_tpot_ms": 50, "max_concurrency": 4})
    assert "not used to choose the plan" in plan["reasons"]["targets"] and "GPU plans only" in plan["reasons"]["targets"]


@pytest.mark.parametrize(("profile", "words"), [
    ({"p99_tpot_ms": 50}, "need the load they hold at: add max_concurrency"),
    ({"p99_tpot_ms": -5, "max_concurrency": 8}, "p99_tpot_ms must be a positive number of milliseconds"),
    ({"p99_ttft_ms": "fast", "max_concurrency": 8}, "p99_ttft_ms must be a positive number"),
    ({"p99_tpot_ms": 50, "max_concurrency": 8, "request_rate": 2}, "gives both max_concurrency and request_rate"),
    ({"p99_tpot_ms": 50, "max_concurrency": 0}, "max_concurrency must be a whole number >= 1"),
    ({"p99_tpot_ms": 50, "request_rate": 0}, "request_rate must be a positive number"),
    ({"ttft_p99_ms": 50, "max_concurrency": 8}, "profile key(s) ttft_p99_ms unknown"),
    ({"p99_tpot_ms": 50, "max_concurrency": 8, "goal": "speed"}, "goal 'speed' is not one of"),
])
def test_preflight_refuses_malformed_targets(profile: dict[str, Any], words: str) -> None:
    with pytest.raises(PlanError, match=None) as err:
        resolve_profile({**SHAPE, **profile})
    assert words in str(err.value)
    answer = try_plan({"gpu_name": H100, "gpu_count": 1}, LLAMA8B, "gpu-07", {"profile": {**SHAPE, **profile}})
    assert answer["plan"] is None and answer["error"] == f"gpu-07: {err.value}"


def test_cli_plan_with_targets(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--model", LLAMA8B, "--gpu", H100, "--gpu-count", "2", "--prompt-tokens", "1024",
            "--output-tokens", "256", "--p99-ttft-ms", "1000", "--p99-tpot-ms", "6", "--request-rate", "2"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "targets: p99 TTFT <= 1000 ms, p99 TPOT <= 6 ms at 2 requests/s: met by TP 2" in text
    assert "--request-rate 2.0 --num-prompts 120" in text
    assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["performance"]["targets"] == {"p99_ttft_ms": 1000.0, "p99_tpot_ms": 6.0, "met": True,
                                                "missed_by_ms": {}}
    assert main(["plan", "--model", LLAMA8B, "--gpu", H100, "--p99-tpot-ms", "6"]) == 2
    assert "add max_concurrency" in capsys.readouterr().err
    # predict: the workload's load is the targets' load; the plan it predicts is the one chosen for them
    assert main(["predict", "--model", LLAMA8B, "--gpu", H100, "--gpu-count", "2", "--p99-ttft-ms", "1000",
                 "--p99-tpot-ms", "6", "--dataset-name", "random", "--random-input-len", "1024",
                 "--random-output-len", "256", "--num-prompts", "120", "--request-rate", "2", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["p99_tpot_ms"] <= 6
