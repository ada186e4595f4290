"""plugin_utils/deploy/network.py: a node's network facts → its multi-node environment and RDMA devices."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.network_facts import (
    parse_ip_json,
    validate_network,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.network import (
    NetworkError,
    check_group_reachability,
    node_network,
)
from hypothesis import given, settings
from hypothesis import strategies as st

NET = Path(__file__).resolve().parents[2] / "fixtures" / "network"
CAPTURED = parse_ip_json((NET / "ip-j-addr-show.json").read_text(encoding="utf-8"))
ROCE = json.loads((NET / "constructed-ib-roce.json").read_text(encoding="utf-8"))["expected"]
IB_DOWN = json.loads((NET / "constructed-ib-down.json").read_text(encoding="utf-8"))["expected"]
IB0 = {"name": "ib0", "ipv4": ["192.168.50.2/24"], "ipv6": [], "up": True, "mtu": 2044}


def net(interfaces: list[dict[str, Any]] | None = None, rdma: dict[str, Any] | None = None) -> dict[str, Any]:
    """Network facts in gpu_facts' shape: the captured interfaces (plus extras) and an RDMA part."""
    network = {"interfaces": copy.deepcopy(CAPTURED if interfaces is None else interfaces),
               "rdma": [], "rdma_dev_nodes": [], **copy.deepcopy(rdma or {})}
    return validate_network(network)


def iface(name: str, *ipv4: str, up: bool | None = True) -> dict[str, Any]:
    return {"name": name, "ipv4": list(ipv4), "ipv6": [], "up": up, "mtu": 1500}


# ----------------------------------------------------------------------------- single node


@pytest.mark.parametrize("rdma", [None, ROCE])
def test_single_node_needs_nothing(rdma: dict[str, Any] | None) -> None:
    out = node_network(net(rdma=rdma), address="gpu-1", multinode=False)
    assert (out["env"], out["devices"], out["cap_add"], out["ulimits"]) == ({}, [], [], [])
    assert out["reasons"]["rdma"] == "single node: NCCL uses NVLink/PCIe inside the host; no RDMA devices passed"
    assert out["reasons"]["env"].startswith("single node")


def test_single_node_without_facts_is_fine() -> None:
    assert node_network(None, address="localhost", multinode=False)["env"] == {}


def test_single_node_still_checks_a_user_interface() -> None:
    with pytest.raises(NetworkError, match="NCCL_SOCKET_IFNAME='ens9' names no interface"):
        node_network(net(), address="h", multinode=False, user_env={"NCCL_SOCKET_IFNAME": "ens9"})


# ----------------------------------------------------------------------------- multi-node


