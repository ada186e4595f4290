"""Data parallelism across the hosts of a multi-node group, planned and laid out (record.fleet_launch → planner →
deploy/launch.py launch_record / data_parallel_commands): one container per node with its local ranks, the first
host serving the API, the others headless from their start rank; what the mode cannot do is refused with one line
naming the host. On the recorded 8x H100 facts of tests/fixtures/preflight/recorded_facts/h100-{a,b}.json."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.launch import (
    LaunchError,
    data_parallel_commands,
    engine_config,
    lb_servers,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.engine_args import check_engine_args
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.inputs import check_host_inputs
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.machines import (
    DEFAULT_PORT_VARIABLES,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import (
    fleet_launch,
    host_input,
)

from ._recorded import H100, H100_B, MODEL_8B, ROOT

CPU = json.loads((ROOT / "tests" / "fixtures" / "planner" / "cpu_host.json").read_text())
BASE = {"vllm_fleet_model": MODEL_8B, "vllm_fleet_vllm_version": "0.32.0", "vllm_fleet_api_key": "sk-unit-dpn-7a3c1e"}
CONFIG = "/etc/vllm-fleet/engine.yaml"


def _third(facts: dict[str, Any]) -> dict[str, Any]:
    """A third H100 machine: h100-a's GPUs with other UUIDs (one machine listed twice is refused)."""
    other = copy.deepcopy(facts)
    for gpu in other["gpus"]:
        gpu["uuid"] = gpu["uuid"][:-4] + "3333"
    return other


def _network(address: str) -> dict[str, Any]:
    """Discovered network facts of a node holding ``address`` on ens1 (as gpu_facts reports them)."""
    return {"interfaces": [{"name": "lo", "ipv4": ["127.0.0.1/8"], "ipv6": [], "up": True, "mtu": 65536},
                           {"name": "ens1", "ipv4": [f"{address}/24"], "ipv6": [], "up": True, "mtu": 9000}],
            "rdma": [], "rdma_dev_nodes": []}


def _group(engine_args: dict[str, Any] | list[dict[str, Any]], nodes: int = 2, *, facts: list[Any] | None = None,
           sku: str = "gpu_h100", **variables: Any) -> dict[str, dict[str, Any]]:
    """``nodes`` hosts n1.. of one multi-node group "dp" on 10.0.0.1.. (engine_args: one for all, or one per host)."""
    machines = facts or [H100, H100_B, _third(H100)][:nodes]
    per_host = engine_args if isinstance(engine_args, list) else [engine_args] * nodes
    hosts = {}
    for i in range(nodes):
        name, address = f"n{i + 1}", f"10.0.0.{i + 1}"
        given = {**BASE, "vllm_fleet_multinode_group": "dp", "vllm_fleet_engine_args": per_host[i],
                 "ansible_host": address, **variables}
        hosts[name] = host_input(given, name, sku=sku, facts=machines[i], address=address, model_dir=MODEL_8B,
                                 network=_network(address), ports={"vllm_serve_port": 8000})
    return hosts


def _replica(result: dict[str, Any], host: str) -> dict[str, Any]:
    (replica,) = result["records"][host]["launch"]["replicas"]  # one container per node
    return replica


