"""Unit tests for plugins/plugin_utils/deploy/rollout.py (health-gate sizing, serial batches, metric parsing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.rollout import (
    RolloutError,
    health_gate,
    metric_sum,
    retries_for,
    rollout_outcome,
    rollout_units,
    serial_batches,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.multinode import (
    check_multinode_facts,
)
from hypothesis import given
from hypothesis import strategies as st

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "deploy"
PLAN_CPU = json.loads((FIXTURES / "plan_cpu.json").read_text())
PLAN_GPU = json.loads((FIXTURES / "plan_h200x8_tp4.json").read_text())
METRICS = (FIXTURES / "metrics_running.txt").read_text()


@pytest.mark.parametrize(
    ("timeout", "interval", "expected"),
    [(60, 5, 12), (61, 5, 13), (0, 5, 1), (1, 10, 1), (300, 2.5, 120)],
)
def test_retries_for(timeout: float, interval: float, expected: int) -> None:
    assert retries_for(timeout, interval) == expected


@pytest.mark.parametrize(("timeout", "interval"), [(10, 0), (-1, 5), ("10", 5), (True, 5)])
def test_retries_for_rejects(timeout: object, interval: object) -> None:
    with pytest.raises(RolloutError):
        retries_for(timeout, interval)  # type: ignore[arg-type]


def test_health_gate_cpu_is_base_time() -> None:
    gate = health_gate(PLAN_CPU, interval_s=5)
    # 600 s base + 0.01 GiB / 0.5 GiB/s = 600.02 → 601
    assert gate == {"timeout_s": 601, "interval_s": 5, "retries": 121, "weights_gib": 1}


def test_health_gate_grows_with_weights() -> None:
    gate = health_gate(PLAN_GPU, interval_s=10)
    # 32.9 GiB per GPU × 4 GPUs = 131.6 GiB at 0.5 GiB/s = 263.2 s, + 300 s base
    assert gate["timeout_s"] == 564
    assert gate["retries"] == 57
    assert gate["weights_gib"] == 132
    faster = health_gate(PLAN_GPU, interval_s=10, load_gib_per_s=2.0)
    assert faster["timeout_s"] == 366
    bigger = dict(PLAN_GPU, memory_gib=dict(PLAN_GPU["memory_gib"], weights=65.8))
    assert health_gate(bigger)["timeout_s"] > gate["timeout_s"]


def test_health_gate_explicit_timeout_wins() -> None:
    assert health_gate(PLAN_GPU, interval_s=5, timeout_s=30) == {
        "timeout_s": 30, "interval_s": 5, "retries": 6, "weights_gib": 132,
    }


@pytest.mark.parametrize(
    ("plan", "kwargs", "message"),
    [
        ({"device": "tpu"}, {}, "plan.device"),
        (PLAN_CPU, {"interval_s": 0}, "interval_s"),
        (PLAN_CPU, {"load_gib_per_s": 0}, "load_gib_per_s"),
        ({"device": "cpu", "memory_gib": {"weights": "x"}}, {}, "plan.memory_gib.weights"),
        ([], {}, "plan must be a dict"),
    ],
)
def test_health_gate_rejects(plan: object, kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(RolloutError, match=message):
        health_gate(plan, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("n", "canary", "batch", "expected"),
    [
        (2, 1, "50%", [1, 1]),
        (10, 1, "25%", [1, 3, 3, 3]),
        (10, 2, 4, [2, 4, 4]),
        (1, 1, "50%", [1]),
        (3, 5, "50%", [3]),
        (7, 1, "100%", [1, 6]),
        (100, 1, "10%", [1] + [10] * 9 + [9]),
        (0, 1, "50%", [1]),
        (5, 1, "2", [1, 2, 2]),
    ],
)
def test_serial_batches(n: int, canary: int, batch: int | str, expected: list[int]) -> None:
    batches = serial_batches(n, canary, batch)
    assert batches == expected
    assert sum(batches) == max(n, 1)


@pytest.mark.parametrize(
    ("n", "canary", "batch"),
    [(-1, 1, "50%"), (2, 0, "50%"), (2, 1, "0%"), (2, 1, "150%"), (2, 1, "half"), (2, 1, 0), (2, 1, 1.5)],
)
def test_serial_batches_rejects(n: int, canary: int, batch: object) -> None:
    with pytest.raises(RolloutError):
        serial_batches(n, canary, batch)  # type: ignore[arg-type]


def test_metric_sum_reads_real_vllm_metrics() -> None:
    # tests/fixtures/deploy/metrics_running.txt: a /metrics body of a vLLM 0.32 server with requests
    assert metric_sum(METRICS, "vllm:num_requests_running") == 3.0
    assert metric_sum(METRICS, "vllm:num_requests_waiting") == 1.0
    assert metric_sum(METRICS, "vllm:no_such_metric") is None


def test_metric_sum_sums_label_sets_and_ignores_prefix_matches() -> None:
    text = "\n".join(
        [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0",model_name="a"} 2.0',
            'vllm:num_requests_running{engine="1",model_name="a"} 1.0 1700000000000',
            'vllm:num_requests_running_total{engine="0"} 99.0',
            "vllm:num_requests_runningx 50",
            "",
        ]
    )
    assert metric_sum(text, "vllm:num_requests_running") == 3.0
    assert metric_sum("vllm:num_requests_running 0.0\n", "vllm:num_requests_running") == 0.0


def test_metric_sum_rejects_garbage() -> None:
    with pytest.raises(RolloutError):
        metric_sum("vllm:num_requests_running abc\n", "vllm:num_requests_running")
    with pytest.raises(RolloutError):
        metric_sum(None, "x")  # type: ignore[arg-type]


# ---- 1,000 hosts: the serial list and what max_fail_percentage does (tests/integration/deploy/test_rollout_scale.py
# holds the same model against a real 1,000-host play) ---------------------------------------------------------------

def test_serial_batches_at_1000_hosts() -> None:
    assert serial_batches(1000, 1, "10%") == [1] + [100] * 9 + [99]
    assert serial_batches(1000, 5, "25%") == [5, 250, 250, 250, 245]
    assert serial_batches(1000, 1, "50%") == [1, 500, 499]
    assert serial_batches(1000, 10, 100) == [10] + [100] * 9 + [90]
    for canary, batch in [(1, "1%"), (3, "7%"), (1, 33), (50, "100%")]:
        batches = serial_batches(1000, canary, batch)
        assert sum(batches) == 1000 and batches[0] == canary and all(b >= 1 for b in batches)


@pytest.mark.parametrize(
    ("failing", "max_fail", "expected"),
    [
        (set(), 0, {"stopped_in_batch": None, "completed": 1000, "failed": 0, "not_started": 0}),
        ({0}, 0, {"stopped_in_batch": 0, "completed": 0, "failed": 1, "not_started": 999}),
        ({0}, 100, {"stopped_in_batch": 0, "completed": 0, "failed": 1, "not_started": 999}),  # whole batch failed
        (set(range(1, 6)), 5, {"stopped_in_batch": None, "completed": 995, "failed": 5, "not_started": 0}),
        (set(range(1, 7)), 5, {"stopped_in_batch": 1, "completed": 1, "failed": 100, "not_started": 899}),
        (set(range(101, 106)) | set(range(301, 307)), 5,
         {"stopped_in_batch": 4, "completed": 296, "failed": 105, "not_started": 599}),
        ({999}, 0, {"stopped_in_batch": 10, "completed": 901, "failed": 99, "not_started": 0}),
    ],
)
def test_rollout_outcome_at_1000_hosts(failing: set[int], max_fail: int, expected: dict[str, object]) -> None:
    assert rollout_outcome(serial_batches(1000, 1, "10%"), failing, max_fail) == expected


def test_rollout_outcome_rejects_a_bad_percentage() -> None:
    with pytest.raises(RolloutError, match="max_fail_percentage"):
        rollout_outcome([1, 2], set(), 101)


# ---- Multi-node groups roll as one unit --------------------------------------------------------------------------

def test_rollout_units_follow_the_groups_in_inventory_order() -> None:
    assert rollout_units([None, "g", "g", None, "h", "h", "h"]) == [1, 2, 1, 3]
    assert rollout_units([]) == []
    assert rollout_units(["", None]) == [1, 1]


def test_a_group_split_by_another_host_is_refused_with_what_to_do() -> None:
    with pytest.raises(RolloutError, match=r"group g: its hosts a, c are not next to each other .*\(b between them\)"
                                           r": list them together"):
        rollout_units(["g", None, "g"], ["a", "b", "c"])


def test_the_canary_takes_a_whole_group() -> None:
    # The example fleet's shape: a host, the two-node 405B group, two hosts; canary 1 then 50 %.
    assert serial_batches(5, 1, "50%", rollout_units([None, "g", "g", None, None])) == [1, 3, 1]
    assert serial_batches(4, 1, 1, [2, 1, 1]) == [2, 1, 1]  # the group first: the canary is the group
    with pytest.raises(RolloutError, match="sum to the 4 hosts"):
        serial_batches(4, 1, 1, [2, 1])


@given(st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=300),
       st.integers(min_value=1, max_value=20), st.sampled_from([1, 3, 16, "10%", "50%", "100%"]))
def test_no_batch_splits_a_unit(units: list[int], canary: int, batch: int | str) -> None:
    batches = serial_batches(sum(units), canary, batch, units)
    assert sum(batches) == sum(units)
    boundaries = {sum(units[: i + 1]) for i in range(len(units))}
    ends = [sum(batches[: i + 1]) for i in range(len(batches))]
    assert set(ends) <= boundaries, (units, batches)
    assert batches[0] >= min(canary, sum(units))


def test_serial_batches_at_1000_hosts_with_groups() -> None:
    # 1,000 hosts: 200 two-node groups then 600 single hosts; canary 1, batches of 10 %.
    units = rollout_units([f"g{i // 2}" for i in range(400)] + [None] * 600)
    assert units == [2] * 200 + [1] * 600
    batches = serial_batches(1000, 1, "10%", units)
    assert batches[0] == 2 and sum(batches) == 1000
    assert all(b == 100 for b in batches[1:-1]) and batches[-1] <= 100


def test_preflight_refuses_a_group_whose_hosts_are_apart() -> None:
    facts = {"gpu_count": 8, "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559}] * 8}
    records = {"n1": {"facts": facts, "multinode_group": "g"}, "x": {"facts": facts, "multinode_group": None},
               "n2": {"facts": facts, "multinode_group": "g"}}
    errors = check_multinode_facts(records)
    assert errors == ["multi-node group g: its hosts n1, n2 are not next to each other in the inventory (x between "
                      "them): list them together, so the group rolls out as one batch"]
    together = {"n1": records["n1"], "n2": records["n2"], "x": records["x"]}
    assert check_multinode_facts(together) == []