def test_multinode_from_the_captured_facts() -> None:
    out = node_network(net(), address="192.0.2.2", multinode=True)
    assert out["env"] == {"VLLM_HOST_IP": "192.0.2.2", "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}
    assert (out["devices"], out["cap_add"], out["ulimits"]) == ([], [], [])
    assert out["reasons"]["NCCL_SOCKET_IFNAME"] == "eth0 holds the node's address 192.0.2.2"
    assert out["reasons"]["rdma"] == "no RDMA device (/sys/class/infiniband empty): NCCL uses TCP sockets over eth0"


@pytest.mark.parametrize("address", ["fd00::2", "[fd00::2]", "fd00:0::2"])
def test_multinode_ipv6_address(address: str) -> None:
    env = node_network(net(), address=address, multinode=True)["env"]
    assert env == {"VLLM_HOST_IP": "fd00::2", "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}


def test_multinode_over_ipoib_with_rdma() -> None:
    out = node_network(net([*CAPTURED, IB0], ROCE), address="192.168.50.2", multinode=True)
    assert out["env"] == {"VLLM_HOST_IP": "192.168.50.2", "NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "ib0"}
    assert out["devices"] == ROCE["rdma_dev_nodes"]
    assert out["devices"][0] == "/dev/infiniband/issm0"
    assert out["cap_add"] == ["IPC_LOCK"]
    assert out["ulimits"] == ["memlock:-1:-1"]
    reason = out["reasons"]["rdma"]
    assert "mlx4_0/1 RoCE, mlx5_0/1 InfiniBand, mlx5_1/1 RoCE" in reason
    assert "mlx5_2" not in reason  # down ports are not why
    assert "IPC_LOCK" in reason and "memlock" in reason


def test_multinode_rdma_down_passes_no_devices() -> None:
    out = node_network(net(rdma=IB_DOWN), address="192.0.2.2", multinode=True)
    assert (out["devices"], out["cap_add"], out["ulimits"]) == ([], [], [])
    assert out["reasons"]["rdma"] == (
        "no RDMA port is ACTIVE (mlx5_0/1 InfiniBand INIT): NCCL uses TCP sockets over eth0"
    )


def test_multinode_rdma_active_without_uverbs() -> None:
    rdma = {**ROCE, "rdma_dev_nodes": ["/dev/infiniband/rdma_cm"]}
    out = node_network(net(rdma=rdma), address="192.0.2.2", multinode=True)
    assert out["devices"] == [] and out["cap_add"] == [] and out["ulimits"] == []
    assert "load ib_uverbs" in out["reasons"]["rdma"]


def test_an_up_interface_wins_over_a_down_one_with_the_same_address() -> None:
    interfaces = [iface("eth1", "10.0.0.5/24", up=False), iface("eth2", "10.0.0.5/24"), iface("lo", "10.0.0.5/32")]
    assert node_network(net(interfaces), address="10.0.0.5", multinode=True)["env"]["NCCL_SOCKET_IFNAME"] == "eth2"


def test_text_fallback_facts_with_unknown_up_state() -> None:
    interfaces = [iface("eth0", "10.0.0.5/24", up=None)]
    assert node_network(net(interfaces), address="10.0.0.5", multinode=True)["env"]["GLOO_SOCKET_IFNAME"] == "eth0"


# ----------------------------------------------------------------------------- errors


def error(network: dict[str, Any] | None, address: str, **kwargs: Any) -> str:
    with pytest.raises(NetworkError) as caught:
        node_network(network, address=address, multinode=True, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_host_name_instead_of_ip() -> None:
    message = error(net(), "gpu-node-1", host="gpu-node-1")
    assert message.startswith("gpu-node-1: address 'gpu-node-1' is a host name, not an IP address")
    assert message.endswith("set ansible_host or vllm_serve_advertise_address to the node's IP")


def test_host_name_without_facts_is_still_refused() -> None:
    assert "is a host name" in error(None, "gpu-node-1", user_env={"NCCL_SOCKET_IFNAME": "eth0"})


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "0.0.0.0"])
def test_loopback_address(address: str) -> None:
    assert "cannot be reached from the other nodes" in error(net(), address)


def test_no_interface_holds_the_address() -> None:
    message = error(net(), "10.9.9.9", host="h2")
    assert message == (
        "h2: no interface of this node holds the node's address 10.9.9.9 (found: lo 127.0.0.1/8 ::1/128; eth0 "
        "192.0.2.2/24 fd00::2/64 fe80::fc:ff:fe00:1/64): set ansible_host or vllm_serve_advertise_address to one "
        "of these addresses"
    )


def test_no_interfaces_at_all() -> None:
    assert "no interface with an address (is `ip` (iproute2) installed?" in error(net([]), "10.0.0.5")


def test_the_holding_interface_is_down() -> None:
    message = error(net([iface("eth1", "10.0.0.5/24", up=False)]), "10.0.0.5")
    assert message.startswith("interface eth1 holds 10.0.0.5 but is down")


def test_network_facts_missing() -> None:
    message = error(None, "10.0.0.5", host="h3")
    assert message.startswith("h3: no network facts for this node (recorded facts without 'network')")
    assert "re-run discovery" in message
    assert "set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) in vllm_fleet_env" in message


def test_malformed_facts() -> None:
    assert "network facts are malformed" in error({"interfaces": "eth0"}, "10.0.0.5")


@pytest.mark.parametrize("name", ["eth 0", "eth0\n", "a/b", "x" * 16])
def test_an_interface_name_that_linux_would_refuse(name: str) -> None:
    assert "is not a Linux interface name" in error(net([iface(name, "10.0.0.5/24")]), "10.0.0.5")


def test_odd_shapes_are_read_as_empty() -> None:
    odd = {"interfaces": [{"name": "eth0", "ipv4": "10.0.0.5/24", "ipv6": 7}], "rdma": 3, "rdma_dev_nodes": 1}
    assert "found: no interface with an address" in error(odd, "10.0.0.5")
    assert check_group_reachability([{"host": "a", "network": odd}, {"host": "b", "network": odd}])


# ----------------------------------------------------------------------------- the user's environment


def test_user_interface_without_facts_is_accepted() -> None:
    out = node_network(None, address="10.0.0.5", multinode=True, user_env={"NCCL_SOCKET_IFNAME": "ens1"})
    assert out["env"] == {"VLLM_HOST_IP": "10.0.0.5", "GLOO_SOCKET_IFNAME": "ens1"}
    assert out["reasons"]["NCCL_SOCKET_IFNAME"] == "set in vllm_fleet_env (wins); not checked: no network facts"
    assert out["devices"] == []
    assert out["reasons"]["rdma"].startswith("no network facts: RDMA ports unknown")


def test_user_pattern_without_facts_leaves_gloo_alone() -> None:
    out = node_network(None, address="10.0.0.5", multinode=True, user_env={"NCCL_SOCKET_IFNAME": "^docker,lo"})
    assert out["env"] == {"VLLM_HOST_IP": "10.0.0.5"}
    assert "NCCL_SOCKET_IFNAME is a pattern" in out["reasons"]["GLOO_SOCKET_IFNAME"]


@pytest.mark.parametrize("value", ["eth", "eth0", "=eth0", "lo,eth", "^docker"])
def test_user_interface_matching_the_facts_wins(value: str) -> None:
    out = node_network(net(), address="192.0.2.2", multinode=True, user_env={"NCCL_SOCKET_IFNAME": value})
    assert "NCCL_SOCKET_IFNAME" not in out["env"]
    assert out["env"]["GLOO_SOCKET_IFNAME"] == "eth0"
    assert out["reasons"]["NCCL_SOCKET_IFNAME"].startswith("set in vllm_fleet_env (wins)")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NCCL_SOCKET_IFNAME": "ib"},
         "NCCL_SOCKET_IFNAME='ib' names no interface of this node (ib; found lo, ifb0, ifb1, eth0)"),
        ({"NCCL_SOCKET_IFNAME": "=eth"}, "NCCL_SOCKET_IFNAME='=eth' names no interface"),
        ({"GLOO_SOCKET_IFNAME": "eth"}, "GLOO_SOCKET_IFNAME='eth' names no interface"),
        ({"NCCL_SOCKET_IFNAME": ","}, "names no interface of this node (empty"),
        ({"NCCL_SOCKET_IFNAME": "eth0 "}, "is empty or holds whitespace"),
        ({"GLOO_SOCKET_IFNAME": ""}, "is empty or holds whitespace"),
        ({"VLLM_HOST_IP": "node-1"}, "VLLM_HOST_IP='node-1' is not an IP address"),
        ({"VLLM_HOST_IP": "10.1.1.1"}, "no interface of this node holds vllm_fleet_env VLLM_HOST_IP 10.1.1.1"),
    ],
)
def test_user_values_are_checked(env: dict[str, str], message: str) -> None:
    assert message in error(net(), "192.0.2.2", user_env=env)