def test_dp4_x_tp4_over_two_h100_nodes_is_one_container_per_node() -> None:
    result = fleet_launch(_group({"data_parallel_size": 4, "tensor_parallel_size": 4}), check_image=False)
    assert result["errors"] == [] and result["warnings"] == []
    head, worker = _replica(result, "n1"), _replica(result, "n2")
    plan = result["records"]["n1"]["plan"]
    assert plan["parallel"] == {"tensor_parallel_size": 4, "pipeline_parallel_size": 1, "replicas": 1,
                                "gpus_per_replica": 8, "nodes": 2, "data_parallel_size": 4}
    assert result["records"]["n2"]["plan"] == plan  # the group's nodes share one plan
    for replica in (head, worker):
        assert replica["container"] == "vllm" and replica["port"] == 8000
        assert replica["device_ids"] == [str(i) for i in range(8)]  # 2 local ranks x TP 4
        assert replica["nodes"] == ["n1", "n2"] and replica["master_address"] == "10.0.0.1"
        assert replica["group_health_url"] == "http://10.0.0.1:8000/health"
    assert (head["node_rank"], worker["node_rank"]) == (0, 1)
    # The engine config: the plan's data-parallel-size and TP, the same file on every node; the layout's flags are
    # on each node's command line.
    assert head["engine_args"] == worker["engine_args"]
    assert head["engine_args"]["data-parallel-size"] == 4 and head["engine_args"]["tensor-parallel-size"] == 4
    assert not {"data-parallel-size-local", "data-parallel-start-rank", "data-parallel-address",
                "data-parallel-rpc-port", "headless", "nnodes", "node-rank", "master-addr"} & set(head["engine_args"])
    common = ["vllm", "serve", "--config", CONFIG, "--data-parallel-size-local", "2",
              "--data-parallel-address", "10.0.0.1", "--data-parallel-rpc-port", "29550"]
    assert head["argv"] == common  # start rank 0 is vLLM's own when unset (a set one would mean hybrid LB)
    assert worker["argv"] == [*common, "--data-parallel-start-rank", "2", "--headless"]
    assert head["data_parallel"] == {"size": 4, "size_local": 2, "start_rank": 0, "address": "10.0.0.1",
                                     "rpc_port": 29550}
    assert worker["data_parallel"] == {**head["data_parallel"], "start_rank": 2}
    # Only the head serves the API and sits behind the load balancer.
    assert head["serves_api"] and not worker["serves_api"]
    assert worker["backend"] is None
    launches = [result["records"][h]["launch"] for h in ("n1", "n2")]
    assert lb_servers(launches) == [{"server": "n1", "address": "10.0.0.1", "port": 8000}]
    assert [launch["serves_api"] for launch in launches] == [True, False]
    # Each node's network, as for any multi-node group.
    for replica, address in ((head, "10.0.0.1"), (worker, "10.0.0.2")):
        assert replica["env"]["VLLM_HOST_IP"] == address
        assert replica["env"]["NCCL_SOCKET_IFNAME"] == replica["env"]["GLOO_SOCKET_IFNAME"] == "ens1"
    # The head binds the RPC port: the fleet port checks know it (default value included).
    assert result["records"]["n1"]["ports"] == {"vllm_serve_port": 8000, "vllm_serve_dp_rpc_port": 29550}
    assert result["records"]["n2"]["ports"] == {"vllm_serve_port": 8000}


def test_the_per_gpu_plan_is_the_tp_plans_and_the_scheduler_is_per_rank() -> None:
    result = fleet_launch(_group({"data_parallel_size": 4, "tensor_parallel_size": 4}), check_image=False)
    alone = fleet_launch({"h1": host_input({**BASE, "vllm_fleet_engine_args": {"tensor_parallel_size": 4}}, "h1",
                                           sku="gpu_h100", facts=H100, address="h1", model_dir=MODEL_8B)},
                         check_image=False)
    plan, single = result["records"]["n1"]["plan"], alone["records"]["h1"]["plan"]
    assert plan["memory_gib"] == single["memory_gib"] and plan["prediction"] == single["prediction"]
    for key in ("max-num-seqs", "max-num-batched-tokens"):
        assert plan["engine_args"][key] == single["engine_args"][key]
        assert plan["reasons"][key] == single["reasons"][key] + (
            "; per data-parallel rank (each of the 4 engines schedules its own)")
    assert plan["reasons"]["data-parallel-size"] == (
        "set by you: 4 engines over the multi-node group's 2 hosts, 2 per host (DP x TP = 2 x 4 = 8 GPUs of each "
        "host, one container per host); the first host serves the API and vLLM balances requests over every "
        "engine; each engine holds the whole model, so memory, KV cache and the logged KV size are per engine")


def test_dp6_x_tp2_over_three_nodes_starts_ranks_0_2_4() -> None:
    result = fleet_launch(_group({"data_parallel_size": 6, "tensor_parallel_size": 2}, nodes=3), check_image=False)
    assert result["errors"] == []
    par = result["records"]["n1"]["plan"]["parallel"]
    assert (par["data_parallel_size"], par["nodes"], par["gpus_per_replica"], par["replicas"]) == (6, 3, 4, 1)
    replicas = [_replica(result, h) for h in ("n1", "n2", "n3")]
    assert [r["device_ids"] for r in replicas] == [["0", "1", "2", "3"]] * 3
    assert [r["data_parallel"]["start_rank"] for r in replicas] == [0, 2, 4]
    assert [r["serves_api"] for r in replicas] == [True, False, False]
    common = ["vllm", "serve", "--config", CONFIG, "--data-parallel-size-local", "2",
              "--data-parallel-address", "10.0.0.1", "--data-parallel-rpc-port", "29550"]
    assert [r["argv"] for r in replicas] == [
        common,
        [*common, "--data-parallel-start-rank", "2", "--headless"],
        [*common, "--data-parallel-start-rank", "4", "--headless"],
    ]
    # 2 ranks x TP 2 use half of each host's 8 GPUs: planned, with a warning saying how to use the rest.
    assert ("data parallelism across 3 hosts uses 4 of each host's 8 GPUs (2 ranks x TP 2): the other 4 stay idle; "
            "raise data_parallel_size to 12 to use them") in result["records"]["n1"]["plan"]["warnings"]


