# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Parse what a Linux host reports about its network into the ``network`` facts of ``gpu_facts``.

Pure: standard library only, typed, no I/O. The module ``vllm_fleet.fleet.gpu_facts`` runs the commands
and reads the files; these functions take their text and return plain data::

    ip -j addr show                       -> parse_ip_json()      (iproute2 4.13 and later)
    ip -o addr show + ip -o link show     -> parse_ip_text()      (fallback when -j is not supported)
    /sys/class/infiniband/<dev>/ports/<port>/{link_layer,state},
    /sys/class/infiniband/<dev>/device/net/<netdev>/dev_port      -> parse_rdma()
    the names in /dev/infiniband                                  -> build_network()

The result (``ansible_facts['network']``)::

    {"interfaces": [{"name": "eth0", "ipv4": ["10.0.0.5/24"], "ipv6": ["fe80::1/64"], "up": true, "mtu": 1500}],
     "rdma": [{"device": "mlx5_0", "port": 1, "link_layer": "InfiniBand", "state": "ACTIVE", "netdev": "ib0"}],
     "rdma_dev_nodes": ["/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0"]}

``up`` and ``mtu`` are null when only ``ip -o addr show`` could be read. A host without ``ip`` or without
``/sys/class/infiniband`` gets empty lists: discovery never fails because of the network.

Module utilities run on the managed host: keep this file importable by Python 3.8.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "DEV_INFINIBAND",
    "IP_ADDR_JSON_ARGS",
    "IP_ADDR_TEXT_ARGS",
    "IP_LINK_TEXT_ARGS",
    "NetworkFactsError",
    "build_network",
    "empty_network",
    "parse_ip_json",
    "parse_ip_text",
    "parse_rdma",
    "validate_network",
]

IP_ADDR_JSON_ARGS = ("-j", "addr", "show")
IP_ADDR_TEXT_ARGS = ("-o", "addr", "show")
IP_LINK_TEXT_ARGS = ("-o", "link", "show")
DEV_INFINIBAND = "/dev/infiniband"

# "4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\       valid_lft forever ..."
_ADDR_LINE_RE = re.compile(r"^\s*(\d+):\s+(\S+?)\s+(inet6?)\s+(\S+)(.*)$")
# "4: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1400 qdisc pfifo_fast state UP ..."
_LINK_LINE_RE = re.compile(r"^\s*(\d+):\s+([^:\s]+):\s+<([^>]*)>(.*)$")
_MTU_RE = re.compile(r"\bmtu\s+(\d+)\b")
_PEER_PREFIX_RE = re.compile(r"\bpeer\s+\S+/(\d+)\b")
# /sys/class/infiniband/<dev>/ports/<port>/state holds "4: ACTIVE"
_STATE_RE = re.compile(r"^\s*\d+:\s*(\S+)\s*$")


class NetworkFactsError(ValueError):
    """Output that is not what was asked for (the module then tries the next source, or reports nothing)."""


def empty_network() -> dict[str, Any]:
    """No ``ip``, no RDMA: what a host whose network cannot be read reports."""
    return {"interfaces": [], "rdma": [], "rdma_dev_nodes": []}


def _interface(name: str, up: bool | None, mtu: int | None) -> dict[str, Any]:
    return {"name": name, "ipv4": [], "ipv6": [], "up": up, "mtu": mtu}


