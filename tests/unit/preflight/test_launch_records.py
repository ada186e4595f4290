"""The launch record: preflight's one answer per host (preflight/record.py, deploy/launch.py launch_record)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.launch import (
    LaunchError,
    container_env,
    launch_record,
    launch_settings,
    lb_servers,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import (
    fleet_launch,
    host_input,
    replan,
)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "inventories" / "example"
H200 = json.loads((EXAMPLE / "recorded_facts" / "h200-01.json").read_text())
CPU = json.loads((ROOT / "tests" / "fixtures" / "planner" / "cpu_host.json").read_text())
MODEL_8B = str(EXAMPLE / "models" / "llama-3.1-8b")
MODEL_70B = str(EXAMPLE / "models" / "llama-3.1-70b")
SECRET = "sk-unit-test-secret-1f2e3d"


def _input(host: str, facts: dict[str, Any], model: str = MODEL_8B, network: dict[str, Any] | None = None,
           **variables: Any) -> dict[str, Any]:
    base = {"vllm_fleet_model": model, "vllm_fleet_vllm_version": "0.32.0", "vllm_fleet_api_key": SECRET}
    base.update(variables)
    return host_input(base, host, sku="gpu_h200" if facts.get("gpu_count") else "cpu_lane", facts=facts,
                      address=variables.get("ansible_host", host), model_dir=model, network=network)


def _network(address: str, rdma: bool = False) -> dict[str, Any]:
    """Discovered network facts (gpu_facts' ansible_facts.network) of a node holding ``address`` on ens1."""
    return {"interfaces": [{"name": "lo", "ipv4": ["127.0.0.1/8"], "ipv6": [], "up": True, "mtu": 65536},
                           {"name": "ens1", "ipv4": [f"{address}/24"], "ipv6": [], "up": True, "mtu": 9000}],
            "rdma": [{"device": "mlx5_0", "port": 1, "link_layer": "InfiniBand", "state": "ACTIVE",
                      "netdev": "ib0"}] if rdma else [],
            "rdma_dev_nodes": ["/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0"] if rdma else []}


def test_host_input_keeps_no_secret_value_only_its_name() -> None:
    item = _input("h1", H200, vllm_fleet_hf_token="hf_abcdef123456")
    text = json.dumps(item)
    assert SECRET not in text and "hf_abcdef123456" not in text
    assert item["secret_names"] == ["HF_TOKEN", "VLLM_API_KEY"]


def test_one_host_record_has_every_field_the_stages_read() -> None:
    result = fleet_launch({"h1": _input("h1", H200, vllm_serve_port=9000)}, check_image=False)
    assert result["errors"] == []
    launch = result["records"]["h1"]["launch"]
    assert launch["image"]["vllm_version"] == "0.32.0" and launch["image"]["device"] == "cuda"
    assert launch["nodes"] == ["h1"] and launch["node_rank"] == 0 and launch["master_address"] is None
    replicas = launch["replicas"]
    plan = result["records"]["h1"]["plan"]
    assert len(replicas) == plan["parallel"]["replicas"]
    per = plan["parallel"]["gpus_per_replica"]
    used: list[str] = []
    for i, rep in enumerate(replicas):
        assert rep["port"] == 9000 + i == rep["engine_args"]["port"]
        assert len(rep["device_ids"]) == per
        used += rep["device_ids"]
        assert rep["env_names"] == sorted(rep["env_names"]) and "VLLM_API_KEY" in rep["env_names"]
        assert "VLLM_API_KEY" not in rep["env"]
        assert rep["argv"][-2:] == ["--config", "/etc/vllm-fleet/engine.yaml"]
        assert {"container", "port", "device_ids", "engine_args", "env_names", "node_rank", "nodes",
                "master_address"} <= set(rep)
    assert len(set(used)) == len(used), "two replicas share a GPU"
    assert SECRET not in json.dumps(result)


def test_errors_name_each_host() -> None:
    hosts = {f"h{i}": _input(f"h{i}", _other_machine(H200, str(i) * 4), vllm_fleet_engine_args={"max_num_seqs": "many"}) for i in range(3)}
    result = fleet_launch(hosts, check_image=False)
    assert len(result["errors"]) == 3
    for i, error in enumerate(result["errors"]):
        assert error.startswith(f"h{i}: "), error


def _other_machine(facts: dict[str, Any], tag: str) -> dict[str, Any]:
    """The same GPU model on another machine: other GPU UUIDs (one machine listed twice is refused)."""
    other = copy.deepcopy(facts)
    for gpu in other["gpus"]:
        gpu["uuid"] = gpu["uuid"][:-4] + tag
    return other


def test_multinode_group_gets_ranks_nodes_and_the_master_address() -> None:
    hosts = {name: _input(name, _other_machine(H200, name[-1] * 4), model=MODEL_70B, ansible_host=addr,
                          vllm_fleet_multinode_group="big", network=_network(addr, rdma=True),
                          vllm_fleet_engine_args={"tensor_parallel_size": 2, "pipeline_parallel_size": 2})
             for name, addr in (("n1", "10.0.0.1"), ("n2", "10.0.0.2"))}
    result = fleet_launch(hosts, check_image=False)
    assert result["errors"] == []
    first, second = (result["records"][n]["launch"] for n in ("n1", "n2"))
    assert first["nodes"] == second["nodes"] == ["n1", "n2"]
    assert (first["node_rank"], second["node_rank"]) == (0, 1)
    assert first["master_address"] == second["master_address"] == "10.0.0.1"
    assert first["serves_api"] and not second["serves_api"]
    assert "--headless" in second["replicas"][0]["argv"] and "--headless" not in first["replicas"][0]["argv"]
    assert lb_servers([first, second]) == [first["replicas"][0]["backend"]]
    # The network from facts: each node announces its own address, NCCL and Gloo use the interface holding it,
    # RDMA devices with IPC_LOCK and unlimited memlock; every node's gate waits for rank 0's /health.
    for launch, address in ((first, "10.0.0.1"), (second, "10.0.0.2")):
        (replica,) = launch["replicas"]
        assert replica["env"]["VLLM_HOST_IP"] == address
        assert replica["env"]["NCCL_SOCKET_IFNAME"] == replica["env"]["GLOO_SOCKET_IFNAME"] == "ens1"
        assert replica["devices"] == ["/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0"]
        assert replica["cap_add"] == ["IPC_LOCK"] and replica["ulimits"] == ["memlock:-1:-1"]
        assert replica["group_health_url"] == f"http://10.0.0.1:{first['replicas'][0]['port']}/health"
        assert "ens1" in launch["network_reasons"]["NCCL_SOCKET_IFNAME"]


def test_a_multinode_node_without_network_facts_stops_a_deploy_and_warns_a_plan() -> None:
    hosts = {name: _input(name, _other_machine(H200, name[-1] * 4), model=MODEL_70B, ansible_host=addr,
                          vllm_fleet_multinode_group="big",
                          vllm_fleet_engine_args={"tensor_parallel_size": 2, "pipeline_parallel_size": 2})
             for name, addr in (("n1", "10.0.0.1"), ("n2", "10.0.0.2"))}
    deploying = fleet_launch(hosts, check_image=False)
    assert [e.split(":", maxsplit=1)[0] for e in deploying["errors"]] == ["n1", "n2"]
    assert all("no network facts" in e and "NCCL_SOCKET_IFNAME" in e for e in deploying["errors"])
    planning = fleet_launch(hosts, check_image=False, planning=True)
    assert planning["errors"] == [] and len(planning["warnings"]) == 2
    assert planning["records"]["n2"]["launch"]["replicas"][0]["env"]["VLLM_HOST_IP"] == "10.0.0.2"
    # Pinned the user's way, the interface is taken as given (no facts to check it against).
    pinned = {n: _input(n, _other_machine(H200, n[-1] * 4), model=MODEL_70B, ansible_host=a,
                        vllm_fleet_multinode_group="big", vllm_fleet_env={"NCCL_SOCKET_IFNAME": "ens"},
                        vllm_fleet_engine_args={"tensor_parallel_size": 2, "pipeline_parallel_size": 2})
              for n, a in (("n1", "10.0.0.1"), ("n2", "10.0.0.2"))}
    assert fleet_launch(pinned, check_image=False)["errors"] == []


def test_nodes_on_no_common_subnet_are_refused() -> None:
    hosts = {name: _input(name, _other_machine(H200, name[-1] * 4), model=MODEL_70B, ansible_host=addr,
                          vllm_fleet_multinode_group="big", network=_network(addr),
                          vllm_fleet_engine_args={"tensor_parallel_size": 2, "pipeline_parallel_size": 2})
             for name, addr in (("n1", "10.0.0.1"), ("n2", "10.9.0.2"))}
    (error,) = fleet_launch(hosts, check_image=False)["errors"]
    assert "share no IPv4 subnet" in error and error.endswith("(group big)")


def test_an_unexpected_error_is_one_line_naming_the_host() -> None:
    bad = _input("h1", H200)
    bad["settings"] = None  # not a dict: the layout step breaks
    result = fleet_launch({"h1": bad}, check_image=False)
    (error,) = result["errors"]
    assert error.startswith("h1: preflight failed unexpectedly") and "\n" not in error


def test_replan_validates_a_trial_like_an_inventory_pin() -> None:
    item = _input("h1", H200)
    good = replan(item, "h1", {"max_num_seqs": 64})
    assert good["errors"] == []
    assert good["records"]["h1"]["launch"]["replicas"][0]["engine_args"]["max-num-seqs"] == 64
    bad = replan(item, "h1", {"max_num_seqs": -1})
    assert bad["errors"] and bad["errors"][0].startswith("h1: ")


def test_container_env_adds_exactly_the_recorded_secrets() -> None:
    plan = {"device": "cpu", "engine_args": {"max-num-seqs": 8}, "env": {"A": "1"}, "parallel": {"replicas": 1}}
    settings = launch_settings({}, address="h", model_dir="/m/tiny")
    launch = launch_record(plan, host="h", settings=settings, secret_names=["VLLM_API_KEY"])
    (rep,) = launch["replicas"]
    env = container_env(rep, {"api_key": SECRET, "hf_token": ""})
    assert env["VLLM_API_KEY"] == SECRET and env["A"] == "1" and env["FLEET_HEALTH_PORT"] == "8000"
    with pytest.raises(LaunchError, match="expects VLLM_API_KEY but no value"):
        container_env(rep, {"api_key": ""})
    with pytest.raises(LaunchError, match="HF_TOKEN was given"):
        container_env(rep, {"api_key": SECRET, "hf_token": "x"})
    assert launch["served_model_name"] == "tiny" and launch["model_dir"] == "/m/tiny"


def test_a_secret_in_the_environment_is_refused_by_the_layout() -> None:
    plan = {"device": "cpu", "engine_args": {}, "env": {}, "parallel": {"replicas": 1}}
    settings = launch_settings({}, address="h", model_dir="/m")
    with pytest.raises(LaunchError, match="VLLM_API_KEY must not be set in the environment"):
        launch_record(plan, host="h", settings=settings, env={"VLLM_API_KEY": "x"}, secret_names=["VLLM_API_KEY"])


def test_records_are_deterministic() -> None:
    hosts = {"a": _input("a", H200), "b": _input("b", CPU)}
    one = fleet_launch(copy.deepcopy(hosts), check_image=False)
    two = fleet_launch(copy.deepcopy(hosts), check_image=False)
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)
    assert one["records"]["b"]["launch"]["replicas"][0]["device_ids"] == []


def test_hosts_that_differ_only_in_identity_are_planned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import record

    calls = []
    real = record.try_plan

    def counting(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(record, "try_plan", counting)
    hosts = {f"h{i}": _input(f"h{i}", _other_machine(H200, str(i) * 4)) for i in range(5)}
    result = fleet_launch(hosts, check_image=False)
    assert result["errors"] == [] and len(result["records"]) == 5
    assert len(calls) == 1
