"""Load balancers against the fleet (preflight/balancers.py, run by record.fleet_launch's fleet checks): malformed
vllm_lb_servers, and loopback backends a balancer on another machine cannot reach, are refused with the balancer,
the backend and the fix; a lab balancer (local connection, no ansible_host) beside loopback vLLM hosts is fine."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.balancers import (
    check_balancers,
    is_loopback,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import (
    fleet_launch,
    host_input,
)

from ._recorded import H100, MODEL_8B

REMOTE = {"address": "10.0.0.5", "ports": [8080], "servers": None, "remote": True}


def test_a_loopback_backend_is_out_of_reach_of_a_remote_balancer() -> None:
    errors = check_balancers({"lb1": REMOTE}, {"h1": "127.0.0.1", "h2": "h2.example.invalid"})
    assert errors == ["lb1: backend h1 is at 127.0.0.1, a loopback address only its own machine reaches, and this "
                      "balancer is on 10.0.0.5: give h1 an address the balancer can reach (ansible_host), or run the "
                      "balancer on that machine"]


def test_a_lab_balancer_on_the_same_machine_reaches_loopback() -> None:
    lab = {"address": "vf-lab-lb", "ports": [8080], "servers": None, "remote": False}
    assert check_balancers({"lb": lab}, {"h1": "127.0.0.1"}) == []
    assert check_balancers({"lb": {**REMOTE, "address": "127.0.0.1"}}, {"h1": "localhost"}) == []


@pytest.mark.parametrize(("servers", "words"), [
    ("h1:8000", "vllm_lb_servers must be a list of {server, address, port}, got str"),
    (["h1:8000"], "vllm_lb_servers[0] must be a dict {server, address, port}, got str"),
    ([{"server": "h1", "port": 8000}], "vllm_lb_servers[0] has no address"),
    ([{"server": "h1", "address": "10.0.0.6", "port": "8000"}], "vllm_lb_servers[0].port must be an integer port"),
    ([{"server": "h1", "address": "::1", "port": 8000}], "backend h1 is at ::1, a loopback address"),
])
def test_given_servers_are_checked(servers: Any, words: str) -> None:
    errors = check_balancers({"lb1": {**REMOTE, "servers": servers}}, {})
    assert len(errors) == 1 and errors[0].startswith("lb1: ") and words in errors[0], errors


def test_well_formed_reachable_servers_pass() -> None:
    servers = [{"server": "h1", "address": "10.0.0.6", "port": 8000}]
    assert check_balancers({"lb1": {**REMOTE, "servers": servers}}, {"h1": "127.0.0.1"}) == []


def test_loopback_spellings() -> None:
    assert all(map(is_loopback, ["localhost", "127.0.0.1", "127.3.2.1", "::1", "[::1]", "LOCALHOST."]))
    assert not any(map(is_loopback, ["10.0.0.1", "h1.example.invalid", "::2"]))


def test_the_fleet_step_runs_it() -> None:
    item = host_input({"vllm_fleet_model": MODEL_8B, "vllm_fleet_vllm_version": "0.32.0",
                       "ansible_host": "127.0.0.1"}, "h1", sku="gpu_h100", facts=H100, address="127.0.0.1",
                      model_dir=MODEL_8B, ports={"vllm_serve_port": 8000})
    errors = fleet_launch({"h1": item}, {"lb1": REMOTE}, check_image=False)["errors"]
    assert errors and errors[-1].startswith("lb1: backend h1 is at 127.0.0.1"), errors
