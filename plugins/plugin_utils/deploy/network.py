# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""What a node's container needs from the network: pure, standard library only, no I/O.

- :func:`node_network` — from a node's discovered ``network`` facts (``gpu_facts``: ``ansible_facts['network']``)
  and its address: the environment of a multi-node launch (``VLLM_HOST_IP``, ``NCCL_SOCKET_IFNAME``,
  ``GLOO_SOCKET_IFNAME``) and, where an RDMA port is ACTIVE, the container's ``/dev/infiniband`` devices,
  capability ``IPC_LOCK`` and ``memlock`` ulimit; each decision with its one-line reason.
- :func:`check_group_reachability` — the nodes of one multi-node group must share an IPv4 subnet.

Bad input raises :class:`NetworkError` (a ``ValueError``) whose one-line message says what to change.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

__all__ = [
    "HOST_IP_ENV",
    "IFNAME_ENV",
    "MEMLOCK_ULIMIT",
    "RDMA_CAPABILITY",
    "NetworkError",
    "check_group_reachability",
    "node_network",
]

HOST_IP_ENV = "VLLM_HOST_IP"
#: The socket interface of NCCL's bootstrap/TCP transport and of torch.distributed's Gloo groups.
IFNAME_ENV = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
RDMA_CAPABILITY = "IPC_LOCK"
MEMLOCK_ULIMIT = "memlock:-1:-1"

#: Interfaces of container runtimes and overlays: every Docker host has docker0 172.17.0.1/16, which says
#: nothing about whether two nodes reach each other.
_VIRTUAL_PREFIXES = ("docker", "br-", "virbr", "veth", "cni", "flannel", "cali", "lxc", "podman", "cilium",
                     "weave", "kube-")
#: Linux refuses interface names with whitespace, '/' or ':' and longer than 15 bytes (dev_valid_name).
_IFNAME_RE = re.compile(r"[^\s/:]{1,15}")

_ENV_SINGLE = "single node: no VLLM_HOST_IP or NCCL/Gloo socket interface needed"
_RDMA_SINGLE = "single node: NCCL uses NVLink/PCIe inside the host; no RDMA devices passed"


class NetworkError(ValueError):
    """The node's network cannot carry a multi-node launch as configured; the message says what to change."""


def _prefix(host: str | None) -> str:
    return f"{host}: " if host else ""


def _interfaces(network: dict[str, Any], where: str) -> list[dict[str, Any]]:
    interfaces = network.get("interfaces") if isinstance(network, dict) else None
    if not isinstance(interfaces, list) or not all(
        isinstance(i, dict) and isinstance(i.get("name"), str) for i in interfaces
    ):
        raise NetworkError(f"{where}network facts are malformed ('interfaces' must be a list of objects with a "
                           "name): re-run discovery (vllm_fleet.fleet.gpu_facts)")
    return interfaces


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _addresses(iface: dict[str, Any]) -> list[ipaddress.IPv4Interface | ipaddress.IPv6Interface]:
    out: list[ipaddress.IPv4Interface | ipaddress.IPv6Interface] = []
    for family in ("ipv4", "ipv6"):
        for value in _list(iface.get(family)):
            try:
                out.append(ipaddress.ip_interface(str(value)))
            except ValueError:
                continue
    return out


def _show(name: str) -> str:
    """An interface name for a one-line message (quoted when it is not a plain name)."""
    return name if _IFNAME_RE.fullmatch(name) else repr(name)


def _describe(interfaces: list[dict[str, Any]]) -> str:
    parts = []
    for iface in interfaces:
        addresses = _addresses(iface)
        if addresses:
            parts.append(f"{_show(iface['name'])} {' '.join(str(a) for a in addresses)}")
    return "; ".join(parts) if parts else "no interface with an address (is `ip` (iproute2) installed? re-run discovery)"


def _check_ifname(name: str, where: str) -> str:
    if not _IFNAME_RE.fullmatch(name):
        raise NetworkError(f"{where}interface name {name!r} in the network facts is not a Linux interface name: "
                           "re-run discovery (vllm_fleet.fleet.gpu_facts)")
    return name