def test_the_rpc_port_comes_from_vllm_serve_dp_rpc_port_and_is_port_checked() -> None:
    moved = fleet_launch(_group({"data_parallel_size": 2}, vllm_serve_dp_rpc_port=13345), check_image=False)
    assert moved["errors"] == []
    for host in ("n1", "n2"):
        argv = _replica(moved, host)["argv"]
        assert argv[argv.index("--data-parallel-rpc-port") + 1] == "13345"
        assert _replica(moved, host)["data_parallel"]["rpc_port"] == 13345
    assert moved["records"]["n1"]["ports"]["vllm_serve_dp_rpc_port"] == 13345
    # The head's RPC port on a port the host already uses: refused like any two services on one port.
    hosts = _group({"data_parallel_size": 2})
    hosts["n1"]["ports"] = {"vllm_serve_port": 29550}
    hosts["n1"]["settings"]["port"] = 29550
    clash = fleet_launch(hosts, check_image=False)
    assert clash["errors"] == ["n1: port 29550 is used by both vllm_serve_dp_rpc_port and vllm_serve_port: give each "
                               "service its own port"]
    assert "vllm_serve_dp_rpc_port" in DEFAULT_PORT_VARIABLES


def test_the_head_binds_on_its_vllm_host_ip_when_the_user_sets_it() -> None:
    hosts = _group({"data_parallel_size": 2})
    hosts["n1"]["env"] = {"VLLM_HOST_IP": "10.0.0.1", "NCCL_SOCKET_IFNAME": "ens1"}
    hosts["n1"]["settings"]["advertise_address"] = "n1.example.internal"  # a name: ZMQ binds no host names
    hosts["n1"]["network"] = None
    result = fleet_launch(hosts, check_image=False)
    assert result["errors"] == []
    for host in ("n1", "n2"):
        assert _replica(result, host)["data_parallel"]["address"] == "10.0.0.1"
        argv = _replica(result, host)["argv"]
        assert argv[argv.index("--data-parallel-address") + 1] == "10.0.0.1"


@pytest.mark.parametrize(("engine_args", "message"), [
    ({"data_parallel_size": 3},
     "--data-parallel-size 3 does not split evenly over the 2 hosts of the multi-node group: every host runs the same "
     "number of ranks (data_parallel_size / 2); set data_parallel_size to a multiple of 2 (2, 4) on every host of "
     "the group"),
    ({"data_parallel_size": 4, "tensor_parallel_size": 8},
     "--data-parallel-size 4 x --tensor-parallel-size 8 over the 2 hosts of the multi-node group puts 2 ranks of 8 "
     "GPUs = 16 GPUs on each host but a host has 8: lower data_parallel_size to at most 2 or tensor_parallel_size to "
     "at most 4"),
    ({"data_parallel_size": 18},
     "--data-parallel-size 18 over the 2 hosts of the multi-node group puts 9 ranks on each host but a host has 8 "
     "GPUs: lower data_parallel_size to at most 16"),
    ({"data_parallel_size": 4, "tensor_parallel_size": 2, "pipeline_parallel_size": 2},
     "--pipeline-parallel-size 2 with --data-parallel-size 4 over the 2 hosts of the multi-node group is refused: "
     "each data-parallel rank runs as one tensor-parallel instance inside one host (no pipeline stages across "
     "hosts): drop pipeline_parallel_size from the group's hosts"),
])
def test_what_does_not_fit_the_group_is_refused_naming_each_host(engine_args: dict[str, Any], message: str) -> None:
    result = fleet_launch(_group(engine_args), check_image=False)
    assert result["errors"] == [f"n1: {message}", f"n2: {message}"]
    assert result["records"] == {}


