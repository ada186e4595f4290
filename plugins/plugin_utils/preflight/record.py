# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""The launch record: preflight's one answer per host, which every later stage reads.

Preflight is the one place that plans. :func:`host_input` turns one host's variables (already checked by
``inputs.check_host_inputs``) and its GPU facts into the inputs of the fleet step, without any secret value;
:func:`fleet_launch` plans every host in one call (memoised on identical facts, model and options), lays out
its replicas and its multi-node group, runs the fleet checks and returns ``{"records", "errors"}``.
``records[host]`` is what ``artifacts/fleet-plan/plans.json`` holds for the host:

- ``sku``, ``facts``, ``plan`` (Contract 2), ``multinode_group``, ``ports``, ``image_cuda``, ``feedback`` —
  the report's inputs;
- ``launch`` — :func:`..deploy.launch.launch_record`: the image, and per replica ``container``, ``port``,
  ``device_ids``, ``engine_args`` (the exact ``--config`` file) and ``config_file``, ``env`` / ``env_names``,
  ``argv``, ``node_rank``, ``nodes``, ``master_address`` and the container's settings (entrypoint, network and IPC
  mode, shm size, ulimits, restart policy, health check), from the host's launch settings
  (``deploy/launch.py`` ``LAUNCH_SETTINGS``).

