"""Preflight for the whole fleet in one call (preflight/fleet.py): stages in order, one line per problem."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.fleet import fleet_preflight
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import (
    host_files,
    plans_json,
    report_files,
    with_feedback,
)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "inventories" / "example"
FACTS = {name: json.loads((EXAMPLE / "recorded_facts" / f"{name}.json").read_text())
         for name in ("h200-01", "t4-01", "h100-01", "h100-02")}
MODEL = str(EXAMPLE / "models" / "llama-3.1-8b")
KEY = "sk-fleet-unit-key-9a8b7c"


def _state(name: str, facts_name: str, groups: list[str], **variables: Any) -> dict[str, Any]:
    base = {"vllm_fleet_model": MODEL, "vllm_fleet_vllm_version": "0.32.0", "vllm_fleet_api_key": KEY,
            "vllm_fleet_recorded_facts_dir": "/facts"}
    base.update(variables)
    return {"vars": base, "groups": ["vllm_servers", *groups], "address": f"{name}.example.invalid",
            "model_dir": MODEL, "model_exists": True, "facts": copy.deepcopy(FACTS[facts_name]),
            "facts_error": None, "feedback": None}


def test_a_good_fleet_is_planned_whole_and_no_secret_is_kept() -> None:
    hosts = {"a": _state("a", "h200-01", ["gpu_h200"]),
             "b": _state("b", "t4-01", ["gpu_t4"], vllm_fleet_model=str(EXAMPLE / "models" / "llama-3.2-1b"))}
    result = fleet_preflight(hosts, recorded=True, planning=True)
    assert result["stage"] == "ok" and result["errors"] == [], result["errors"]
    assert sorted(result["records"]) == ["a", "b"] and sorted(result["inputs"]) == ["a", "b"]
    assert KEY not in json.dumps(result)
    assert result["records"]["a"]["launch"]["secret_env_names"] == ["VLLM_API_KEY"]


def test_input_errors_stop_before_facts_and_plans() -> None:
    hosts = {"a": _state("a", "h200-01", ["gpu_h200"], vllm_fleet_engine_args={"max_num_seq": 8}),
             "b": _state("b", "t4-01", [])}
    hosts["b"]["model_exists"] = False
    result = fleet_preflight(hosts, recorded=True, planning=True)
    assert result["stage"] == "inputs" and result["records"] == {}
    text = " | ".join(result["errors"])
    assert "a: " in text and "max_num_seq" in text and "max_num_seqs" in text
    assert "b: is in no SKU group" in text
    assert "b: model path" in text and "does not exist on the controller" in text


def test_missing_key_is_an_error_when_deploying_and_a_warning_when_planning() -> None:
    hosts = {"a": _state("a", "h200-01", ["gpu_h200"], vllm_fleet_api_key="")}
    deploying = fleet_preflight(hosts, recorded=True, planning=False)
    assert any("a: the API-key secret" in e for e in deploying["errors"])
    planning = fleet_preflight(hosts, recorded=True, planning=True)
    assert planning["errors"] == [] and any("a: " in w for w in planning["warnings"])


def test_facts_errors_name_the_host() -> None:
    missing = _state("a", "h200-01", ["gpu_h200"])
    missing["facts"] = None
    broken = _state("b", "t4-01", ["gpu_t4"])
    broken["facts"], broken["facts_error"] = None, "recorded facts /facts/b.json: gpu_count is 2 but 1 GPUs are listed"
    wrong_sku = _state("c", "t4-01", ["gpu_h200"], vllm_fleet_sku_match="H200")
    result = fleet_preflight({"a": missing}, recorded=True, planning=True)
    assert result["stage"] == "inputs" and result["errors"][0].startswith("a: no recorded GPU facts at /facts/a.json")
    result = fleet_preflight({"b": broken, "c": wrong_sku}, recorded=True, planning=True)
    assert result["stage"] == "facts"
    assert result["errors"][0] == "b: recorded facts /facts/b.json: gpu_count is 2 but 1 GPUs are listed"
    assert result["errors"][1].startswith("c: ")


def test_plan_errors_come_back_per_host() -> None:
    hosts = {"a": _state("a", "t4-01", ["gpu_t4"], vllm_fleet_engine_args={"dtype": "bfloat16"})}
    result = fleet_preflight(hosts, recorded=True, planning=True)
    assert result["stage"] == "plan"
    assert result["errors"][0].startswith("a: --dtype bfloat16 needs compute capability 8.0+")


def test_report_files_are_one_rendering_and_plans_json_has_no_feedback() -> None:
    hosts = {"a": _state("a", "h200-01", ["gpu_h200"])}
    records = fleet_preflight(hosts, recorded=True, planning=True)["records"]
    fed = with_feedback(records, {"a": {"status": "ok", "replicas": []}})
    assert fed["a"]["feedback"] == {"status": "ok", "replicas": []}
    assert "feedback" not in json.loads(plans_json(fed))["a"]
    assert plans_json(fed) == plans_json(records)
    files = report_files(records)
    assert sorted(files) == ["README.md", "index.html", "memory/a.svg", "plans.json"]
    assert files["memory/a.svg"].startswith("<svg")
    assert list(report_files(records, pages=False)) == ["plans.json"]


def test_host_files_hold_each_hosts_record_and_no_secret() -> None:
    """What each host loads with include_vars after the fleet step: its own record, as the variables later stages
    read, deterministic, and without the API key's value."""
    hosts = {"a": _state("a", "h200-01", ["gpu_h200"]), "b": _state("b", "h200-01", ["gpu_h200"])}
    for gpu in hosts["b"]["facts"]["gpus"]:
        gpu["uuid"] = gpu["uuid"][:-4] + "beef"
    result = fleet_preflight(hosts, recorded=True, planning=False)
    assert result["errors"] == []
    files = host_files(result)
    assert sorted(files) == ["hosts/a.json", "hosts/b.json"]
    loaded = json.loads(files["hosts/b.json"])
    assert sorted(loaded) == ["__vllm_fleet_input", "vllm_fleet_facts", "vllm_fleet_launch", "vllm_fleet_plan"]
    assert loaded["vllm_fleet_launch"] == result["records"]["b"]["launch"]
    assert loaded["vllm_fleet_plan"] == result["records"]["b"]["plan"]
    assert loaded["__vllm_fleet_input"]["secret_names"] == ["VLLM_API_KEY"]
    assert all(KEY not in text for text in files.values())
    assert host_files(result) == files
    # The last deploy's feedback is an observation, not an input: a re-run after a deploy writes the same bytes.
    fed = {**result, "inputs": {h: {**i, "feedback": {"status": "ok"}} for h, i in result["inputs"].items()}}
    assert host_files(fed) == files