def test_a_data_parallel_size_that_differs_between_the_groups_hosts_is_refused() -> None:
    result = fleet_launch(_group([{"data_parallel_size": 4}, {"data_parallel_size": 2}]), check_image=False)
    assert result["errors"] == [
        "n2: vllm_fleet_engine_args.data_parallel_size = 2 but n1 (rank 0 of multi-node group 'dp') has 4: the "
        "group's hosts run one data-parallel instance together; set the same data_parallel_size on every host of "
        "the group (n1, n2), e.g. in their group_vars"]
    assert result["records"] == {}
    unset = fleet_launch(_group([{"data_parallel_size": 2}, {}]), check_image=False)
    assert unset["errors"] == [
        "n2: vllm_fleet_engine_args.data_parallel_size = 1 but n1 (rank 0 of multi-node group 'dp') has 2: the "
        "group's hosts run one data-parallel instance together; set the same data_parallel_size on every host of "
        "the group (n1, n2), e.g. in their group_vars"]
    # Input checks no longer refuse data_parallel_size on a group's host.
    variables = {**BASE, "vllm_fleet_multinode_group": "dp", "vllm_fleet_engine_args": {"data_parallel_size": 2}}
    assert check_host_inputs("n1", variables, ["vllm_servers", "gpu_h100"]) == []


def test_data_parallelism_on_a_cpu_lane_group_is_refused() -> None:
    result = fleet_launch(_group({"data_parallel_size": 2}, facts=[CPU, copy.deepcopy(CPU)], sku="cpu_lane"),
                          check_image=False)
    assert len(result["errors"]) == 2
    for host, error in zip(("n1", "n2"), result["errors"], strict=True):
        assert error.startswith(f"{host}: --data-parallel-size 2 is not planned on the CPU lane: "), error
        assert error.endswith("leave data_parallel_size unset and add hosts"), error


@pytest.mark.parametrize("key", ["data_parallel_size_local", "data_parallel_start_rank", "data_parallel_address",
                                 "data_parallel_rpc_port"])
def test_the_layouts_own_options_stay_refused_as_engine_args(key: str) -> None:
    (error,) = check_engine_args("n1", {key: 1})
    assert error.startswith(f"n1: vllm_fleet_engine_args.{key} = 1 is refused: only data_parallel_size is modelled")
    assert "computed by the layout" in error and "vllm_serve_dp_rpc_port" in error
    with pytest.raises(LaunchError, match="set per node by the multi-node launcher"):
        engine_config({"engine_args": {key.replace("_", "-"): 1}}, model_path="/m", served_model_name="m",
                      host="0.0.0.0", port=8000)


def test_data_parallel_commands_check_their_input() -> None:
    plan = {"parallel": {"data_parallel_size": 4, "nodes": 2}}
    kwargs: dict[str, Any] = {"server_argv": ["vllm", "serve"], "config_path": CONFIG}
    head, worker = data_parallel_commands(plan, nodes=["10.0.0.1", "10.0.0.2"], rpc_port=13345, **kwargs)
    assert (head["start_rank"], worker["start_rank"], head["size_local"]) == (0, 2, 2)
    assert worker["shell"] == ("vllm serve --config /etc/vllm-fleet/engine.yaml --data-parallel-size-local 2 "
                               "--data-parallel-address 10.0.0.1 --data-parallel-rpc-port 13345 "
                               "--data-parallel-start-rank 2 --headless")
    with pytest.raises(LaunchError, match="spreads data parallelism over 2 nodes, the host group has 3"):
        data_parallel_commands(plan, nodes=["a", "b", "c"], **kwargs)
    with pytest.raises(LaunchError, match="does not split evenly over 2 nodes"):
        data_parallel_commands({"parallel": {"data_parallel_size": 3, "nodes": 2}}, nodes=["a", "b"], **kwargs)
    with pytest.raises(LaunchError, match="rpc_port must be an int"):
        data_parallel_commands(plan, nodes=["a", "b"], rpc_port=0, **kwargs)


def test_the_ray_backend_is_refused_for_data_parallelism_across_nodes() -> None:
    result = fleet_launch(_group({"data_parallel_size": 2}, vllm_serve_multinode_backend="ray"), check_image=False)
    assert result["errors"] == [
        f"{host}: cannot lay out the plan: data_parallel_size 2 across a multi-node group runs with vLLM's own mp "
        "launcher, not 'ray': set vllm_serve_multinode_backend: mp" for host in ("n1", "n2")]