def _holder(interfaces: list[dict[str, Any]], ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
            where: str, what: str) -> dict[str, Any]:
    """The interface that holds ``ip`` (an interface that is up first, loopback last)."""
    holders = [i for i in interfaces if any(a.ip == ip for a in _addresses(i))]
    if not holders and ip.is_loopback:  # 127.0.0.2 is held by lo's 127.0.0.1/8
        holders = [i for i in interfaces if any(ip in a.network for a in _addresses(i))]
    if not holders:
        raise NetworkError(
            f"{where}no interface of this node holds {what} {ip} (found: {_describe(interfaces)}): set "
            "ansible_host or vllm_serve_advertise_address to one of these addresses"
        )
    holders.sort(key=lambda i: (i.get("up") is False, i["name"] == "lo"))
    chosen = holders[0]
    if chosen.get("up") is False:
        raise NetworkError(
            f"{where}interface {_show(chosen['name'])} holds {ip} but is down: bring it up, or set ansible_host or "
            "vllm_serve_advertise_address to an address on an interface that is up"
        )
    return chosen


def _check_user_ifname(key: str, value: str, names: list[str], where: str) -> str:
    """A user-set NCCL_SOCKET_IFNAME (NCCL syntax: prefixes, ``=`` exact names, ``^`` exclusions) or
    GLOO_SOCKET_IFNAME (exact names, comma-separated) must match an interface of the node."""
    found = ", ".join(_show(n) for n in names) or "none"
    if key == "NCCL_SOCKET_IFNAME" and value.startswith("^"):
        return f"set in vllm_fleet_env (wins): an exclusion list, every other interface may be used (found {found})"
    exact = key == "GLOO_SOCKET_IFNAME" or value.startswith("=")
    wanted = [v for v in value.lstrip("=").split(",") if v]
    missing = [w for w in wanted if not any(n == w if exact else n.startswith(w) for n in names)]
    if not wanted or missing:
        raise NetworkError(
            f"{where}vllm_fleet_env {key}={value!r} names no interface of this node "
            f"({', '.join(_show(m) for m in missing) or 'empty'}; found {found}): set it to one of them, or remove it to use "
            "the interface that holds the node's address"
        )
    return f"set in vllm_fleet_env (wins); matches interface(s) of this node ({found})"


def _rdma(network: dict[str, Any] | None, socket_if: str | None) -> tuple[list[str], list[str], list[str], str]:
    """(devices, cap_add, ulimits, reason) for a multi-node container."""
    over = f" over {socket_if}" if socket_if else ""
    if network is None:
        return [], [], [], f"no network facts: RDMA ports unknown, none passed; NCCL uses TCP sockets{over}"
    ports = [p for p in _list(network.get("rdma")) if isinstance(p, dict)]
    if not ports:
        return [], [], [], f"no RDMA device (/sys/class/infiniband empty): NCCL uses TCP sockets{over}"

    def name(port: dict[str, Any]) -> str:
        layer = port.get("link_layer")
        kind = "RoCE" if layer == "Ethernet" else (layer or "link layer unknown")
        return f"{port.get('device')}/{port.get('port')} {kind}"

    active = [p for p in ports if p.get("state") == "ACTIVE"]
    if not active:
        states = ", ".join(f"{name(p)} {p.get('state') or 'state unknown'}" for p in ports)
        return [], [], [], f"no RDMA port is ACTIVE ({states}): NCCL uses TCP sockets{over}"
    nodes = sorted(str(n) for n in _list(network.get("rdma_dev_nodes")))
    listed = ", ".join(name(p) for p in active)
    if not any(n.rsplit("/", 1)[-1].startswith("uverbs") for n in nodes):
        return [], [], [], (f"RDMA ports ACTIVE ({listed}) but no /dev/infiniband/uverbs* on the host: load "
                            f"ib_uverbs (rdma-core) for NCCL's IB transport; until then NCCL uses TCP sockets{over}")
    return nodes, [RDMA_CAPABILITY], [MEMLOCK_ULIMIT], (
        f"RDMA ports ACTIVE ({listed}): NCCL's IB transport needs the /dev/infiniband nodes in the container, "
        f"{RDMA_CAPABILITY} and {MEMLOCK_ULIMIT} to pin its registered buffers (the default 64 KiB memlock "
        "limit makes it fail or fall back to sockets)"
    )


