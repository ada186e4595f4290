"""Graceful stop: the plan's --shutdown-timeout (requests in flight finish) and the launch record's container stop
timeout, which must outlast it (planner/core.py _graceful_stop, deploy/launch.py _stop_timeout)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.launch import (
    STOP_GRACE_S,
    LaunchError,
    launch_record,
    launch_settings,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import SHUTDOWN_TIMEOUT_S, plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.errors import PlanError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import (
    fleet_launch,
    host_input,
)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "inventories" / "example"
H200 = json.loads((EXAMPLE / "recorded_facts" / "h200-01.json").read_text())
MODEL = EXAMPLE / "models" / "llama-3.1-8b"
CONFIG = json.loads((MODEL / "config.json").read_text())


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_the_plan_gives_requests_in_flight_time_to_finish(version: str) -> None:
    result = plan(H200, CONFIG, vllm_version=version)
    assert result["engine_args"]["shutdown-timeout"] == SHUTDOWN_TIMEOUT_S > 0
    assert "in flight" in result["reasons"]["shutdown-timeout"]
    assert f"--shutdown-timeout {SHUTDOWN_TIMEOUT_S}" in " ".join(map(str, result["cli_args"]))


def test_an_older_vllm_gets_no_flag_it_may_not_have() -> None:
    result = plan(H200, CONFIG, vllm_version="0.20.0")
    assert "shutdown-timeout" not in result["engine_args"]
    assert "aborts the requests in flight" in result["reasons"]["shutdown-timeout"]


def test_the_user_value_wins_and_is_validated() -> None:
    result = plan(H200, CONFIG, vllm_version="0.32.0", engine_args={"shutdown_timeout": "90"})
    assert result["engine_args"]["shutdown-timeout"] == 90 and result["reasons"]["shutdown-timeout"] == "set by you"
    with pytest.raises(PlanError, match="shutdown-timeout"):
        plan(H200, CONFIG, vllm_version="0.32.0", engine_args={"shutdown_timeout": -1})


def _record(engine_args: dict[str, Any], **variables: Any) -> dict[str, Any]:
    small = {"device": "cpu", "engine_args": engine_args, "env": {}, "parallel": {"replicas": 1}}
    settings = launch_settings(variables, address="h", model_dir="/m/tiny")
    return launch_record(small, host="h", settings=settings)


def test_docker_waits_longer_than_vllm_lets_requests_finish() -> None:
    assert _record({"shutdown-timeout": 30})["stop_timeout_s"] == 30 + STOP_GRACE_S
    assert _record({})["stop_timeout_s"] == STOP_GRACE_S  # no shutdown timeout: vLLM aborts, exits at once
    assert _record({"shutdown-timeout": 30}, vllm_serve_stop_timeout="45")["stop_timeout_s"] == 45


@pytest.mark.parametrize("pinned", [30, 10, "x", True])
def test_a_stop_timeout_that_would_kill_requests_is_refused(pinned: Any) -> None:
    with pytest.raises(LaunchError, match=r"vllm_serve_stop_timeout .* above vLLM's shutdown timeout \(30 s\)"):
        _record({"shutdown-timeout": 30}, vllm_serve_stop_timeout=pinned)


def test_preflight_names_the_host_and_what_to_change() -> None:
    variables = {"vllm_fleet_model": str(MODEL), "vllm_fleet_vllm_version": "0.32.0", "vllm_serve_stop_timeout": 20}
    item = host_input(variables, "h1", sku="gpu_h200", facts=H200, address="h1", model_dir=str(MODEL))
    result = fleet_launch({"h1": item}, check_image=False)
    assert result["records"] == {} or "h1" not in result["records"]
    assert any(e.startswith("h1: ") and "vllm_serve_stop_timeout 20" in e and "--shutdown-timeout" in e
               for e in result["errors"]), result["errors"]
    good = fleet_launch({"h1": host_input(dict(variables, vllm_serve_stop_timeout=120), "h1", sku="gpu_h200",
                                          facts=H200, address="h1", model_dir=str(MODEL))}, check_image=False)
    assert good["errors"] == [] and good["records"]["h1"]["launch"]["stop_timeout_s"] == 120