R1 = str(ROOT / "tests" / "fixtures" / "planner" / "checkpoints" / "deepseek-r1")


def _r1_group(engine_args: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The two recorded 8x H100 hosts as one multi-node group serving DeepSeek-R1 with ``engine_args``."""
    hosts = {}
    for i, facts in enumerate((H100, H100_B)):
        name, address = f"n{i + 1}", f"10.0.0.{i + 1}"
        given = {**BASE, "vllm_fleet_model": R1, "vllm_fleet_multinode_group": "ds",
                 "vllm_fleet_engine_args": engine_args, "ansible_host": address}
        hosts[name] = host_input(given, name, sku="gpu_h100", facts=facts, address=address, model_dir=R1,
                                 network=_network(address), ports={"vllm_serve_port": 8000})
    return hosts


def test_deepseek_r1_dp16_with_ep_over_two_8_gpu_h100_hosts_is_planned_and_laid_out_per_node() -> None:
    """Issue 35: DeepSeek-R1 (the published config.json, block FP8) over DP 16 on two 8x H100 hosts was refused at
    111 GiB per H100 ("each rank holds a whole copy"). With EP the 256 routed experts are sharded over all 16 ranks
    (16 per GPU), attention and the rest stay whole per rank: 55.84 GiB of weights per GPU, and the step is divided
    by the 16 ranks whose tokens every rank's experts gather (vLLM's allgather all2all), so it fits. The second
    host runs headless from start rank 8; max_num_seqs is per rank."""
    result = fleet_launch(_r1_group({"data_parallel_size": 16}), check_image=False)
    assert result["errors"] == []
    plan = result["records"]["n1"]["plan"]
    assert result["records"]["n2"]["plan"] == plan
    assert plan["parallel"] == {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "replicas": 1,
                                "gpus_per_replica": 8, "nodes": 2, "data_parallel_size": 16}
    args, reasons = plan["engine_args"], plan["reasons"]
    assert args["enable-expert-parallel"] is True
    assert reasons["enable-expert-parallel"].startswith("better: DP-attention with EP, data parallelism set by you")
    assert "sharded whole over DP x TP = 16 GPUs" in reasons["enable-expert-parallel"]
    assert plan["memory_gib"]["weights"] == pytest.approx(55.84, abs=0.01)
    assert reasons["weights.routed_experts"].startswith("38.07 GiB per GPU: 256 experts x 58 MoE layers over the "
                                                        "expert-parallel group of 16 GPUs (DP 16 x TP 1)")
    assert args["max-num-batched-tokens"] == 2048 and "16 x 2048 = 32768 rows" in reasons["max-num-batched-tokens"]
    assert reasons["max-num-seqs"].endswith("; per data-parallel rank (each of the 16 engines schedules its own)")
    assert plan["prediction"]["kv_cache_tokens"] > 0
    head, worker = _replica(result, "n1"), _replica(result, "n2")
    common = ["vllm", "serve", "--config", CONFIG, "--data-parallel-size-local", "8",
              "--data-parallel-address", "10.0.0.1", "--data-parallel-rpc-port", "29550"]
    assert head["argv"] == common
    assert worker["argv"] == [*common, "--data-parallel-start-rank", "8", "--headless"]
    assert head["engine_args"] == worker["engine_args"] and head["engine_args"]["data-parallel-size"] == 16
    assert head["device_ids"] == worker["device_ids"] == [str(i) for i in range(8)]
    assert head["serves_api"] and not worker["serves_api"]
    assert head["group_health_url"] == worker["group_health_url"] == "http://10.0.0.1:8000/health"
    # Pinned off, the same layout slices every expert over the 16 GPUs: the same weight bytes, still planned.
    off = fleet_launch(_r1_group({"data_parallel_size": 16, "enable_expert_parallel": False}), check_image=False)
    assert off["errors"] == []
    off_plan = off["records"]["n1"]["plan"]
    assert off_plan["engine_args"]["enable-expert-parallel"] is False
    assert off_plan["memory_gib"]["weights"] == plan["memory_gib"]["weights"]
    assert "each sliced over 16 GPUs (DP 16 x TP 1, expert parallelism off)" in off_plan["reasons"][
        "weights.routed_experts"]
