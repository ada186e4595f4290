"""Launch settings are typed records (deploy/launch.py LAUNCH_SETTINGS): read, converted and checked from them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.launch import (
    LAUNCH_SETTINGS,
    LAUNCH_VARIABLES,
    LaunchSetting,
    launch_record,
    launch_settings,
    setting_problem,
)


def _example(setting: LaunchSetting) -> Any:
    """The setting's example as the inventory would hold it (JSON for lists and numbers)."""
    if setting.kind in ("list", "int", "port"):
        return json.loads(setting.example)
    return setting.example


def test_names_are_unique_and_every_setting_has_an_example_and_help() -> None:
    assert len({s.key for s in LAUNCH_SETTINGS}) == len(LAUNCH_SETTINGS)
    assert len(LAUNCH_VARIABLES) == len(LAUNCH_SETTINGS)
    for setting in LAUNCH_SETTINGS:
        assert setting.variable == f"vllm_serve_{setting.key}", setting
        assert setting.help and setting.example, setting
        assert setting_problem(setting, _example(setting)) is None, setting


@pytest.mark.parametrize("setting", LAUNCH_SETTINGS, ids=[s.variable for s in LAUNCH_SETTINGS])
def test_each_setting_is_read_from_its_variable(setting: LaunchSetting) -> None:
    value = _example(setting)
    settings = launch_settings({setting.variable: value}, address="10.0.0.9", model_dir="/srv/m/tiny")
    assert settings[setting.key] == value
    default = launch_settings({}, address="10.0.0.9", model_dir="/srv/m/tiny")[setting.key]
    if setting.default is not None:
        assert default == setting.default


def test_unset_and_empty_take_the_default_except_where_empty_is_a_value() -> None:
    settings = launch_settings({"vllm_serve_port": "", "vllm_serve_ipc_mode": "", "vllm_serve_image": None},
                               address="h", model_dir="/m/tiny")
    assert settings["port"] == 8000
    assert settings["ipc_mode"] == ""  # Docker's own IPC mode, with vllm_serve_shm_size
    assert settings["image"] is None
    assert settings["advertise_address"] == "h"
    assert settings["served_model_name"] == "tiny"


def test_defaults_are_copies() -> None:
    first = launch_settings({}, address="h", model_dir="/m")
    first["ulimits"].append("nofile:1:1")
    assert launch_settings({}, address="h", model_dir="/m")["ulimits"] == []


def test_an_int_may_be_a_string_of_digits_and_is_converted() -> None:
    assert setting_problem(LAUNCH_VARIABLES["vllm_serve_stop_timeout"], "60") is None
    assert launch_settings({"vllm_serve_stop_timeout": "60"}, address="h", model_dir="/m")["stop_timeout"] == 60


@pytest.mark.parametrize(("variable", "value", "expected"), [
    ("vllm_serve_port", "80x0", "must be a port (an integer in 1..65535), got string '80x0': set it like 8000"),
    ("vllm_serve_port", "8000", "a quoted string: write the number bare"),
    ("vllm_serve_port", 0, "must be a port (an integer in 1..65535), got int 0"),
    ("vllm_serve_ray_port", 65536, "must be a port"),
    ("vllm_serve_master_port", True, "must be a port (an integer in 1..65535), got true"),
    ("vllm_serve_healthcheck_interval_s", 0, "must be an integer >= 1, got int 0: set it like 5"),
    ("vllm_serve_stop_timeout", "1m", "must be an integer >= 1, got string '1m'"),
    ("vllm_serve_restart_policy", False, "must be one of no, on-failure, always, unless-stopped, got false "
                                         "(YAML reads an unquoted no as false: quote it)"),
    ("vllm_serve_multinode_backend", "nccl", "must be one of mp, ray, got string 'nccl'"),
    ("vllm_serve_server_argv", "vllm serve", "must be a list of non-empty strings, got string 'vllm serve'"),
    ("vllm_serve_server_argv", [], "must list at least 1 item"),
    ("vllm_serve_ulimits", ["memlock=-1"], "must list NAME:SOFT:HARD items, got 'memlock=-1' in it"),
    ("vllm_serve_shm_size", "1 GB", "must be a size: a number with b, k, m or g, got string '1 GB'"),
    ("vllm_serve_model_dir", "models/x", "must be an absolute path, got string 'models/x'"),
    ("vllm_serve_network_mode", 1, "must be a string, got int 1"),
])
def test_a_wrong_value_is_named_with_what_to_set(variable: str, value: Any, expected: str) -> None:
    problem = setting_problem(LAUNCH_VARIABLES[variable], value)
    assert problem is not None and expected in problem, problem


