# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""The machines behind the inventory names, and the ports they listen on.

- facts (CONTRACT 1): :func:`check_facts_shape` (the recorded or discovered facts have the keys and types),
  :func:`check_gpu_present` and :func:`check_sku_match` (the GPU agrees with the host's SKU group);
- ports: :func:`port_variables` (which variables hold ports), :func:`port_map` (the ports a host sets),
  :func:`check_ports` (valid and distinct per host), :func:`check_port` (one port);
- machines: :func:`gpu_uuids` and :func:`check_machines` (no machine listed twice, no port or container name two
  names on one machine, or a load balancer, would share).

Every check returns a list of one-line messages (empty = all good), each naming the host and saying what to change;
nothing here raises on bad input except :func:`port_variables`, which turns a variable into a list of names.
Pure (stdlib only, typed, no I/O).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.values import (
    is_int,
    is_name_list,
    string_hint,
    type_name,
)

#: Variables that hold a port a vLLM host listens on (the playbook reads the ones that are defined).
DEFAULT_PORT_VARIABLES: tuple[str, ...] = (
    "vllm_serve_port", "vllm_serve_ports", "vllm_serve_master_port", "vllm_serve_dp_rpc_port", "vllm_lb_port",
    "monitoring_node_exporter_port", "monitoring_dcgm_exporter_port", "monitoring_prometheus_port",
)
PORT_VARIABLES_ERROR = "vllm_fleet_port_variables must be a list of variable names"


def check_facts_shape(host: str, facts: Any) -> list[str]:
    """A recorded or discovered facts dict has the CONTRACT 1 keys with the right types."""
    if not isinstance(facts, Mapping):
        return [f"{host}: GPU facts must be a JSON object (CONTRACT 1), got {type_name(facts)}"]
    errors: list[str] = []
    if not isinstance(facts.get("gpus"), list):
        errors.append(f"{host}: GPU facts have no 'gpus' list (CONTRACT 1)")
    if not is_int(facts.get("gpu_count")):
        errors.append(f"{host}: GPU facts 'gpu_count' must be an integer, got {facts.get('gpu_count')!r}")
    elif isinstance(facts.get("gpus"), list) and facts["gpu_count"] != len(facts["gpus"]):
        errors.append(f"{host}: GPU facts say gpu_count {facts['gpu_count']} but list {len(facts['gpus'])} GPUs")
    if not isinstance(facts.get("host"), Mapping):
        errors.append(f"{host}: GPU facts have no 'host' block (CONTRACT 1)")
    for i, gpu in enumerate(facts.get("gpus") or []):
        if not isinstance(gpu, Mapping) or not is_int(gpu.get("memory_total_mib")) or not gpu.get("name"):
            errors.append(f"{host}: GPU facts gpus[{i}] lacks name/memory_total_mib (CONTRACT 1)")
    return errors


def check_gpu_present(host: str, facts: Mapping[str, Any], sku_group: str | None) -> list[str]:
    """A host of a ``gpu_*`` group has at least one NVIDIA GPU in its facts (recorded facts of a GPU-less machine
    would otherwise be planned as the CPU lane, where live discovery refuses the host)."""
    if not sku_group or not sku_group.startswith("gpu_") or not isinstance(facts, Mapping):
        return []
    count = facts.get("gpu_count")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        return []
    return [f"{host}: is in {sku_group} but its facts show no NVIDIA GPU (gpu_count {count!r}): fix the driver "
            "(nvidia-smi must list the GPUs) or the recorded facts file, or move the host to a cpu_<lane> group"]


def check_sku_match(host: str, facts: Mapping[str, Any], sku_group: str | None, match: str | None) -> list[str]:
    """The discovered GPU agrees with the SKU group the host is filed under: a ``gpu_*`` host has a GPU
    (:func:`check_gpu_present`), and its name contains ``match`` (``vllm_fleet_sku_match``) when that is set."""
    absent = check_gpu_present(host, facts, sku_group)
    if absent:
        return absent
    if not match or not sku_group:
        return []
    name = str(facts.get("gpu_name") or "")
    if sku_group.startswith("cpu_"):
        if facts.get("gpu_count"):
            return [f"{host}: is in CPU group {sku_group} but has {facts['gpu_count']} GPU(s) ({name}): "
                    "move it to its gpu_<sku> group"]
        return []
    if match.lower() not in name.lower():
        found = name or "no NVIDIA GPU"
        return [f"{host}: is in {sku_group} (expects a GPU matching {match!r}) but discovery found {found}: "
                "move it to the right SKU group"]
    return []


def check_port(host: str, name: str, value: Any) -> list[str]:
    """One variable's port is an integer TCP port (1..65535)."""
    if not is_int(value):
        return [f"{host}: {name} must be an integer port, got {type_name(value)} {value!r}{string_hint(value)}"]
    if not 1 <= value <= 65535:
        return [f"{host}: {name} = {value} is not a TCP port (1..65535)"]
    return []


def port_variables(value: Any = None) -> list[str]:
    """The variable names that hold ports: ``value`` (vllm_fleet_port_variables), or the default list when unset.

    :raises ValueError: ``value`` is not a list of names.
    """
    if value is None:
        return list(DEFAULT_PORT_VARIABLES)
    if not is_name_list(value):
        raise ValueError(PORT_VARIABLES_ERROR)
    return list(value)


def port_map(values: Mapping[str, Any]) -> dict[str, Any]:
    """The ports a host sets: ``values`` (variable → port or list of ports) without the unset (None, "") ones."""
    return {k: v for k, v in values.items() if v is not None and v != ""}


def check_ports(host: str, ports: Mapping[str, Any]) -> list[str]:
    """Every port a host will listen on is a valid, distinct TCP port.

    ``ports`` maps a variable name to a port or a list of ports (one per replica, e.g. vllm_serve_ports).
    """
    errors: list[str] = []
    seen: dict[int, str] = {}
    flat: dict[str, Any] = {}
    for name, value in ports.items():
        if isinstance(value, (list, tuple)):
            flat.update({f"{name}[{i}]": v for i, v in enumerate(value)})
        else:
            flat[name] = value
    for name in sorted(flat):
        value = flat[name]
        bad = check_port(host, name, value)
        if bad:
            errors += bad
            continue
        if value in seen:
            errors.append(f"{host}: port {value} is used by both {seen[value]} and {name}: give each "
                          "service its own port")
        else:
            seen[value] = name
    return errors


def gpu_uuids(facts: Any) -> list[str]:
    """The GPU UUIDs in a host's facts (CONTRACT 1 ``gpus[].uuid``, ``GPU-…``), in the facts' order, once each.

    MIG instances (``mig_devices[].uuid``, ``MIG-…``) are slices of these GPUs; the GPUs identify the machine.
    """
    gpus = facts.get("gpus") if isinstance(facts, Mapping) else None
    uuids: list[str] = []
    for gpu in gpus if isinstance(gpus, list) else []:
        uuid = gpu.get("uuid") if isinstance(gpu, Mapping) else None
        if isinstance(uuid, str) and uuid.strip() and uuid.strip() not in uuids:
            uuids.append(uuid.strip())
    return uuids


def _machine_key(address: str) -> str:
    """One key per machine for an address: every loopback spelling (localhost, 127.0.0.1, ::1) is one machine."""
    text = address.strip().lower().rstrip(".")
    if text in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return "loopback"
    try:
        ip = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return text
    return "loopback" if ip.is_loopback else str(ip)


def _ports(value: Any) -> set[int]:
    items = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
    ports = {int(p) for p in items if is_int(p) or (isinstance(p, str) and p.strip().isdigit())}
    return {p for p in ports if p > 0}


def _names_in(value: Any) -> set[str]:
    items = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
    return {str(v) for v in items if isinstance(v, str) and v}


def _spot(name: str, item: Any) -> tuple[str, str]:
    """(address as given, machine key) of one host or load balancer of :func:`check_machines`."""
    address = item.get("address") if isinstance(item, Mapping) else None
    text = str(address).strip() if isinstance(address, str) and address.strip() else name
    return text, _machine_key(text)


def _listed(word: str, values: Sequence[Any], show: Callable[[Any], str] = str) -> str:
    return f"{word}{'s' if len(values) > 1 else ''} {', '.join(show(v) for v in values)}"


def check_machines(hosts: Mapping[str, Mapping[str, Any]], lbs: Mapping[str, Mapping[str, Any]] | None = None
                   ) -> list[str]:
    """The machines behind the inventory names: none listed twice, no port or container name used twice.

    :param hosts: vLLM hosts, ``{name: {"address": str, "gpu_uuids": [str], "ports": [int], "containers": [str],
        "head_ports": [int]}}`` (every replica port and container name the host will run, the ports a multi-node
        group's head binds beside them: master, Ray or data-parallel RPC port; :func:`gpu_uuids` of its facts)
    :param lbs: load balancers, ``{name: {"address": str, "ports": [int]}}`` (listen and stats ports)

    Two names sharing a GPU are one machine; two names on one address (loopback spellings are one address) may
    share it only with their own ports and container names (a lab of several names on one machine); a load
    balancer's ports must not be a replica port of a vLLM host on its address. Messages are sorted by name.
    """
    names = sorted(hosts, key=str)
    spot = {n: _spot(str(n), hosts[n]) for n in names}
    items = {n: hosts[n] if isinstance(hosts[n], Mapping) else {} for n in names}
    uuids = {n: set(_names_in(items[n].get("gpu_uuids"))) for n in names}
    heads = {n: _ports(items[n].get("head_ports") or []) for n in names}
    ports = {n: _ports(items[n].get("ports") or []) | heads[n] for n in names}
    containers = {n: _names_in(items[n].get("containers") or []) for n in names}
    errors: list[str] = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = sorted(uuids[a] & uuids[b])
            if shared:
                errors.append(f"{a} and {b} are the same machine (GPU {shared[0]}): list it once")
                continue
            if spot[a][1] != spot[b][1]:
                continue
            both = sorted(ports[a] & ports[b])
            named = sorted(containers[a] & containers[b])
            if not both and not named:
                continue
            what = [_listed("port", both)] if both else []
            what += [_listed("container", named, repr)] if named else []
            where = spot[a][0] if spot[a][0] == spot[b][0] else f"{spot[a][0]} / {spot[b][0]}"
            fix = "give each its own vllm_serve_port and vllm_serve_container_name"
            if set(both) & (heads[a] | heads[b]):
                fix += (" (a multi-node group's head binds its vllm_serve_master_port, vllm_serve_ray_port or "
                        "vllm_serve_dp_rpc_port too)")
            errors.append(f"{a} and {b} are both {where} and would both use {' and '.join(what)}: list the machine "
                          f"once, or {fix}")
    for lb in sorted(lbs or {}, key=str):
        item = (lbs or {})[lb]
        lb_address, lb_key = _spot(str(lb), item)
        lb_ports = _ports(item.get("ports") or [] if isinstance(item, Mapping) else [])
        for host in names:
            if spot[host][1] != lb_key:
                continue
            for port in sorted(ports[host] & lb_ports):
                errors.append(f"replica port {port} of {host} overlaps the load balancer's port on {lb_address} "
                              f"(lb host {lb}): move vllm_serve_port or vllm_lb_port")
    return errors
