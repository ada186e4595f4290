"""Preflight type-checks the launch settings and refuses an unknown ``vllm_serve_*`` name as it does ``vllm_fleet_*``:
the known names are the launch settings (deploy/launch.py LAUNCH_SETTINGS) and the vllm_serve role's documented
inputs (its meta/argument_specs.yml, read by the preflight filter)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.vllm_fleet.fleet.plugins.filter.preflight import serve_role_inputs
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.launch import LAUNCH_SETTINGS
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.fleet import fleet_preflight
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.inputs import check_host_inputs

ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "roles/vllm_serve/meta/argument_specs.yml"
EXAMPLE = ROOT / "inventories" / "example"
MODEL = str(EXAMPLE / "models" / "llama-3.1-8b")
BASE: dict[str, Any] = {"vllm_fleet_model": "/models/llama/config.json", "vllm_fleet_vllm_version": "0.32.0",
                        "vllm_fleet_api_key": "s3cr3t-key-from-vault"}


def errors(role_inputs: Any = None, **variables: Any) -> list[str]:
    inputs = serve_role_inputs() if role_inputs is None else role_inputs
    return check_host_inputs("h1", {**BASE, **variables}, ["vllm_servers", "gpu_h100"], role_inputs=inputs)


def test_a_misspelt_serve_variable_is_refused_with_the_nearest_name() -> None:
    assert errors(vllm_serve_prot=8001) == [
        "h1: unknown variable vllm_serve_prot (did you mean vllm_serve_port?): rename it, or remove it"]
    # a role input is a suggestion too
    (line,) = errors(vllm_serve_lb_hots="lb1")
    assert "(did you mean vllm_serve_lb_host?)" in line


def test_vllm_fleet_names_are_refused_the_same_way() -> None:
    assert errors(vllm_fleet_modle="/m") == [
        "h1: unknown variable vllm_fleet_modle (did you mean vllm_fleet_model?): rename it, or remove it"]


def test_every_input_the_role_documents_and_every_launch_setting_is_accepted() -> None:
    options = yaml.safe_load(SPEC.read_text())["argument_specs"]["main"]["options"]
    assert set(serve_role_inputs()) == set(options)
    documented = {name: opt["default"] for name, opt in options.items() if "default" in opt}
    settings = {s.variable: s.default for s in LAUNCH_SETTINGS if s.default is not None}
    assert errors(**{**documented, **settings}) == []
    # the port variables preflight checks (the monitoring role reads vllm_serve_ports) and the role's loop fact
    assert errors(vllm_serve_ports=[8000, 8001], vllm_serve_replica={"index": 0}) == []


def test_without_the_role_inputs_a_role_variable_is_unknown() -> None:
    """The role's argument spec is what makes its knobs known (not a hand list in the checks)."""
    (line,) = errors(role_inputs=(), vllm_serve_lb_host="lb1")
    assert line.startswith("h1: unknown variable vllm_serve_lb_host "), line
    assert errors(role_inputs=("vllm_serve_lb_host",), vllm_serve_lb_host="lb1") == []


@pytest.mark.parametrize(("variables", "expected"), [
    ({"vllm_serve_restart_policy": False},
     "h1: vllm_serve_restart_policy must be one of no, on-failure, always, unless-stopped, got false (YAML reads an "
     "unquoted no as false: quote it): set it like unless-stopped"),
    ({"vllm_serve_ulimits": "memlock:-1:-1"},
     "h1: vllm_serve_ulimits must be a list of non-empty strings, got string 'memlock:-1:-1': "
     "set it like [\"memlock:-1:-1\"]"),
    ({"vllm_serve_healthcheck_interval_s": 0},
     "h1: vllm_serve_healthcheck_interval_s must be an integer >= 1, got int 0: set it like 5"),
    ({"vllm_serve_multinode_backend": "nccl"},
     "h1: vllm_serve_multinode_backend must be one of mp, ray, got string 'nccl': set it like mp"),
    ({"vllm_serve_ray_port": "63x9"}, "h1: vllm_serve_ray_port must be an integer port, got string '63x9'"),
])
def test_a_launch_setting_of_the_wrong_type_is_one_line_with_the_fix(variables: dict[str, Any], expected: str) -> None:
    (line,) = errors(**variables)
    assert line.startswith(expected), line


def test_a_bad_port_setting_is_reported_once_by_the_fleet_step() -> None:
    host = {"vars": {**BASE, "vllm_fleet_model": MODEL, "vllm_fleet_recorded_facts_dir": "/facts",
                     "vllm_serve_port": "80x0"},
            "groups": ["vllm_servers", "gpu_h200"], "address": "a.example.invalid", "model_dir": MODEL,
            "model_exists": True,
            "facts": copy.deepcopy(json.loads((EXAMPLE / "recorded_facts/h200-01.json").read_text())),
            "facts_error": None, "feedback": None}
    result = fleet_preflight({"a": host}, recorded=True, planning=True, role_inputs=serve_role_inputs())
    assert result["stage"] == "inputs"
    assert result["errors"] == ["a: vllm_serve_port must be an integer port, got string '80x0' (a quoted string; "
                                "on the command line pass JSON: -e '{\"key\": 0.9}')"]
