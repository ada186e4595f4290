# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""The load balancers against the fleet, what no single vLLM sees: every backend a balancer is given is
well-formed and an address it can reach.

A balancer's backends are the ``vllm_lb_servers`` the inventory sets (``[{server, address, port}]``), or, when it
sets none, every vLLM host's replicas (deploy.yml fills them from each host's ``vllm_serve_backends``); its routing
policy and TLS settings are valid (``deploy/balancer.py``). A backend on
a loopback address is only reachable from its own machine, so a balancer on another address cannot reach it.
Pure (stdlib only, typed); one-line messages naming the balancer, the backend and the fix.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.balancer import balancer_problems

__all__ = ["check_balancers", "is_loopback"]


def is_loopback(address: str) -> bool:
    """localhost, 127.0.0.0/8 and ::1 in any spelling."""
    text = address.strip().lower().rstrip(".")
    if text in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(text.strip("[]")).is_loopback
    except ValueError:
        return False


def _server_problem(index: int, server: Any) -> str:
    where = f"vllm_lb_servers[{index}]"
    if not isinstance(server, Mapping):
        return f"{where} must be a dict {{server, address, port}}, got {type(server).__name__}"
    missing = [key for key in ("server", "address", "port") if server.get(key) in (None, "")]
    if missing:
        return f"{where} has no {', '.join(missing)}: give each backend server, address and port"
    port = server["port"]
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        return f"{where}.port must be an integer port (1-65535), got {port!r}"
    return ""


def check_balancers(lbs: Mapping[str, Mapping[str, Any]], vllm_addresses: Mapping[str, str]) -> list[str]:
    """Refuse malformed backends and backends the balancer cannot reach.

    :param lbs: ``{name: {"address": str, "servers": list or None, "remote": bool, "settings": dict}}`` (``settings``:
        its vllm_lb_* routing and TLS variables, ``vllm_lb_tls_key_set`` for the key; ``servers``: the inventory's
        vllm_lb_servers; ``remote``: the balancer has its own ``ansible_host`` and is not a local connection, so its
        address is another machine's; only then is a loopback backend unreachable from it)
    :param vllm_addresses: every vLLM host's address (what deploy.yml gives the balancers when servers is unset)
    """
    errors: list[str] = []
    for lb in sorted(lbs, key=str):
        item = lbs[lb]
        errors += balancer_problems(str(lb), dict(item.get("settings") or {}))
        remote = bool(item.get("remote")) and not is_loopback(str(item.get("address") or lb))
        servers = item.get("servers")
        if servers not in (None, []):
            if not isinstance(servers, list):
                errors.append(f"{lb}: vllm_lb_servers must be a list of {{server, address, port}}, got "
                              f"{type(servers).__name__}: fix it, or remove it (deploy.yml fills it from the fleet)")
                continue
            problems = [_server_problem(i, s) for i, s in enumerate(servers)]
            errors += [f"{lb}: {line}" for line in problems if line]
            if any(problems):
                continue
            backends = {str(s["server"]): str(s["address"]) for s in servers}
        else:
            backends = dict(vllm_addresses)
        for name, address in sorted(backends.items()):
            if remote and is_loopback(address):
                errors.append(f"{lb}: backend {name} is at {address}, a loopback address only its own machine reaches, "
                              f"and this balancer is on {item.get('address') or lb}: give {name} an address the "
                              "balancer can reach (ansible_host), or run the balancer on that machine")
    return errors