@pytest.mark.parametrize(("fields", "message"), [
    ({"kind": "float"}, "kind 'float'"),
    ({"scope": "fleet"}, "scope 'fleet'"),
    ({"variable": "vllm_fleet_x"}, r"vllm_serve_\* variable"),
    ({"kind": "choice"}, "choices go with kind 'choice'"),
    ({"pattern": "^/"}, "a pattern needs its form"),
    ({"kind": "port", "default": 0}, "must be a port"),
])
def test_a_bad_declaration_is_refused_at_import(fields: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {"key": "x", "variable": "vllm_serve_x", "kind": "str", "default": None,
                            "scope": "host", "help": "h"}
    with pytest.raises(ValueError, match=message):
        LaunchSetting(**{**base, **fields})


# ---- the container settings reach the record (the vllm_serve role reads nothing else) -------------------------

def _record(variables: dict[str, Any] | None = None, replicas: int = 1, **kwargs: Any) -> dict[str, Any]:
    plan = {"device": "cpu", "engine_args": {}, "parallel": {"replicas": replicas}}
    settings = launch_settings(variables or {}, address="10.0.0.9", model_dir="/srv/m/tiny")
    return launch_record(plan, host="h", settings=settings, **kwargs)


def test_the_record_holds_every_container_setting_with_the_defaults() -> None:
    launch = _record()
    assert launch["config_dir"] == "/etc/vllm-fleet/serve"
    (rep,) = launch["replicas"]
    assert {k: rep[k] for k in ("config_file", "entrypoint", "network_mode", "published_ports", "ipc_mode",
                                "shm_size", "ulimits", "restart_policy", "healthcheck")} == {
        "config_file": "/etc/vllm-fleet/serve/vllm.yaml", "entrypoint": ["tini", "--"], "network_mode": "host",
        "published_ports": [], "ipc_mode": "host", "shm_size": None, "ulimits": [], "restart_policy": "unless-stopped",
        "healthcheck": {"test": ["CMD", "/opt/venv/bin/python", "/usr/local/bin/vllm-healthcheck"], "interval_s": 5,
                        "timeout_s": 10, "retries": 3}}


def test_the_inventory_settings_are_what_the_record_holds() -> None:
    launch = _record({"vllm_serve_ipc_mode": "private", "vllm_serve_shm_size": "8g", "vllm_serve_network_mode": "bridge",
                      "vllm_serve_bind_address": "10.0.0.9", "vllm_serve_config_dir": "/srv/cfg/",
                      "vllm_serve_restart_policy": "no", "vllm_serve_healthcheck_interval_s": "7",
                      "vllm_serve_entrypoint": ["/sbin/init-x"]}, replicas=2)
    first, second = launch["replicas"]
    assert (first["ipc_mode"], first["shm_size"]) == ("private", "8g")
    assert first["published_ports"] == ["10.0.0.9:8000:8000"] and second["published_ports"] == ["10.0.0.9:8001:8001"]
    assert second["config_file"] == "/srv/cfg/vllm-1.yaml" and launch["config_dir"] == "/srv/cfg/"
    assert first["restart_policy"] == "no" and first["entrypoint"] == ["/sbin/init-x"]
    assert first["healthcheck"]["interval_s"] == 7
    # empty IPC mode: Docker's own, so the shm size applies
    (rep,) = _record({"vllm_serve_ipc_mode": ""})["replicas"]
    assert (rep["ipc_mode"], rep["shm_size"]) == (None, "1g")


def test_ulimits_are_the_users_then_the_nodes_rdma_needs() -> None:
    network = {"env": {}, "devices": [], "cap_add": [], "ulimits": ["memlock:-1:-1", "nofile:65536:65536"],
               "reasons": {}}
    (rep,) = _record({"vllm_serve_ulimits": ["nofile:65536:65536", "core:0:0"]}, network=network)["replicas"]
    assert rep["ulimits"] == ["nofile:65536:65536", "core:0:0", "memlock:-1:-1"]


def test_a_node_that_serves_no_api_gets_no_docker_health_check() -> None:
    plan = {"device": "cpu", "engine_args": {}, "parallel": {"replicas": 1, "nodes": 2}}
    settings = launch_settings({}, address="10.0.0.2", model_dir="/srv/m/tiny")
    head, worker = (launch_record(plan, host=h, settings=settings, nodes=["a", "b"],
                                  node_addresses=["10.0.0.1", "10.0.0.2"])["replicas"][0] for h in ("a", "b"))
    assert head["healthcheck"]["test"][0] == "CMD" and worker["healthcheck"]["test"] == ["NONE"]