def test_user_host_ip_picks_the_interface() -> None:
    out = node_network(net([*CAPTURED, IB0]), address="192.0.2.2", multinode=True,
                       user_env={"VLLM_HOST_IP": "192.168.50.2", "PATH": "/x"})
    assert out["env"] == {"NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "ib0"}
    assert out["reasons"]["VLLM_HOST_IP"] == "set in vllm_fleet_env (wins)"


def test_user_gloo_and_nccl_both_set() -> None:
    out = node_network(net(), address="192.0.2.2", multinode=True,
                       user_env={"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"})
    assert out["env"] == {"VLLM_HOST_IP": "192.0.2.2"}


# ----------------------------------------------------------------------------- property


_name = st.text(min_size=0, max_size=18)
_ipv4 = st.one_of(
    st.builds(lambda a, b, p: f"10.{a}.{b}.5/{p}", st.integers(0, 255), st.integers(0, 255), st.integers(0, 32)),
    st.text(max_size=20),
)
_iface = st.fixed_dictionaries({
    "name": _name, "ipv4": st.lists(_ipv4, max_size=3), "ipv6": st.just([]),
    "up": st.sampled_from([True, False, None]), "mtu": st.just(1500),
})
_user = st.dictionaries(st.sampled_from(["VLLM_HOST_IP", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "OTHER"]),
                        st.text(max_size=12), max_size=3)


@settings(max_examples=300, deadline=None)
@given(
    interfaces=st.one_of(st.none(), st.lists(_iface, max_size=4)),
    address=st.one_of(st.sampled_from(["10.0.0.5", "10.1.2.5", "fd00::2", "node-1"]), st.text(max_size=16)),
    multinode=st.booleans(),
    user=_user,
)
def test_env_values_never_hold_whitespace(
    interfaces: list[dict[str, Any]] | None, address: str, multinode: bool, user: dict[str, str]
) -> None:
    network = None if interfaces is None else {"interfaces": interfaces, "rdma": [], "rdma_dev_nodes": []}
    try:
        out = node_network(network, address=address, multinode=multinode, user_env=user)
    except NetworkError as exc:
        assert "\n" not in str(exc)
        return
    for key, value in out["env"].items():
        assert value and not any(c.isspace() for c in value), (key, value)
        assert key not in user  # the user's values win: never overwritten
    assert set(out["reasons"]) >= set(out["env"])


# ----------------------------------------------------------------------------- reachability


def node(host: str, *interfaces: dict[str, Any], address: str = "") -> dict[str, Any]:
    return {"host": host, "address": address, "network": net(list(interfaces))}


def test_one_subnet_is_reachable() -> None:
    assert check_group_reachability([
        node("h1", iface("eth0", "10.0.0.1/24")), node("h2", iface("eth0", "10.0.0.2/24")),
    ]) == []


def test_a_shared_fabric_subnet_is_enough() -> None:
    assert check_group_reachability([
        node("h1", iface("eth0", "10.0.0.1/24"), iface("ib0", "192.168.50.1/24")),
        node("h2", iface("eno1", "10.0.1.1/24"), iface("ib0", "192.168.50.2/24")),
    ]) == []


def test_different_subnets_name_the_hosts() -> None:
    errors = check_group_reachability([
        node("h1", iface("lo", "127.0.0.1/8"), iface("eth0", "10.0.0.1/24")),
        node("h2", iface("eth0", "10.0.1.1/24")),
    ])
    assert errors == [
        "multi-node group h1, h2: the nodes share no IPv4 subnet (h1: 10.0.0.0/24 on eth0; h2: 10.0.1.0/24 on "
        "eth0); NCCL and Gloo connect every node to every other: put them on one network, or, where they are "
        "routed, pin NCCL_SOCKET_IFNAME in vllm_fleet_env and check the routes"
    ]


def test_prefix_lengths_come_from_the_facts() -> None:
    wide = [node("h1", iface("eth0", "10.0.0.1/16")), node("h2", iface("eth0", "10.0.1.1/16"))]
    narrow = [node("h1", iface("eth0", "10.0.0.1/24")), node("h2", iface("eth0", "10.0.1.1/24"))]
    assert check_group_reachability(wide) == []
    assert len(check_group_reachability(narrow)) == 1


def test_container_bridges_loopback_link_local_and_down_interfaces_do_not_count() -> None:
    shared = [iface("docker0", "172.17.0.1/16"), iface("lo", "127.0.0.1/8"), iface("eth9", "169.254.3.1/16"),
              iface("eth5", "10.5.0.1/24", up=False)]
    errors = check_group_reachability([
        node("h1", iface("eth0", "10.0.0.1/24"), *shared), node("h2", iface("eth0", "10.0.1.1/24"), *shared),
    ])
    assert len(errors) == 1
    assert "172.17" not in errors[0] and "10.5.0.0" not in errors[0]


def test_a_node_without_ipv4() -> None:
    errors = check_group_reachability([node("h1", iface("eth0", "10.0.0.1/24")), node("h2", iface("eth0"))])
    assert "h2: no IPv4 subnet" in errors[0]


def test_nodes_without_facts_are_not_checked() -> None:
    nodes = [node("h1", iface("eth0", "10.0.0.1/24")), {"host": "h2", "address": "10.0.1.1", "network": None}]
    assert check_group_reachability(nodes) == []
    assert check_group_reachability([]) == []


def test_three_nodes_one_apart() -> None:
    errors = check_group_reachability([
        node("h1", iface("eth0", "10.0.0.1/24")), node("h2", iface("eth0", "10.0.0.2/24")),
        node("h3", iface("eth0", "10.0.7.3/24")),
    ])
    assert errors and errors[0].startswith("multi-node group h1, h2, h3:")