def test_an_amd_host_stops_at_facts_with_one_line() -> None:
    """Recorded facts naming an AMD GPU (vendor/gfx, CONTRACT 1) are refused at the facts stage (preflight/amd.py),
    not planned into a launch record the NVIDIA roles would fail on later."""
    amd = _state("m", "h200-01", ["gpu_h200"])
    for gpu in amd["facts"]["gpus"]:
        gpu.update(name="AMD Instinct MI300X", vendor="amd", gfx="gfx942")
    amd["facts"]["gpu_name"] = "AMD Instinct MI300X"
    result = fleet_preflight({"m": amd, "a": _state("a", "h200-01", ["gpu_h200"])}, recorded=True, planning=True)
    assert result["stage"] == "facts" and result["records"] == {}
    assert len(result["errors"]) == 1
    assert result["errors"][0].startswith("m: AMD Instinct MI300X (gfx942) is AMD: ")


def test_a_bad_routing_policy_is_refused_by_the_fleet_step_with_what_to_change() -> None:
    """The balancer's settings as the preflight filter hands them over (plugins/filter/preflight.fleet_lb_inputs):
    a misspelt policy stops the run before any host changes; a good one passes."""
    hosts = {"a": _state("a", "h200-01", ["gpu_h200"])}
    lb = {"address": "lb.example.invalid", "ports": [8080], "servers": None, "remote": False}
    bad = fleet_preflight(hosts, recorded=True, planning=False,
                          lbs={"lb": dict(lb, settings={"vllm_lb_policy": "prefix_aware"})})
    assert bad["errors"] == ["lb: vllm_lb_policy must be one of least_conn, session, cache_aware, got 'prefix_aware'"
                             " (did you mean 'cache_aware'?)"], bad["errors"]
    good = fleet_preflight(hosts, recorded=True, planning=False,
                           lbs={"lb": dict(lb, settings={"vllm_lb_policy": "cache_aware", "vllm_lb_prefix_bytes": 512})})
    assert good["errors"] == [], good["errors"]