def node_network(
    network: dict[str, Any] | None,
    *,
    address: str,
    multinode: bool,
    user_env: dict[str, Any] | None = None,
    host: str | None = None,
    group_addresses: list[str] | None = None,
) -> dict[str, Any]:
    """What one node's container needs from the network.

    :param network: the node's ``network`` facts (``ansible_facts['network']``); None when unknown (facts
        recorded before network discovery)
    :param address: the address the other nodes reach this node at (``vllm_serve_advertise_address``,
        ``ansible_host`` or the inventory name)
    :param multinode: the node is one of several running one replica
    :param user_env: the user's environment (``vllm_fleet_env``); its VLLM_HOST_IP, NCCL_SOCKET_IFNAME and
        GLOO_SOCKET_IFNAME win (they are left out of ``env``) and are checked against the facts
    :param host: the inventory name, for the messages
    :param group_addresses: the addresses of every node of the group; when all are loopback addresses the
        group is a lab on one machine (its "nodes" share the host) and loopback is accepted
    :returns: ``{"env", "devices", "cap_add", "ulimits", "reasons"}``; ``devices`` are host paths
        (the same path in the container), ``ulimits`` NAME:SOFT:HARD, ``reasons`` one line per decision
        (keys: the environment variable names, ``env`` and ``rdma``)
    :raises NetworkError: the one-line message says what to change
    """
    where = _prefix(host)
    user = {str(k): str(v) for k, v in (user_env or {}).items() if k in (HOST_IP_ENV, *IFNAME_ENV)}
    for key, value in user.items():
        if not value or any(c.isspace() for c in value):
            raise NetworkError(f"{where}vllm_fleet_env {key}={value!r} is empty or holds whitespace: remove it "
                               "or set it to the value without spaces")
    interfaces = _interfaces(network, where) if network is not None else None
    names = [i["name"] for i in interfaces] if interfaces is not None else []
    reasons: dict[str, str] = {}
    for key in IFNAME_ENV:
        if key in user:
            reasons[key] = (_check_user_ifname(key, user[key], names, where) if interfaces is not None
                            else "set in vllm_fleet_env (wins); not checked: no network facts")
    if HOST_IP_ENV in user:
        try:
            ipaddress.ip_address(user[HOST_IP_ENV])
        except ValueError:
            raise NetworkError(f"{where}vllm_fleet_env {HOST_IP_ENV}={user[HOST_IP_ENV]!r} is not an IP address: "
                               "set it to the node's IP or remove it") from None
    if not multinode:
        if HOST_IP_ENV in user:
            reasons[HOST_IP_ENV] = "set in vllm_fleet_env (wins)"
        reasons.update({"env": _ENV_SINGLE, "rdma": _RDMA_SINGLE})
        return {"env": {}, "devices": [], "cap_add": [], "ulimits": [], "reasons": reasons}

    host_ip_text = user.get(HOST_IP_ENV, address)
    try:
        host_ip = ipaddress.ip_address(str(host_ip_text).strip("[]"))
    except ValueError:
        raise NetworkError(
            f"{where}address {host_ip_text!r} is a host name, not an IP address: a multi-node launch needs the "
            "node's IP for VLLM_HOST_IP and to find the NCCL/Gloo interface; set ansible_host or "
            "vllm_serve_advertise_address to the node's IP"
        ) from None
    if host_ip.is_unspecified or (host_ip.is_loopback and not _all_loopback(group_addresses)):
        raise NetworkError(
            f"{where}address {host_ip} cannot be reached from the other nodes: set ansible_host or "
            "vllm_serve_advertise_address to the node's IP on the network the nodes share"
        )
    env: dict[str, str] = {}
    if HOST_IP_ENV in user:
        reasons[HOST_IP_ENV] = "set in vllm_fleet_env (wins)"
    else:
        env[HOST_IP_ENV] = str(host_ip)
        reasons[HOST_IP_ENV] = f"the node's address {host_ip}: vLLM advertises it to the other nodes"
    socket_if: str | None = None
    if interfaces is None:
        if "NCCL_SOCKET_IFNAME" not in user:
            raise NetworkError(
                f"{where}no network facts for this node (recorded facts without 'network'): re-run discovery "
                "(vllm_fleet.fleet.gpu_facts without facts_file) or set NCCL_SOCKET_IFNAME (and "
                "GLOO_SOCKET_IFNAME) in vllm_fleet_env"
            )
        nccl = user["NCCL_SOCKET_IFNAME"].lstrip("=")
        if "GLOO_SOCKET_IFNAME" not in user and _IFNAME_RE.fullmatch(nccl) and not nccl.startswith("^"):
            env["GLOO_SOCKET_IFNAME"] = nccl
            reasons["GLOO_SOCKET_IFNAME"] = f"the interface vllm_fleet_env NCCL_SOCKET_IFNAME names ({nccl})"
        elif "GLOO_SOCKET_IFNAME" not in user:
            reasons["GLOO_SOCKET_IFNAME"] = ("not set: NCCL_SOCKET_IFNAME is a pattern, not one interface; set "
                                             "GLOO_SOCKET_IFNAME in vllm_fleet_env if Gloo picks the wrong one")
        socket_if = user["NCCL_SOCKET_IFNAME"]
    else:
        holder = _holder(interfaces, host_ip, where, "the node's address" if HOST_IP_ENV not in user
                         else f"vllm_fleet_env {HOST_IP_ENV}")
        socket_if = _check_ifname(str(holder["name"]), where)
        for key in IFNAME_ENV:
            if key not in user:
                env[key] = socket_if
                reasons[key] = f"{socket_if} holds the node's address {host_ip}"
        if "NCCL_SOCKET_IFNAME" in user:
            socket_if = user["NCCL_SOCKET_IFNAME"]
    devices, cap_add, ulimits, reasons["rdma"] = _rdma(network, socket_if)
    return {"env": env, "devices": devices, "cap_add": cap_add, "ulimits": ulimits, "reasons": reasons}