An unexpected error while handling one host becomes one line naming the host, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.launch import (
    SECRET_ENV,
    LaunchError,
    launch_record,
    launch_settings,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.network import (
    NetworkError,
    check_group_reachability,
    node_network,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import (
    ModelFilesError,
    load_model,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import report, startup
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.balancers import check_balancers
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.images import (
    ImageChecker,
    check_host_image,
    check_image_ray,
    check_image_version,
    image_compat_check,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.machines import (
    check_machines,
    check_ports,
    gpu_uuids,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.multinode import (
    check_data_parallel_groups,
    check_multinode,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.planning import (
    plan_options,
    try_plan,
    with_group_size,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.secrets import SECRET_VALUE_VARIABLES

__all__ = ["check_fleet", "fleet_launch", "host_files", "host_input", "plans_json", "replan", "report_files", "unexpected",
           "with_feedback"]


def unexpected(host: str, what: str, exc: BaseException) -> str:
    return (f"{host}: preflight failed unexpectedly while {what}: {type(exc).__name__}: {exc} "
            "(an input vllm-fleet does not expect; check this host's variables and facts)")


#: Facts that identify a machine but never change its plan: left out of the memo key, so identical hosts
#: are planned once (the planner reads none of them).
_IDENTITY_KEYS: frozenset[str] = frozenset()
_GPU_IDENTITY_KEYS = frozenset({"uuid", "pci_bus_id"})


def _memo_key(facts: Any, model: Any, options: Mapping[str, Any]) -> str:
    if isinstance(facts, Mapping):
        facts = {k: v for k, v in facts.items() if k not in _IDENTITY_KEYS}
        if isinstance(facts.get("gpus"), list):
            facts["gpus"] = [{k: v for k, v in g.items() if k not in _GPU_IDENTITY_KEYS} if isinstance(g, Mapping)
                             else g for g in facts["gpus"]]
    return json.dumps([facts, model, options], sort_keys=True, default=str)


def _gpu_indexes(facts: Mapping[str, Any]) -> list[int] | None:
    gpus = facts.get("gpus") or []
    indexes = [g.get("index") for g in gpus if isinstance(g, Mapping)]
    ints = [i for i in indexes if isinstance(i, int) and not isinstance(i, bool)]
    return sorted(ints) if ints and len(ints) == len(indexes) else None


def host_input(
    variables: Mapping[str, Any],
    host: str,
    *,
    sku: str,
    facts: Mapping[str, Any],
    address: str,
    model_dir: str,
    ports: Mapping[str, Any] | None = None,
    feedback: Any = None,
    network: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One host's inputs to :func:`fleet_launch`, with secrets reduced to their names.

    :param variables: the host's ``vllm_*`` variables (the ``varnames`` lookup preflight already makes)
    :param address: ansible_host, or the inventory name
    :param model_dir: the controller's model directory (realpath of vllm_fleet_model)
    :param network: the host's discovered network (``ansible_facts.network``), None when not known
    """
    secret_vars = SECRET_VALUE_VARIABLES  # variable -> kind (api_key, hf_token)
    secrets = sorted({SECRET_ENV[kind] for name, kind in secret_vars.items()
                      if isinstance(variables.get(name), str) and variables[name].strip()})
    public = {k: v for k, v in variables.items() if k not in secret_vars}
    return {
        "sku": sku,
        "facts": dict(facts),
        "address": address,
        "model": variables.get("vllm_fleet_model"),
        "multinode_group": variables.get("vllm_fleet_multinode_group") or None,
        "options": plan_options(public),
        "settings": launch_settings(dict(public), address=address, model_dir=model_dir),
        "env": dict(variables.get("vllm_fleet_env") or {}),
        "secret_names": secrets,
        "ports": dict(ports or {}),
        "image_cuda": variables.get("vllm_fleet_image_cuda_version"),
        # The image stage's forward-compatibility inputs (checked in images.check_image_forward_compat).
        "image_forward_compat": str(variables.get("vllm_image_forward_compat") or "auto").lower(),
        "image_cuda_compat_dir": str(variables.get("vllm_image_cuda_compat_dir") or ""),
        # Only when the inventory sets it (checked against a Ray launch in fleet_launch).
        **({"image_ray": variables["vllm_image_ray"]} if variables.get("vllm_image_ray") is not None else {}),
        # Only when the inventory pins it (checked against the plan's version in fleet_launch).
        **({"image_vllm_version": variables["vllm_image_vllm_version"],
            "requested_vllm_version": variables.get("vllm_fleet_vllm_version")}
           if variables.get("vllm_image_vllm_version") is not None else {}),
        "feedback": feedback,
        "network": dict(network) if isinstance(network, Mapping) else None,
    }


def _groups(hosts: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for host, item in hosts.items():  # inventory order: the first host of a group is rank 0
        group = item.get("multinode_group")
        if group:
            groups.setdefault(str(group), []).append(host)
    return groups


def _machine_view(records: Mapping[str, Mapping[str, Any]], hosts: Mapping[str, Mapping[str, Any]]
                  ) -> dict[str, dict[str, Any]]:
    view = {}
    for host, rec in records.items():
        replicas = (rec.get("launch") or {}).get("replicas") or []
        uuids = gpu_uuids(rec.get("facts") or {})
        address = (hosts[host].get("settings") or {}).get("advertise_address") or hosts[host].get("address") or host
        view[host] = {"address": address, "gpu_uuids": uuids,
                      "ports": [r["port"] for r in replicas], "containers": [r["container"] for r in replicas],
                      "head_ports": _head_ports(rec.get("launch") or {}, hosts[host].get("settings") or {})}
    return view


def _head_ports(launch: Mapping[str, Any], settings: Mapping[str, Any]) -> list[int]:
    """The ports rank 0 of a multi-node group binds beside its replicas: data parallelism's RPC port, else the Ray
    head's port or the multiprocessing launcher's master port (another name on the same machine must not use them)."""
    replicas = launch.get("replicas") or []
    if launch.get("node_rank") != 0 or not launch.get("master_address") or not replicas:
        return []
    data_parallel = replicas[0].get("data_parallel")
    if data_parallel:
        return [int(data_parallel["rpc_port"])]
    key = "ray_port" if (launch.get("image") or {}).get("ray") else "master_port"
    return [int(settings[key])] if settings.get(key) else []


def check_fleet(records: Mapping[str, Mapping[str, Any]], image_checker: ImageChecker | None = None) -> list[str]:
    """All fleet-level checks after planning.

    ``records`` maps host → {facts, plan, multinode_group, ports, image_cuda}. ``image_checker(facts, plan)``
    returns a refusal message when no image can run on the host (``image_compat.check_host``); it is used
    when the record does not pin ``image_cuda`` (``images.check_host_image``).
    """
    errors: list[str] = []
    for host in sorted(records):
        rec = records[host]
        errors += check_ports(host, rec.get("ports") or {})
        errors += check_host_image(host, rec, image_checker)
    errors += check_multinode(records)
    return errors


def _model_config(model: Any) -> dict[str, Any] | None:
    """The model's config.json for the start-up checks, None when it cannot be read (the planner says why)."""
    try:
        return load_model(str(model))[0] if model else None
    except (ModelFilesError, OSError, ValueError):
        return None


def _planning_pass(hosts: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]]
                   ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Planning pass: ``(plans, errors)``, each host planned once per identical input, groups refused as a whole."""
    errors: list[str] = []
    memo: dict[str, dict[str, Any]] = {}
    plans: dict[str, dict[str, Any]] = {}
    mismatched = check_data_parallel_groups(
        {host: {"multinode_group": item.get("multinode_group"),
                "engine_args": (item.get("options") or {}).get("engine_args")} for host, item in hosts.items()})
    errors += mismatched
    mixed = startup.check_groups(hosts)  # one checkpoint and one vLLM version per multi-node group
    errors += mixed
    unplanned = {str(item.get("multinode_group")) for host, item in hosts.items()
                 if any(line.startswith(f"{host}: ") for line in mismatched + mixed)}
    for host, item in hosts.items():
        if item.get("multinode_group") and str(item["multinode_group"]) in unplanned:
            continue  # its group's data_parallel_size differs between hosts (refused above)
        try:
            options = dict(item.get("options") or {})
            group = item.get("multinode_group")
            if group:
                options = with_group_size(options, len(groups[str(group)]))
            refused = startup.check_host(host, item, _model_config(item.get("model")))
            if refused:  # what vLLM would refuse at start-up (preflight/startup.py), before planning
                errors += refused
                continue
            observed = item.get("observed")  # an identical host's last good start (fleet.with_observed)
            key = _memo_key(item.get("facts"), item.get("model"), {**options, "observed": observed})
            if key not in memo:
                memo[key] = try_plan(item.get("facts"), item.get("model"), "{host}", options, observed=observed)
            answer = memo[key]
            if answer["error"]:
                errors.append(str(answer["error"]).replace("{host}", host, 1))
                continue
            refused = startup.check_plan(host, answer["plan"])
            if refused:
                errors += refused
                continue
            plan = answer["plan"]
            got = item.get("learned")
            if got:  # a value learned on an identical host: the reason says so (the planner's says "set by you")
                plan = {**plan, "reasons": {**plan["reasons"], **got["reasons"]}}
            if item.get("pin_reasons"):  # a pin preflight made from the host's environment (fleet.with_cpu_kv_space)
                plan = {**plan, "reasons": {**plan["reasons"], **item["pin_reasons"]}}
            plans[host] = plan
        except Exception as exc:
            errors.append(unexpected(host, "planning", exc))
    return plans, errors


def _group_reachability(hosts: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]]) -> list[str]:
    """Group reachability: one line per node of a multi-node group the others cannot reach, naming the group."""
    errors: list[str] = []
    for group, members in groups.items():
        errors += [f"{line} (group {group})" for line in check_group_reachability(
            [{"host": n, "address": hosts[n]["settings"]["advertise_address"], "network": hosts[n].get("network")}
             for n in members])]
    return errors


def _host_launch(host: str, plan: dict[str, Any], hosts: Mapping[str, Mapping[str, Any]],
                 groups: Mapping[str, list[str]], *, planning: bool, warnings: list[str]) -> dict[str, Any]:
    """Host launch: the node's network, then :func:`launch_record` among its group's nodes (warnings appended)."""
    item = hosts[host]
    group = item.get("multinode_group")
    nodes = groups[str(group)] if group else [host]
    addresses = [str(hosts[n]["settings"]["advertise_address"]) for n in nodes]
    try:
        net: dict[str, Any] | None = node_network(
            item.get("network"), address=str(item["settings"]["advertise_address"]),
            multinode=len(nodes) > 1, user_env=item.get("env"), host=host, group_addresses=addresses)
    except NetworkError as exc:
        if not planning:
            raise
        warnings.append(f"{exc} (a deploy stops here)")
        net = None
    return launch_record(
        plan,
        host=host,
        settings=dict(item["settings"]),
        env=item.get("env"),
        secret_names=list(item.get("secret_names") or []),
        nodes=nodes,
        node_addresses=addresses,
        gpu_indexes=_gpu_indexes(item.get("facts") or {}),
        head_port=int(hosts[nodes[0]]["settings"]["port"]),
        network=net,
        # Data parallelism across the group: the head binds its RPC socket on this IP (its vllm_fleet_env
        # VLLM_HOST_IP when set, as node_network announces it; else its address).
        data_parallel_address=str((hosts[nodes[0]].get("env") or {}).get("VLLM_HOST_IP") or addresses[0]),
    )


def _host_record(item: Mapping[str, Any], plan: dict[str, Any], launch: dict[str, Any]) -> dict[str, Any]:
    """Host record: what plans.json holds for a host, its ports with a data-parallel head's RPC port."""
    ports = dict(item.get("ports") or {})
    data_parallel = launch["replicas"][0].get("data_parallel") if launch["replicas"] else None
    if data_parallel and launch["node_rank"] == 0:
        # The head of data parallelism across the group binds the RPC port: checked with the host's other ports
        # (check_ports) even when vllm_serve_dp_rpc_port is left at its default.
        ports.setdefault("vllm_serve_dp_rpc_port", data_parallel["rpc_port"])
    return {
        "sku": item.get("sku"),
        "facts": item.get("facts"),
        "plan": plan,
        "multinode_group": item.get("multinode_group"),
        "ports": ports,
        "image_cuda": item.get("image_cuda"),
        "image_forward_compat": item.get("image_forward_compat", "auto"),
        "image_cuda_compat_dir": item.get("image_cuda_compat_dir", ""),
        "feedback": item.get("feedback"),
        "launch": launch,
    }


def _layout_pass(hosts: Mapping[str, Mapping[str, Any]], plans: Mapping[str, dict[str, Any]],
                 groups: Mapping[str, list[str]], *, planning: bool
                 ) -> tuple[dict[str, dict[str, Any]], list[str], list[str]]:
    """Layout pass: ``(records, errors, warnings)``, each planned host laid out and its image checked."""
    errors: list[str] = []
    warnings: list[str] = []
    records: dict[str, dict[str, Any]] = {}
    for host, plan in plans.items():
        item = hosts[host]
        try:
            launch = _host_launch(host, plan, hosts, groups, planning=planning, warnings=warnings)
        except NetworkError as exc:
            errors.append(str(exc))
            continue
        except LaunchError as exc:
            errors.append(f"{host}: cannot lay out the plan: {exc}")
            continue
        except Exception as exc:
            errors.append(unexpected(host, "laying out its replicas", exc))
            continue
        ray_errors, ray_warnings = check_image_ray(host, launch, item.get("image_ray"))
        ray_errors += check_image_version(host, plan, item.get("image_vllm_version"),
                                          item.get("requested_vllm_version"))
        if ray_errors:
            errors += ray_errors
            continue
        warnings += ray_warnings
        records[host] = _host_record(item, plan, launch)
    return records, errors, warnings


def _fleet_checks(records: Mapping[str, Mapping[str, Any]], hosts: Mapping[str, Mapping[str, Any]],
                  lbs: Mapping[str, Mapping[str, Any]] | None, *, check_image: bool) -> list[str]:
    """Fleet checks: :func:`check_fleet` and the machines (:func:`.machines.check_machines`), never a traceback."""
    errors: list[str] = []
    try:
        errors += check_fleet(records, image_compat_check if check_image else None)
        view = _machine_view(records, hosts)
        errors += check_machines(view, dict(lbs or {}))
        errors += check_balancers(dict(lbs or {}), {host: str(item["address"]) for host, item in view.items()})
    except Exception as exc:
        errors.append(unexpected("fleet", "checking the fleet as a whole", exc))
    return errors


def fleet_launch(
    hosts: Mapping[str, Mapping[str, Any]],
    lbs: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    check_image: bool = True,
    planning: bool = False,
) -> dict[str, Any]:
    """Plan and lay out every host: ``{"records": {host: record}, "errors": [one line each], "warnings": [...]}``.

    :param hosts: :func:`host_input` per host, in inventory order
    :param lbs: the load-balancer hosts, ``{name: {"address", "ports"}}`` (their listen and stats ports)
    :param planning: the run only plans (nothing is deployed): what a multi-node node's network lacks is a
        warning (recorded facts carry no network; the example's addresses are names), an error otherwise

    The steps: :func:`_planning_pass`, :func:`_group_reachability`, :func:`_layout_pass` (per host
    :func:`_host_launch` and :func:`_host_record`), then, when nothing failed, :func:`_fleet_checks`.
    """
    groups = _groups(hosts)
    plans, errors = _planning_pass(hosts, groups)
    errors += _group_reachability(hosts, groups)
    records, layout_errors, warnings = _layout_pass(hosts, plans, groups, planning=planning)
    errors += layout_errors
    if errors:
        return {"records": records, "errors": errors, "warnings": warnings}
    errors += _fleet_checks(records, hosts, lbs, check_image=check_image)
    return {"records": records, "errors": errors, "warnings": warnings}


def replan(record_input: Mapping[str, Any], host: str, engine_args: Mapping[str, Any]) -> dict[str, Any]:
    """One host's record again with ``engine_args`` pinned over its inventory's (the auto-tune trials): the
    same planner and layout, so a trial's values are validated exactly like inventory pins.

    :returns: ``{"records": {host: record}, "errors": [...]}`` as :func:`fleet_launch`
    """
    item = dict(record_input)
    options = dict(item.get("options") or {})
    options["engine_args"] = {**dict(options.get("engine_args") or {}), **dict(engine_args)}
    item["options"] = options
    if item.get("learned"):  # a value learned earlier and changed now: its old reason no longer applies
        changed = {str(k).replace("_", "-") for k in engine_args}
        got = item["learned"]
        item["learned"] = {"changes": {k: v for k, v in (got.get("changes") or {}).items() if k not in changed},
                           "reasons": {k: v for k, v in (got.get("reasons") or {}).items() if k not in changed}}
    return fleet_launch({host: item}, check_image=False)


def host_files(result: Mapping[str, Any]) -> dict[str, str]:
    """``hosts/<host>.json`` under ``artifacts/fleet-plan/``: what each host keeps from the fleet step (its facts,
    plan, launch record and planning input, as the variables later stages read), loaded by each host with one
    ``include_vars``. Handing the records out from the fleet result in memory costs every host a walk of the whole
    fleet's result (a per-host ``set_fact`` reading it: 284 s at 2,000 hosts; one ``add_host`` loop: 174 ms per
    host); a small file per host costs each host only its own record."""
    records = result.get("records") or {}
    inputs = result.get("inputs") or {}
    files = {}
    for host, rec in records.items():
        # Without the last deploy's feedback (an observation, not an input: as in plans.json), so a re-run after
        # a deploy writes the same bytes.
        given = {k: v for k, v in (inputs.get(host) or {}).items() if k != "feedback"}
        files[f"hosts/{host}.json"] = json.dumps({"vllm_fleet_facts": rec.get("facts"), "vllm_fleet_plan": rec.get("plan"),
                                                  "vllm_fleet_launch": rec.get("launch"), "__vllm_fleet_input": given},
                                                 sort_keys=True) + "\n"
    return files


def plans_json(records: Mapping[str, Mapping[str, Any]]) -> str:
    """``artifacts/fleet-plan/plans.json``: the records, sorted, without ``feedback`` (an observation of the last
    deploy, not part of the launch), so planning the same fleet twice writes the same bytes."""
    clean = {host: {k: v for k, v in rec.items() if k != "feedback"} for host, rec in records.items()}
    return json.dumps(clean, indent=4, sort_keys=True) + "\n"


def with_feedback(records: Mapping[str, Mapping[str, Any]], feedback: Mapping[str, Any]) -> dict[str, Any]:
    """The records with each host's latest plan feedback (deploy's last play), for the report's "observed"
    column; hosts without new feedback keep theirs."""
    out = {}
    for host, rec in records.items():
        new = feedback.get(host)
        out[host] = {**rec, "feedback": new} if new is not None else dict(rec)
    return out


def report_files(records: Mapping[str, Mapping[str, Any]], *, pages: bool = True) -> dict[str, str]:
    """Every file preflight writes under ``artifacts/fleet-plan/``, rendered in one call (written by one task):
    ``plans.json`` always; with ``pages`` the HTML page, the Markdown and one memory chart per host."""
    files = {"plans.json": plans_json(records)}
    if pages:
        files["index.html"] = report.render_html(records)
        files["README.md"] = report.render_markdown(records)
        for host, rec in records.items():
            files[f"memory/{host}.svg"] = report.memory_svg(host, rec.get("plan") or {}) + "\n"
    return files
