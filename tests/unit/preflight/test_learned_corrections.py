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