def _all_loopback(addresses: list[str] | None) -> bool:
    """Every address is a loopback IP: the group's nodes are processes of one machine (a lab)."""
    if not addresses:
        return False
    try:
        return all(ipaddress.ip_address(str(a).strip("[]")).is_loopback for a in addresses)
    except ValueError:
        return False


def _subnets(network: dict[str, Any]) -> dict[ipaddress.IPv4Network, str]:
    """IPv4 subnet → the interface holding it, without loopback, link-local and container bridges."""
    out: dict[ipaddress.IPv4Network, str] = {}
    for iface in _list(network.get("interfaces")):
        if not isinstance(iface, dict) or str(iface.get("name", "")).startswith(_VIRTUAL_PREFIXES):
            continue
        if iface.get("up") is False:
            continue
        for value in _list(iface.get("ipv4")):
            try:
                net = ipaddress.IPv4Interface(str(value))
            except ValueError:
                continue
            if not (net.ip.is_loopback or net.ip.is_link_local):
                out.setdefault(net.network, str(iface.get("name")))
    return out


def check_group_reachability(nodes: list[dict[str, Any]]) -> list[str]:
    """Errors when the nodes of one multi-node group share no IPv4 subnet (prefix lengths from the facts).

    :param nodes: ``[{"host", "address", "network"}]`` in rank order; nodes whose ``network`` is None are
        not checked (:func:`node_network` reports them)
    :returns: one line per problem, naming the hosts and their subnets; empty when the group is fine
    """
    known = [n for n in nodes if isinstance(n.get("network"), dict)]
    if len(known) < 2 or _all_loopback([str(n.get("address")) for n in nodes]):
        return []  # (a group of loopback addresses is one machine: they reach each other)
    subnets = {str(n.get("host")): _subnets(n["network"]) for n in known}
    common = set.intersection(*(set(s) for s in subnets.values()))
    if common:
        return []
    hosts = ", ".join(subnets)
    seen = "; ".join(
        f"{host}: " + (", ".join(f"{net} on {name}" for net, name in sorted(found.items())) or "no IPv4 subnet")
        for host, found in subnets.items()
    )
    return [
        f"multi-node group {hosts}: the nodes share no IPv4 subnet ({seen}); NCCL and Gloo connect every node "
        "to every other: put them on one network, or, where they are routed, pin NCCL_SOCKET_IFNAME in "
        "vllm_fleet_env and check the routes"
    ]
