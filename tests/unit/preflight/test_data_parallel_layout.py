"""Data parallelism inside one host, laid out (record.fleet_launch → deploy/launch.py launch_record): a replica is ONE
container holding DP x TP x PP GPUs, started with --data-parallel-size; what the mode cannot do is refused with one
line naming the host. On the recorded 8x H100 facts of tests/fixtures/preflight/recorded_facts/h100-a.json."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.launch import (
    LaunchError,
    launch_record,
    launch_settings,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.inputs import check_host_inputs
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import (
    fleet_launch,
    host_input,
)

from ._recorded import H100, MODEL_8B

BASE = {"vllm_fleet_model": MODEL_8B, "vllm_fleet_vllm_version": "0.32.0", "vllm_fleet_api_key": "sk-unit-dp-4c2b9e"}


def _input(engine_args: dict[str, Any], host: str = "h1", facts: dict[str, Any] = H100,
           **variables: Any) -> dict[str, Any]:
    return host_input({**BASE, "vllm_fleet_engine_args": engine_args, **variables}, host, sku="gpu_h100",
                      facts=facts, address=variables.get("ansible_host", host), model_dir=MODEL_8B)


def test_dp4_x_tp2_is_one_container_with_all_eight_gpus() -> None:
    result = fleet_launch({"h1": _input({"data_parallel_size": 4, "tensor_parallel_size": 2})}, check_image=False)
    assert result["errors"] == []
    record = result["records"]["h1"]
    (replica,) = record["launch"]["replicas"]  # one container: DP is never copied into several
    assert replica["container"] == "vllm" and replica["port"] == 8000
    assert replica["device_ids"] == [str(i) for i in range(8)]
    assert replica["engine_args"]["data-parallel-size"] == 4 and replica["engine_args"]["tensor-parallel-size"] == 2
    assert replica["argv"] == ["vllm", "serve", "--config", "/etc/vllm-fleet/engine.yaml"]
    cli = record["plan"]["cli_args"]
    assert cli[:4] == ["--data-parallel-size", "4", "--tensor-parallel-size", "2"]
    assert cli.count("--data-parallel-size") == 1


def test_dp2_x_tp2_is_two_containers_of_four_gpus_on_their_own_ports() -> None:
    result = fleet_launch({"h1": _input({"data_parallel_size": 2, "tensor_parallel_size": 2})}, check_image=False)
    assert result["errors"] == []
    replicas = result["records"]["h1"]["launch"]["replicas"]
    assert [r["container"] for r in replicas] == ["vllm-0", "vllm-1"]
    assert [r["port"] for r in replicas] == [8000, 8001] == [r["engine_args"]["port"] for r in replicas]
    assert [r["device_ids"] for r in replicas] == [["0", "1", "2", "3"], ["4", "5", "6", "7"]]
    assert all(r["engine_args"]["data-parallel-size"] == 2 for r in replicas)


def test_dp3_x_tp4_on_eight_gpus_is_refused_naming_the_host() -> None:
    result = fleet_launch({"h1": _input({"data_parallel_size": 3, "tensor_parallel_size": 4})}, check_image=False)
    assert result["errors"] == ["h1: --data-parallel-size 3 x --tensor-parallel-size 4 needs 12 GPUs but the host has "
                                "8: data parallelism runs every rank inside one host; lower data_parallel_size to at "
                                "most 2"]
    assert result["records"] == {}


def test_dp_on_a_host_of_a_multinode_group_is_no_longer_an_input_error() -> None:
    """A group's hosts spread the ranks over their nodes (tests/unit/preflight/test_data_parallel_multinode.py)."""
    variables = {**BASE, "vllm_fleet_multinode_group": "big", "vllm_fleet_engine_args": {"data_parallel_size": 2}}
    assert check_host_inputs("n1", variables, ["vllm_servers", "gpu_h100"]) == []


def test_launch_record_lays_data_parallel_ranks_over_nodes_one_container_each() -> None:
    """A plan with data_parallel_size over 2 nodes: gpus_per_replica is one node's (its 2 ranks x TP 4), not split."""
    plan = {"device": "cuda", "engine_args": {"data-parallel-size": 4, "tensor-parallel-size": 4}, "env": {},
            "parallel": {"replicas": 1, "gpus_per_replica": 8, "nodes": 2, "data_parallel_size": 4}}
    settings = launch_settings({}, address="10.0.0.2", model_dir="/srv/models/m")
    record = launch_record(plan, host="n2", settings=settings, nodes=["n1", "n2"],
                           node_addresses=["10.0.0.1", "10.0.0.2"])
    (replica,) = record["replicas"]
    assert replica["device_ids"] == [str(i) for i in range(8)]
    assert replica["argv"][4:] == ["--data-parallel-size-local", "2", "--data-parallel-address", "10.0.0.1",
                                   "--data-parallel-rpc-port", "29550", "--data-parallel-start-rank", "2", "--headless"]
    assert not record["serves_api"] and replica["backend"] is None
    with pytest.raises(LaunchError, match="spreads data parallelism over 3 nodes, the host group has 2"):
        launch_record({**plan, "parallel": {**plan["parallel"], "nodes": 3}}, host="n2", settings=settings,
                      nodes=["n1", "n2"], node_addresses=["10.0.0.1", "10.0.0.2"])
