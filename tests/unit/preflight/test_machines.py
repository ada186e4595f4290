"""The machines behind the inventory (preflight/machines.py): a gpu_* host with no GPU, GPU UUIDs, and names that are one
machine or share ports and containers with each other or a load balancer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import record
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.fleet import fleet_preflight
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.machines import (
    check_gpu_present,
    check_machines,
    check_sku_match,
    gpu_uuids,
)

ROOT = Path(__file__).resolve().parents[3]
CPU_FACTS: dict[str, Any] = json.loads((ROOT / "tests/fixtures/preflight/facts/cpu_host.json").read_text())
H200: dict[str, Any] = json.loads((ROOT / "tests/fixtures/preflight/recorded_facts/h200-a.json").read_text())


# ---- 4. a gpu_* host whose facts show no GPU ---------------------------------------------------------

NO_GPU = ("h100-a: is in gpu_h100 but its facts show no NVIDIA GPU (gpu_count 0): fix the driver (nvidia-smi must "
          "list the GPUs) or the recorded facts file, or move the host to a cpu_<lane> group")


@pytest.mark.parametrize("match", [None, "H100"])
def test_gpu_group_without_a_gpu_is_refused(match: str | None) -> None:
    assert check_sku_match("h100-a", CPU_FACTS, "gpu_h100", match) == [NO_GPU]
    assert check_gpu_present("h100-a", CPU_FACTS, "gpu_h100") == [NO_GPU]


def test_the_fleet_preflight_refuses_it_too() -> None:
    """preflight/fleet.py fleet_preflight (the playbook's call) runs the check without a SKU match."""
    state = {"vars": {"vllm_fleet_model": "/m"}, "groups": ["vllm_servers", "gpu_h100"], "address": "h100-a",
             "model_dir": "/m", "model_exists": True, "facts": CPU_FACTS, "facts_error": None, "feedback": None}
    result = fleet_preflight({"h100-a": state}, recorded=True, planning=True)
    assert (result["stage"], result["errors"]) == ("facts", [NO_GPU])


def test_cpu_groups_and_gpu_hosts_pass() -> None:
    assert check_gpu_present("cpu-a", CPU_FACTS, "cpu_lane") == []
    assert check_sku_match("cpu-a", CPU_FACTS, "cpu_lane", None) == []
    assert check_gpu_present("h200-a", H200, "gpu_h200") == []
    assert check_sku_match("h200-a", H200, "gpu_h200", "H200") == []
    assert check_gpu_present("x", CPU_FACTS, None) == []


# ---- GPU UUIDs ---------------------------------------------------------------------------------------

def test_gpu_uuids_are_the_gpus_uuid_field() -> None:
    assert gpu_uuids(H200) == [g["uuid"] for g in H200["gpus"]]
    assert all(u.startswith("GPU-") for u in gpu_uuids(H200)) and gpu_uuids(H200)
    assert gpu_uuids(CPU_FACTS) == []
    assert gpu_uuids(None) == [] and gpu_uuids({"gpus": "x"}) == []
    assert gpu_uuids({"gpus": [{"uuid": "GPU-a"}, {"uuid": "GPU-a"}, {"name": "no uuid"}, 5]}) == ["GPU-a"]


def test_mig_instances_do_not_count_as_gpus() -> None:
    facts = json.loads((ROOT / "tests/fixtures/gpu/a100_80gb_mig/expected_facts.json").read_text())
    assert gpu_uuids(facts) == ["GPU-27593489-35c9-c450-6587-484e9002b72c"]


# ---- 7. the fleet's machines ------------------------------------------------------------------------

def host(address: str, ports: list[int], containers: list[str], uuids: list[str] | None = None) -> dict[str, Any]:
    return {"address": address, "gpu_uuids": uuids or [], "ports": ports, "containers": containers}


def test_two_names_for_one_machine_by_gpu() -> None:
    hosts = {"h200-b": host("10.0.0.2", [8000], ["vllm"], ["GPU-2", "GPU-1"]),
             "h200-a": host("10.0.0.1", [8000], ["vllm"], ["GPU-1", "GPU-2"])}
    assert check_machines(hosts, {}) == ["h200-a and h200-b are the same machine (GPU GPU-1): list it once"]


def test_one_address_with_the_same_port_and_container() -> None:
    hosts = {"a": host("10.0.0.1", [8000], ["vllm"]), "b": host("10.0.0.1", [8000], ["vllm"])}
    assert check_machines(hosts, {}) == [
        "a and b are both 10.0.0.1 and would both use port 8000 and container 'vllm': list the machine once, or give "
        "each its own vllm_serve_port and vllm_serve_container_name"]


def test_one_address_with_only_the_port_or_only_the_container_shared() -> None:
    ports = {"a": host("10.0.0.1", [8000, 8001], ["v0"]), "b": host("10.0.0.1", [8001, 8000], ["v1"])}
    assert check_machines(ports, {})[0].startswith("a and b are both 10.0.0.1 and would both use ports 8000, 8001: ")
    names = {"a": host("10.0.0.1", [8000], ["vllm"]), "b": host("10.0.0.1", [9000], ["vllm"])}
    assert check_machines(names, {})[0].startswith("a and b are both 10.0.0.1 and would both use container 'vllm': ")


def test_loopback_spellings_are_one_machine() -> None:
    hosts = {"a": host("127.0.0.1", [8000], ["a"]), "b": host("localhost", [8000], ["b"])}
    assert check_machines(hosts, {}) == [
        "a and b are both 127.0.0.1 / localhost and would both use port 8000: list the machine once, or give each "
        "its own vllm_serve_port and vllm_serve_container_name"]


def test_a_lab_of_names_on_one_machine_is_allowed() -> None:
    hosts = {f"lab-{i}": host("127.0.0.1", [18200 + 10 * i, 18201 + 10 * i], [f"vllm-lab-{i}"]) for i in range(3)}
    lbs = {"lb": {"address": "127.0.0.1", "ports": [18080, 18404]}}
    assert check_machines(hosts, lbs) == []


def test_a_replica_on_the_load_balancers_port() -> None:
    hosts = {"cpu-a": host("127.0.0.1", [8000, 8080], ["v0", "v1"]), "far": host("10.0.0.9", [8080], ["v"])}
    lbs = {"lb-1": {"address": "localhost", "ports": [8080, 8404]}}
    assert check_machines(hosts, lbs) == [
        "replica port 8080 of cpu-a overlaps the load balancer's port on localhost (lb host lb-1): move "
        "vllm_serve_port or vllm_lb_port"]


def test_a_host_that_is_also_the_load_balancer() -> None:
    hosts = {"solo": host("solo", [8000], ["vllm"])}  # no address: the inventory name stands for it
    assert check_machines(hosts, {"solo": {"address": "solo", "ports": [8000]}}) == [
        "replica port 8000 of solo overlaps the load balancer's port on solo (lb host solo): move vllm_serve_port or "
        "vllm_lb_port"]
    assert check_machines(hosts, {"solo": {"ports": [8080]}}) == []


def test_messages_are_in_a_stable_order() -> None:
    hosts = {n: host("10.0.0.1", [8000], ["vllm"], [f"GPU-{n}"]) for n in ("c", "a", "b")}
    hosts["z"] = host("10.0.0.7", [8000], ["vllm"], ["GPU-a"])
    lbs = {"lb2": {"address": "10.0.0.1", "ports": [8000]}, "lb1": {"address": "10.0.0.1", "ports": [8000]}}
    first = check_machines(hosts, lbs)
    assert first == check_machines(dict(reversed(list(hosts.items()))), dict(reversed(list(lbs.items()))))
    assert [m.split(" ")[0:3] for m in first[:4]] == [["a", "and", "b"], ["a", "and", "c"], ["a", "and", "z"],
                                                      ["b", "and", "c"]]
    assert "lb host lb1" in first[4] and "lb host lb2" in first[-1]


def test_odd_shapes_do_not_raise() -> None:
    hosts: dict[str, Any] = {"a": {"address": "", "ports": ["8000", None, "x"], "containers": None}, "b": {}}
    assert check_machines(hosts, None) == []
    assert check_machines({"a": {"ports": ["8000"]}}, {"a": {"ports": [8000]}}) == [
        "replica port 8000 of a overlaps the load balancer's port on a (lb host a): move vllm_serve_port or "
        "vllm_lb_port"]


def test_a_multinode_heads_own_port_is_a_port_of_its_machine() -> None:
    """Rank 0 of a group binds its master (or Ray, or data-parallel RPC) port beside its replicas: another name on the
    same machine must not serve on it; the message says which variable moves it."""
    hosts = {"head": dict(host("127.0.0.1", [18200], ["vllm-head"]), head_ports=[29500]),
             "other": host("localhost", [29500], ["vllm-other"]),
             "worker": dict(host("127.0.0.2", [18201], ["vllm-worker"]), head_ports=[])}
    assert check_machines(hosts, {}) == [
        "head and other are both 127.0.0.1 / localhost and would both use port 29500: list the machine once, or give "
        "each its own vllm_serve_port and vllm_serve_container_name (a multi-node group's head binds its "
        "vllm_serve_master_port, vllm_serve_ray_port or vllm_serve_dp_rpc_port too)"]
    hosts["other"] = host("localhost", [18202], ["vllm-other"])
    assert check_machines(hosts, {}) == []


def test_the_head_ports_of_a_launch_record() -> None:
    settings = {"master_port": 29500, "ray_port": 6379, "dp_rpc_port": 29550}
    replicas = [{"port": 8000}]
    head = {"node_rank": 0, "master_address": "10.0.0.1", "image": {"ray": False}, "replicas": replicas}
    assert record._head_ports(head, settings) == [29500]
    assert record._head_ports(dict(head, image={"ray": True}), settings) == [6379]
    dp = [{"port": 8000, "data_parallel": {"rpc_port": 29551}}]
    assert record._head_ports(dict(head, replicas=dp), settings) == [29551]
    assert record._head_ports(dict(head, node_rank=1), settings) == []  # a worker binds none of them
    assert record._head_ports(dict(head, master_address=None), settings) == []  # a single-node host