def parse_ip_json(text: str) -> list[dict[str, Any]]:
    """``ip -j addr show`` → the interfaces, in the order ``ip`` lists them.

    :raises NetworkFactsError: the text is not iproute2's JSON (an ``ip`` without ``-j`` prints a usage error)
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise NetworkFactsError(f"ip -j addr show did not print JSON: {exc}") from None
    if not isinstance(data, list):
        raise NetworkFactsError(f"ip -j addr show printed a {type(data).__name__}, expected a list")
    interfaces = []
    for link in data:
        if not isinstance(link, dict) or not isinstance(link.get("ifname"), str):
            raise NetworkFactsError(f"ip -j addr show: an entry without ifname: {link!r}")
        flags = link.get("flags")
        mtu = link.get("mtu")
        entry = _interface(
            link["ifname"],
            "UP" in flags if isinstance(flags, list) else None,
            mtu if isinstance(mtu, int) and not isinstance(mtu, bool) else None,
        )
        for info in link.get("addr_info") or []:
            if not isinstance(info, dict):
                continue
            family, local, prefix = info.get("family"), info.get("local"), info.get("prefixlen")
            if family not in ("inet", "inet6") or not isinstance(local, str) or not isinstance(prefix, int):
                continue
            entry["ipv4" if family == "inet" else "ipv6"].append(f"{local}/{prefix}")
        interfaces.append(entry)
    return interfaces


def parse_ip_text(addr_text: str, link_text: str | None = None) -> list[dict[str, Any]]:
    """``ip -o addr show`` (and ``ip -o link show`` for ``up``/``mtu`` and interfaces without an address)
    → the interfaces, by interface index.

    :raises NetworkFactsError: a line that is neither an address nor a link (an ``ip`` that printed
        something else, say a usage error)
    """
    by_index: dict[int, dict[str, Any]] = {}
    for line in (link_text or "").splitlines():
        if not line.strip():
            continue
        match = _LINK_LINE_RE.match(line)
        if not match:
            raise NetworkFactsError(f"ip -o link show: unexpected line {line.strip()[:120]!r}")
        index, name, flags, rest = match.groups()
        mtu = _MTU_RE.search(rest)
        by_index[int(index)] = _interface(
            name.split("@", 1)[0], "UP" in flags.split(","), int(mtu.group(1)) if mtu else None
        )
    for line in addr_text.splitlines():
        if not line.strip():
            continue
        match = _ADDR_LINE_RE.match(line)
        if not match:
            raise NetworkFactsError(f"ip -o addr show: unexpected line {line.strip()[:120]!r}")
        index, name, family, address, rest = match.groups()
        entry = by_index.setdefault(int(index), _interface(name.split("@", 1)[0], None, None))
        if "/" not in address:  # point-to-point: "inet 10.0.0.1 peer 10.0.0.2/32"
            peer = _PEER_PREFIX_RE.search(rest)
            address += "/" + (peer.group(1) if peer else ("32" if family == "inet" else "128"))
        entry["ipv4" if family == "inet" else "ipv6"].append(address)
    return [by_index[index] for index in sorted(by_index)]


def _text(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return value or None


def parse_rdma(sysfs: dict[str, str | None]) -> list[dict[str, Any]]:
    """The RDMA ports under ``/sys/class/infiniband``.

    :param sysfs: file path relative to ``/sys/class/infiniband`` → its content (None: present but not
        readable): ``<dev>/ports/<port>/link_layer``, ``<dev>/ports/<port>/state`` and, per network device
        of the RDMA device, ``<dev>/device/net/<netdev>/dev_port`` (the netdev's 0-based port)
    :returns: ``[{"device", "port", "link_layer", "state", "netdev"}]`` sorted by device and port;
        ``state`` without its number (``"4: ACTIVE"`` → ``"ACTIVE"``); ``netdev`` is the device's only
        network device, or the one whose ``dev_port`` is ``port - 1``, else null
    """
    ports: dict[tuple[str, int], dict[str, Any]] = {}
    netdevs: dict[str, dict[str, int | None]] = {}
    for path, content in sysfs.items():
        parts = path.strip("/").split("/")
        if len(parts) == 4 and parts[1] == "ports" and parts[2].isdigit() and parts[3] in ("link_layer", "state"):
            key = (parts[0], int(parts[2]))
            entry = ports.setdefault(
                key, {"device": parts[0], "port": key[1], "link_layer": None, "state": None, "netdev": None}
            )
            value = _text(content)
            if parts[3] == "state" and value is not None:
                match = _STATE_RE.match(value)
                value = match.group(1) if match else value
            entry[parts[3]] = value
        elif len(parts) == 5 and parts[1:3] == ["device", "net"] and parts[4] == "dev_port":
            dev_port = _text(content)
            netdevs.setdefault(parts[0], {})[parts[3]] = (
                int(dev_port) if dev_port is not None and dev_port.isdigit() else None
            )
    for (device, port), entry in ports.items():
        names = netdevs.get(device) or {}
        if len(names) == 1:
            entry["netdev"] = next(iter(names))
        else:
            matching = sorted(name for name, dev_port in names.items() if dev_port == port - 1)
            entry["netdev"] = matching[0] if len(matching) == 1 else None
    return [ports[key] for key in sorted(ports)]


def build_network(
    interfaces: list[dict[str, Any]],
    rdma: list[dict[str, Any]],
    dev_infiniband: list[str] | None = None,
) -> dict[str, Any]:
    """The ``network`` facts.

    :param dev_infiniband: the names of the entries in ``/dev/infiniband`` (``uverbs0``, ``rdma_cm``, ...)
    """
    return {
        "interfaces": list(interfaces),
        "rdma": list(rdma),
        "rdma_dev_nodes": sorted(f"{DEV_INFINIBAND}/{name}" for name in set(dev_infiniband or []) if name),
    }


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise NetworkFactsError(message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_network(network: Any, where: str = "network facts") -> dict[str, Any]:
    """Check recorded ``network`` facts and return them.

    :raises NetworkFactsError: naming the first entry that is not in the shape of :func:`build_network`
    """
    _require(isinstance(network, dict), f"{where}: expected an object, got {type(network).__name__}")
    for key in ("interfaces", "rdma", "rdma_dev_nodes"):
        _require(isinstance(network.get(key), list), f"{where}: {key!r} must be a list")
    for position, iface in enumerate(network["interfaces"]):
        at = f"{where} interfaces[{position}]"
        _require(isinstance(iface, dict), f"{at} is not an object")
        _require(isinstance(iface.get("name"), str) and bool(iface["name"]), f"{at}: 'name' must be a string")
        for family in ("ipv4", "ipv6"):
            values = iface.get(family)
            _require(isinstance(values, list) and all(isinstance(v, str) and "/" in v for v in values),
                     f"{at}: {family!r} must be a list of ADDRESS/PREFIX strings")
        _require(iface.get("up") is None or isinstance(iface["up"], bool), f"{at}: 'up' must be true, false or null")
        _require(iface.get("mtu") is None or _is_int(iface["mtu"]), f"{at}: 'mtu' must be an int or null")
    for position, port in enumerate(network["rdma"]):
        at = f"{where} rdma[{position}]"
        _require(isinstance(port, dict), f"{at} is not an object")
        _require(isinstance(port.get("device"), str), f"{at}: 'device' must be a string")
        _require(_is_int(port.get("port")), f"{at}: 'port' must be an int")
        for key in ("link_layer", "state", "netdev"):
            _require(port.get(key) is None or isinstance(port[key], str), f"{at}: {key!r} must be a string or null")
    _require(all(isinstance(path, str) for path in network["rdma_dev_nodes"]),
             f"{where}: 'rdma_dev_nodes' must be a list of paths")
    return dict(network)
