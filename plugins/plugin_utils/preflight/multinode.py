# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Multi-node groups (``vllm_fleet_multinode_group``): hosts that run one vLLM instance together.

- :func:`check_multinode_facts` — before planning, from facts only: at least two hosts, identical GPUs, and hosts
  the rollout can keep in one batch (``deploy/rollout.py``);
- :func:`check_data_parallel_groups` — before planning: one ``data_parallel_size`` per group;
- :func:`check_multinode` — after planning: every TP/PP group complete (size == planned nodes), homogeneous (same
  SKU, count and plan), and TP x PP filling its nodes.

Every check returns a list of one-line messages (empty = all good). Pure (stdlib only, typed, no I/O).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.rollout import (
    RolloutError,
    rollout_units,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.values import is_int


def check_data_parallel_groups(hosts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Data parallelism across a multi-node group needs the same ``data_parallel_size`` on every host of the group.

    :param hosts: ``{host: {"multinode_group": str | None, "engine_args": vllm_fleet_engine_args}}`` in inventory
        order (the first host of a group is its rank 0, which the others are compared with)
    :returns: one line per host whose value differs from its group's rank 0 (unset counts as 1)
    """
    groups: dict[str, list[str]] = {}
    for host, item in hosts.items():
        if item.get("multinode_group"):
            groups.setdefault(str(item["multinode_group"]), []).append(host)

    def size(host: str) -> Any:
        args = hosts[host].get("engine_args")
        return args.get("data_parallel_size", 1) if isinstance(args, Mapping) else 1

    errors: list[str] = []
    for group, members in groups.items():
        head = members[0]
        for host in members[1:]:
            if size(host) != size(head):
                errors.append(f"{host}: vllm_fleet_engine_args.data_parallel_size = {size(host)!r} but {head} (rank 0 "
                              f"of multi-node group {group!r}) has {size(head)!r}: the group's hosts run one data-"
                              f"parallel instance together; set the same data_parallel_size on every host of the "
                              f"group ({', '.join(members)}), e.g. in their group_vars")
    return errors


def _homogeneity_key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    facts = record.get("facts") or {}
    plan = record.get("plan") or {}
    par = plan.get("parallel") or {}
    mem = sorted({g.get("memory_total_mib") for g in facts.get("gpus") or [] if isinstance(g, Mapping)},
                 key=str)
    return (facts.get("gpu_name"), facts.get("gpu_count"), tuple(mem),
            par.get("tensor_parallel_size"), par.get("pipeline_parallel_size"), par.get("data_parallel_size", 1))


def check_multinode(records: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Multi-host TP/PP groups: complete (size == planned nodes) and homogeneous (same SKU, count, plan)."""
    errors: list[str] = []
    groups: dict[str, list[str]] = {}
    for host in sorted(records):
        rec = records[host]
        group = rec.get("multinode_group")
        nodes = ((rec.get("plan") or {}).get("parallel") or {}).get("nodes", 1) or 1
        if group:
            groups.setdefault(str(group), []).append(host)
        elif nodes > 1:
            errors.append(f"{host}: the plan needs {nodes} nodes (TP x PP spans hosts) but the host is in no "
                          "multi-node group: set vllm_fleet_multinode_group on all its nodes")
    for group, hosts in sorted(groups.items()):
        keys = {h: _homogeneity_key(records[h]) for h in hosts}
        if len(set(keys.values())) > 1:
            desc = "; ".join(f"{h}: {k[1]}x {k[0]} " + (f"DP{k[5]} " if k[5] != 1 else "") + f"TP{k[3]} PP{k[4]}"
                             for h, k in sorted(keys.items()))
            errors.append(f"multi-node group {group}: hosts differ ({desc}): a TP/PP group needs identical "
                          "GPUs, GPU counts and plans on every node")
            continue
        head = records[hosts[0]]
        plan = head.get("plan") or {}
        par = plan.get("parallel") or {}
        nodes = par.get("nodes", 1) or 1
        if len(hosts) != nodes:
            what = "incomplete" if len(hosts) < nodes else "has more hosts than the plan uses"
            errors.append(f"multi-node group {group}: {what}: the plan (TP{par.get('tensor_parallel_size')} x "
                          f"PP{par.get('pipeline_parallel_size')}) needs {nodes} node(s), the group has "
                          f"{len(hosts)} ({', '.join(hosts)})")
        gpus = (head.get("facts") or {}).get("gpu_count") or 0
        per_replica = par.get("gpus_per_replica")
        # Data parallelism across the nodes: gpus_per_replica is one node's (its local ranks x TP), which the planner
        # checked against the node's GPUs; only TP x PP across nodes must fill them.
        across = (par.get("data_parallel_size") or 1) == 1
        if across and is_int(per_replica) and gpus and nodes > 1 and per_replica != nodes * gpus:
            errors.append(f"multi-node group {group}: TP x PP = {per_replica} GPUs does not fill {nodes} nodes "
                          f"of {gpus} GPUs: make TP x PP a multiple of the GPUs per node")
    return errors


def check_multinode_facts(records: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Before planning: every multi-node group has >= 2 hosts with identical GPUs (from facts only)."""
    errors: list[str] = []
    groups: dict[str, list[str]] = {}
    for host in sorted(records):
        group = records[host].get("multinode_group")
        if group:
            groups.setdefault(str(group), []).append(host)
    for group, hosts in sorted(groups.items()):
        if len(hosts) < 2:
            errors.append(f"multi-node group {group}: has only {hosts[0]}: a multi-node group spans at least "
                          "two hosts (remove vllm_fleet_multinode_group for a single host)")
        keys = {h: _homogeneity_key({"facts": records[h].get("facts")})[:3] for h in hosts}
        if len(set(keys.values())) > 1:
            desc = "; ".join(f"{h}: {k[1]}x {k[0] or 'no GPU'} {list(k[2])} MiB" for h, k in sorted(keys.items()))
            errors.append(f"multi-node group {group}: mixed GPUs ({desc}): a TP/PP group spanning hosts needs "
                          "the same GPU model and count on every node; split the group by SKU")
    # The rollout's batches never split a group (deploy.yml serial): that needs its hosts together, in the
    # inventory order ``records`` keeps.
    try:
        rollout_units([records[h].get("multinode_group") for h in records], list(records))
    except RolloutError as exc:
        errors.append(str(exc))
    return errors
