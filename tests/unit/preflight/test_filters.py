"""The thin filter wrappers: option building, planner errors as data, port maps, input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter import preflight as ff
from ansible_collections.vllm_fleet.fleet.plugins.filter import preflight as fr

ROOT = Path(__file__).resolve().parents[3]
FACTS = ROOT / "tests/fixtures/preflight/recorded_facts"
MODELS = ROOT / "tests/fixtures/preflight/models"


def test_filters_are_registered() -> None:
    assert {"fleet_host_errors", "fleet_errors", "fleet_try_plan", "fleet_plan_options", "fleet_port_map",
            "fleet_multinode_errors", "fleet_sku_groups", "fleet_port_variables"} <= set(ff.FilterModule().filters())
    assert {"fleet_report_html", "fleet_report_markdown", "fleet_memory_svg",
            "fleet_summary"} <= set(fr.FilterModule().filters())


def test_plan_options_drop_unset_and_size_multinode_policy() -> None:
    variables = {"vllm_fleet_engine_args": {"max_model_len": 4096}, "vllm_fleet_profile": None,
                 "vllm_fleet_vllm_version": "0.32.0"}
    assert ff.fleet_plan_options(variables) == {"engine_args": {"max_model_len": 4096}, "vllm_version": "0.32.0"}
    records = {"a": {"multinode_group": "g"}, "b": {"multinode_group": "g"}, "c": {"multinode_group": None}}
    assert ff.fleet_plan_options(variables, records, "a")["policy"] == {"max_nodes": 2}
    assert "policy" not in ff.fleet_plan_options(variables, records, "c")
    pinned = dict(variables, vllm_fleet_policy={"max_nodes": 1})
    assert ff.fleet_plan_options(pinned, records, "a")["policy"] == {"max_nodes": 1}


def test_try_plan_returns_plan_or_one_line_error() -> None:
    t4 = json.loads((FACTS / "t4-a.json").read_text())
    ok = ff.fleet_try_plan(t4, str(MODELS / "llama-3.2-1b"), "t4-a", {"engine_args": {"max_model_len": 4096}})
    assert ok["error"] is None and ok["plan"]["device"] == "cuda"
    assert ok["plan"]["engine_args"].get("dtype") != "bfloat16"
    bad = ff.fleet_try_plan(t4, str(MODELS / "llama-3.1-405b"), "t4-a")
    assert bad["plan"] is None and bad["error"].startswith("t4-a: the model does not fit")
    assert "\n" not in bad["error"]
    odd = ff.fleet_try_plan(t4, str(MODELS / "llama-3.2-1b"), "t4-a", {"no_such_option": 1})
    assert odd["error"].startswith("t4-a: vllm_plan rejected the options")


def test_port_map_and_variables() -> None:
    assert ff.fleet_port_map({"a": 1, "b": "", "c": None}) == {"a": 1}
    assert "vllm_serve_port" in ff.fleet_port_variables(None)
    assert ff.fleet_port_variables(["x_port"]) == ["x_port"]
    with pytest.raises(AnsibleFilterError):
        ff.fleet_port_variables("x_port")


def test_host_errors_include_ports() -> None:
    errors = ff.fleet_host_errors({"vllm_fleet_model": "/m", "vllm_fleet_api_key_required": False}, "h",
                                  ["gpu_t4"], {"vllm_serve_port": 8000, "vllm_lb_port": 8000})
    assert errors == ["h: port 8000 is used by both vllm_lb_port and vllm_serve_port: give each service its own port"]
    with pytest.raises(AnsibleFilterError):
        ff.fleet_host_errors(["not", "a", "dict"], "h", [])  # type: ignore[arg-type]


def test_report_filters_reject_non_dicts() -> None:
    with pytest.raises(AnsibleFilterError):
        fr.fleet_report_html(["x"])
    with pytest.raises(AnsibleFilterError):
        fr.fleet_memory_svg("x", "h")
