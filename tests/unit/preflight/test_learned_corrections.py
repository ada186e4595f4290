"""Preflight takes a correction learned on an identical host (issue 30, item 3): preflight/fleet.py with_learned."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import learned
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.fleet import fleet_preflight

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "inventories" / "example"
FACTS = json.loads((EXAMPLE / "recorded_facts" / "h200-01.json").read_text())
MODEL = str(EXAMPLE / "models" / "llama-3.1-8b")


def _state(**variables: Any) -> dict[str, Any]:
    base = {"vllm_fleet_model": MODEL, "vllm_fleet_vllm_version": "0.32.0", "vllm_fleet_api_key": "sk-unit-1234567",
            "vllm_fleet_recorded_facts_dir": "/facts"}
    base.update(variables)
    return {"vars": base, "groups": ["vllm_servers", "gpu_h200"], "address": "a.example.invalid",
            "model_dir": MODEL, "model_exists": True, "facts": copy.deepcopy(FACTS),
            "facts_error": None, "feedback": None}


def _file(host: str, changes: dict[str, Any]) -> dict[str, Any]:
    return {"key": learned.key("gpu_h200", MODEL, "0.32.0"), "host": host,
            "correction": {"changes": changes, "reasons": {k: "vLLM said so" for k in changes}}}


def test_an_identical_host_takes_the_learned_value_and_says_so() -> None:
    base = fleet_preflight({"b": _state()}, recorded=True, planning=True)
    planned = base["records"]["b"]["plan"]["engine_args"]["gpu-memory-utilization"]
    lowered = round(planned - 0.05, 2)
    result = fleet_preflight({"b": _state()}, recorded=True, planning=True,
                             learned_files=[_file("a", {"gpu-memory-utilization": lowered})])
    assert result["errors"] == [], result["errors"]
    plan = result["records"]["b"]["plan"]
    assert plan["engine_args"]["gpu-memory-utilization"] == lowered
    assert plan["reasons"]["gpu-memory-utilization"].startswith("learned on a (same GPU SKU, model and vLLM")
    assert plan["prediction"]["kv_cache_tokens"] < base["records"]["b"]["plan"]["prediction"]["kv_cache_tokens"]


def test_a_pin_wins_over_what_was_learned() -> None:
    result = fleet_preflight({"b": _state(vllm_fleet_engine_args={"gpu_memory_utilization": 0.8})},
                             recorded=True, planning=True, learned_files=[_file("a", {"gpu-memory-utilization": 0.7})])
    plan = result["records"]["b"]["plan"]
    assert plan["engine_args"]["gpu-memory-utilization"] == 0.8
    assert not plan["reasons"]["gpu-memory-utilization"].startswith("learned")


def test_another_model_or_version_learns_nothing() -> None:
    other = dict(_file("a", {"gpu-memory-utilization": 0.7}), key=learned.key("gpu_h200", MODEL, "0.33.0"))
    result = fleet_preflight({"b": _state()}, recorded=True, planning=True, learned_files=[other, {"bad": 1}])
    assert result["records"]["b"]["plan"]["engine_args"]["gpu-memory-utilization"] != 0.7
    assert "learned" not in result["inputs"]["b"]


def _twin(name: str, **variables: Any) -> dict[str, Any]:
    """An identical host that is another machine: its own GPU UUIDs (the same UUIDs would be one machine twice)."""
    state = _state(**variables)
    for gpu in state["facts"]["gpus"]:
        gpu["uuid"] = f"{gpu['uuid']}-{name}"
    state["address"] = f"{name}.example.invalid"
    return state


def _fed(kv_gib: float, host: str = "a") -> dict[str, Any]:
    """A host's last plan feedback as deploy.yml writes it (observe/feedback.py host_feedback): only its
    ``observation`` (observe/learned.py), with the KV pool vLLM logged and no other component."""
    return {"status": "ok", "observation": {"host": host, "at": "12-05 10:00:00", "vllm_version": "0.32.0",
                                            "layout": {"tp": 1, "pp": 1, "dp": 1, "eager": False}, "observed": {},
                                            "estimated": {}, "kv_gib": kv_gib, "kv_tokens": None}}


def test_a_host_logging_much_less_kv_than_its_twins_is_a_host_problem() -> None:
    """Three identical hosts (same SKU group, model, vLLM): one logged 20% less KV than the others' median at its last
    start; preflight warns about that host only, and plans it as its twins (the plan is not at fault)."""
    states = {name: _twin(name) for name in ("a", "b", "c")}
    for name, kv in (("a", 40.0), ("b", 40.5), ("c", 32.0)):
        states[name]["feedback"] = _fed(kv, name)
    result = fleet_preflight(states, recorded=True, planning=True)
    assert result["errors"] == [], result["errors"]
    drift = [w for w in result["warnings"] if "identical twins" in w]
    assert len(drift) == 1 and drift[0].startswith("c: c logged 32.00 GiB of KV, 20% below its identical twins"), drift
    assert "a host problem" in drift[0]
    plans = {name: result["records"][name]["plan"]["engine_args"] for name in states}
    assert plans["a"] == plans["b"] == plans["c"]


def test_twins_within_tolerance_or_on_another_model_are_not_flagged() -> None:
    states = {name: _twin(name) for name in ("a", "b")}
    states["a"]["feedback"], states["b"]["feedback"] = _fed(40.0, "a"), _fed(37.0, "b")  # 7.5% below: within 10%
    assert not [w for w in fleet_preflight(states, recorded=True, planning=True)["warnings"] if "twins" in w]
    other = _twin("z", vllm_fleet_vllm_version="0.33.0")
    other["feedback"] = _fed(20.0, "z")  # much less, but not a twin: another vLLM version plans differently
    states = {"a": _twin("a"), "z": other}
    states["a"]["feedback"] = _fed(40.0)
    assert not [w for w in fleet_preflight(states, recorded=True, planning=True)["warnings"] if "twins" in w]


def _llava_observation(host: str) -> dict[str, Any]:
    """What deploy.yml's plan feedback keeps of a good start (observe/learned.py observation), from the published
    vLLM 0.10.2 H100 log (tests/fixtures/feedback/vllm-0.10.2-h100-llava.log)."""
    log = (ROOT / "tests" / "fixtures" / "feedback" / "vllm-0.10.2-h100-llava.log").read_text()
    plan = {"vllm_version": "0.10.2", "parallel": {"tensor_parallel_size": 1}, "engine_args": {},
            "memory_gib": {"weights": 14.09, "activation": 2.29, "non_torch": 0.06, "cuda_graph": 0.57}}
    obs = learned.observation(host, plan, [{"replica": f"{host}-vllm", "log": log}])
    assert obs is not None
    return obs


def test_a_twin_without_a_start_takes_the_last_observed_one_and_the_version_guards_it() -> None:
    """b never started: it gets a's last good start (same SKU group, model, requested vLLM version); the planner
    shows it and, since that start ran another vLLM than b's plan, keeps the estimate and says why."""
    states = {"a": _twin("a"), "b": _twin("b"), "z": _twin("z", vllm_fleet_vllm_version="0.33.0")}
    states["a"]["feedback"] = {"status": "ok", "observation": _llava_observation("a")}
    result = fleet_preflight(states, recorded=True, planning=True)
    assert result["errors"] == [], result["errors"]
    assert result["inputs"]["b"]["observed"]["host"] == "a"
    assert "observed" not in result["inputs"]["z"]  # another requested vLLM version: not a twin
    reason = result["records"]["b"]["plan"]["reasons"]["observed"]
    assert reason.startswith("observed on a at 09-23 18:12:34 (vLLM 0.10.2): weights 14.08, activation peak 1.97")
    assert reason.endswith("not used: vLLM 0.10.2 ran it, this plan is for 0.32.0")
    assert "observed.activation" not in result["records"]["b"]["plan"]["reasons"]
    assert "observed" not in result["records"]["z"]["plan"]["reasons"]
