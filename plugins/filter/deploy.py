# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Deploy filters: thin wrappers over plugins/plugin_utils/deploy/ (docs: one <filter>.yml each)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.balancer import (
    BalancerError,
    routing,
    tls_names,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.launch import (
    LaunchError,
    container_env,
    lb_servers,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.rollout import (
    RolloutError,
    health_gate,
    metric_sum,
    retries_for,
    rollout_units,
    serial_batches,
)


def _plain(value: Any) -> Any:
    """Ansible 2.19 hands filters tagged/lazy containers; the pure core wants plain data."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def _call(filter_name: str, func: Any, /, *args: Any, **kwargs: Any) -> Any:
    try:
        return func(*[_plain(a) for a in args], **{k: _plain(v) for k, v in kwargs.items()})
    except (RolloutError, LaunchError, BalancerError) as exc:
        raise AnsibleFilterError(f"{filter_name}: {exc}") from exc


def vllm_health_gate(plan: Any, **kwargs: Any) -> dict[str, int]:
    result: dict[str, int] = _call("vllm_health_gate", health_gate, plan, **kwargs)
    return result


#: Inventory groups of a multi-node group's hosts, when a play passes ``groups`` instead of the launch records.
MULTINODE_GROUP_PREFIX = "vllm_fleet_multinode_"


def vllm_serial(hosts: Any, canary: Any = 1, batch: Any = "50%", multinode_groups: Any = None) -> list[int]:
    """``hosts``: the number of hosts, or their names in play order with ``multinode_groups``: each host's
    vllm_fleet_multinode_group (same order), preflight's launch records (host → record with its
    ``multinode_group``; ``deploy.yml`` passes them from the controller), or the inventory's ``groups`` (its
    ``vllm_fleet_multinode_*`` groups); then no batch splits a multi-node group."""
    if isinstance(hosts, int) and not isinstance(hosts, bool):
        result: list[int] = _call("vllm_serial", serial_batches, hosts, canary, batch)
        return result
    names = [str(h) for h in _plain(hosts)]
    if isinstance(multinode_groups, Mapping):
        member: dict[str, str] = {}
        for key, value in multinode_groups.items():
            if isinstance(value, Mapping):  # a launch record
                if value.get("multinode_group"):
                    member[str(key)] = str(value["multinode_group"])
            elif str(key).startswith(MULTINODE_GROUP_PREFIX):
                member.update({str(h): str(key)[len(MULTINODE_GROUP_PREFIX):] for h in value or []})
        multinode_groups = [member.get(name) for name in names]
    groups = list(_plain(multinode_groups)) if multinode_groups is not None else [None] * len(names)
    if len(groups) != len(names):
        raise AnsibleFilterError(f"vllm_serial: {len(names)} hosts but {len(groups)} multinode_groups")
    units: list[int] = _call("vllm_serial", rollout_units, groups, names)
    result = _call("vllm_serial", serial_batches, len(names), canary, batch, units)
    return result


def vllm_metric_sum(text: Any, name: str, default: float | None = None) -> float | None:
    result: float | None = _call("vllm_metric_sum", metric_sum, text, name)
    return default if result is None else result


def vllm_retries(timeout_s: Any, interval_s: Any) -> int:
    result: int = _call("vllm_retries", retries_for, timeout_s, interval_s)
    return result


def vllm_container_env(replica: Any, secrets: Any = None) -> dict[str, str]:
    result: dict[str, str] = _call("vllm_container_env", container_env, replica, secrets)
    return result


def vllm_lb_servers(launches: Any) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = _call("vllm_lb_servers", lb_servers, list(launches or []))
    return result


def vllm_lb_routing(settings: Any) -> dict[str, Any]:
    result: dict[str, Any] = _call("vllm_lb_routing", routing, dict(settings or {}))
    return result


def vllm_lb_tls_names(bind_address: Any, names: Any = None) -> list[str]:
    result: list[str] = _call("vllm_lb_tls_names", tls_names, str(bind_address), list(names or []))
    return result


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "vllm_health_gate": vllm_health_gate,
            "vllm_serial": vllm_serial,
            "vllm_metric_sum": vllm_metric_sum,
            "vllm_retries": vllm_retries,
            "vllm_container_env": vllm_container_env,
            "vllm_lb_servers": vllm_lb_servers,
            "vllm_lb_routing": vllm_lb_routing,
            "vllm_lb_tls_names": vllm_lb_tls_names,
        }
