# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Preflight for the whole fleet in one call: validate every host, check its facts, plan and lay it out.

``playbooks/preflight.yml`` contacts hosts only to discover their GPUs (the read-only gpu_facts module, or no
contact at all with recorded facts); everything else is this one controller step, so planning 1,000 hosts
costs one task, not a dozen per host. The stages run in order and stop at the first that finds an error, as
the per-host tasks did, with the same one-line messages naming the host:

1. inputs — ``inputs.check_host_inputs`` and ``machines.check_ports`` per host, the model path, the recorded facts
   file;
2. facts — the file's content (CONTRACT 1), ``machines.check_facts_shape``, ``amd.check_amd_host`` and
   ``machines.check_sku_match``;
3. multi-node groups from facts — ``multinode.check_multinode_facts``;
4. the launch records — ``record.fleet_launch`` (plan memoised on identical inputs, layout, fleet checks).

Pure: what comes from disk (model paths that exist, recorded facts, last deploy's feedback) is read by the
filter (plugins/filter/preflight.py) and passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import learned
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import amd
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.inputs import (
    check_host_inputs,
    host_warnings,
    sku_groups,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.machines import (
    check_facts_shape,
    check_ports,
    check_sku_match,
    port_map,
    port_variables,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.multinode import (
    check_multinode_facts,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import (
    fleet_launch,
    host_input,
    unexpected,
)

__all__ = ["HostState", "fleet_preflight"]

#: One host as the filter hands it over:
#: ``{"vars": {name: value} (vllm_* / gpu_* and the port variables), "groups": [group names],
#:    "address": ansible_host or the name, "model_dir": realpath of the model or "", "model_exists": bool,
#:    "facts": CONTRACT 1 or None, "facts_error": one line or None, "feedback": last deploy's or None}``
HostState = Mapping[str, Any]


def _sku(groups: list[str]) -> str:
    skus = sku_groups(groups)
    return skus[0] if skus else ""


def _ports(variables: Mapping[str, Any]) -> dict[str, Any]:
    try:
        names = port_variables(variables.get("vllm_fleet_port_variables"))
    except ValueError:
        return {}  # check_host_inputs reports the bad list
    return port_map({name: variables.get(name) for name in names})


def with_learned(inputs: Mapping[str, dict[str, Any]], files: Iterable[Mapping[str, Any]]
                 ) -> dict[str, dict[str, Any]]:
    """Each host's input with the corrections learned on identical hosts pinned under the user's own pins.

    The input keeps ``learned`` (``{"changes", "reasons"}``) so the plan's reasons say where a value came from.
    """
    store: dict[str, Any] = {}
    for entry in files or ():
        if isinstance(entry, Mapping) and isinstance(entry.get("key"), str) and isinstance(entry.get("host"), str):
            store = learned.record(store, entry["key"], entry["host"], entry.get("observed"), entry.get("correction"))
    out: dict[str, dict[str, Any]] = {}
    for host, item in inputs.items():
        options = dict(item.get("options") or {})
        pins = dict(options.get("engine_args") or {}) if isinstance(options.get("engine_args"), Mapping) else {}
        got = learned.learned_for(store, learned.key_for_input(item), pinned=[str(k).replace("_", "-") for k in pins])
        if not got:
            out[host] = item
            continue
        options["engine_args"] = {**got["changes"], **pins}
        out[host] = {**item, "options": options, "learned": got}
    return out


#: vLLM's CPU platform reads this legacy variable and sets the KV pool from it, over --kv-cache-memory-bytes
#: (vllm/platforms/cpu.py:323-327 in 0.32.0, :340-344 in 0.33.0: ``int(os.environ[...]) * GiB_bytes`` when set and
#: not empty).
CPU_KV_SPACE = "VLLM_CPU_KVCACHE_SPACE"
_CPU_KV_SOURCE = "vllm/platforms/cpu.py:323-327 in 0.32.0, :340-344 in 0.33.0"


def with_cpu_kv_space(inputs: Mapping[str, dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """A CPU-lane host whose ``vllm_fleet_env`` sets VLLM_CPU_KVCACHE_SPACE is planned with that pool: vLLM's CPU
    build applies the variable over ``--kv-cache-memory-bytes``, so a plan that ignored it would predict a pool vLLM
    never has. It becomes a pin of ``kv_cache_memory_bytes`` (N GiB, the reason says where it came from, and
    autocorrect never changes it); a pinned ``kv_cache_memory_bytes`` beside it, or a value vLLM cannot read
    (``int()``), is refused. GPU hosts ignore it (only the CPU platform reads it).

    :returns: ``(inputs, errors)``.
    """
    out: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    for host, item in inputs.items():
        raw = (item.get("env") or {}).get(CPU_KV_SPACE)
        facts = item.get("facts") or {}
        if raw is None or str(raw) == "" or (isinstance(facts, Mapping) and facts.get("gpus")):
            out[host] = item
            continue
        options = dict(item.get("options") or {})
        pins = dict(options.get("engine_args") or {}) if isinstance(options.get("engine_args"), Mapping) else {}
        try:
            gib = int(str(raw))
        except ValueError:
            errors.append(f"{host}: vllm_fleet_env {CPU_KV_SPACE}={raw!r} is not an integer: vLLM reads it with int() "
                          f"and fails at start ({_CPU_KV_SOURCE}): set whole GiB, or remove it and pin "
                          "kv_cache_memory_bytes in vllm_fleet_engine_args")
            continue
        if gib <= 0:
            errors.append(f"{host}: vllm_fleet_env {CPU_KV_SPACE}={raw!r} leaves vLLM no KV cache ({_CPU_KV_SOURCE}): "
                          "remove it (the plan sizes the pool) or set whole GiB")
            continue
        if any(str(k).replace("-", "_") == "kv_cache_memory_bytes" for k in pins):
            errors.append(f"{host}: vllm_fleet_env {CPU_KV_SPACE}={raw} and vllm_fleet_engine_args kv_cache_memory_bytes "
                          f"both set the CPU KV pool, and vLLM takes the variable ({_CPU_KV_SOURCE}): remove one")
            continue
        options["engine_args"] = {**pins, "kv_cache_memory_bytes": gib << 30}
        reason = (f"{gib} GiB from {CPU_KV_SPACE}={raw} in vllm_fleet_env: vLLM's CPU platform sets the KV pool from "
                  f"it over --kv-cache-memory-bytes ({_CPU_KV_SOURCE}), so the plan uses it too")
        out[host] = {**item, "options": options, "pin_reasons": {"kv-cache-memory-bytes": reason}}
    return out, errors


def _observation(item: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The good start the host's last plan feedback recorded (``observe/learned.py`` ``observation``), if any."""
    fb = item.get("feedback")
    obs = fb.get("observation") if isinstance(fb, Mapping) else None
    return obs if isinstance(obs, Mapping) and isinstance(obs.get("host"), str) else None


def with_observed(inputs: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each host's input with the last good start of an identical host (same SKU group, model and requested vLLM
    version) as ``observed``: its own when it has one, else its twins' latest (vLLM's time stamp, then the host's
    name). The planner uses it instead of the estimate on the layout it ran, and only for the vLLM version that
    logged it (``planner/observed.py``); pins are engine args and still win."""
    by_key: dict[str, list[Mapping[str, Any]]] = {}
    for item in inputs.values():
        obs = _observation(item)
        if obs is not None:
            by_key.setdefault(learned.key_for_input(item), []).append(obs)
    out: dict[str, dict[str, Any]] = {}
    for host, item in inputs.items():
        own = _observation(item)
        twins = sorted(by_key.get(learned.key_for_input(item), []), key=lambda o: (str(o.get("at")), o["host"]))
        chosen = own or (twins[-1] if twins else None)
        out[host] = {**item, "observed": dict(chosen)} if chosen else item
    return out


def twin_drift(inputs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A warning per host whose last start logged much less KV than its identical twins (same SKU group, model and
    vLLM version: the same plan), from each host's last plan feedback (``observation.kv_gib``): a host problem,
    not a plan problem (``observe/learned.py`` ``drift``)."""
    store: dict[str, Any] = {}
    for host, item in inputs.items():
        obs = _observation(item)
        kv = obs.get("kv_gib") if obs is not None else None
        if not isinstance(kv, (int, float)) or isinstance(kv, bool):
            continue
        entry = store.setdefault(learned.key_for_input(item), {"hosts": {}, "correction": None})
        entry["hosts"][host] = {"kv_gib": float(kv)}
    return [f"{flag['host']}: {flag['message']}" for at in sorted(store) for flag in learned.drift(store, at)]


def fleet_preflight(
    hosts: Mapping[str, HostState],
    *,
    recorded: bool,
    planning: bool,
    lbs: Mapping[str, Mapping[str, Any]] | None = None,
    check_image: bool = True,
    role_inputs: Iterable[str] = (),
    learned_files: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Validate, check facts, plan and lay out every host.

    :param hosts: :data:`HostState` per host, in inventory order
    :param recorded: facts come from recorded files (``vllm_fleet_recorded_facts_dir``), not discovery
    :param planning: the run only plans (preflight.yml alone): a missing API key is a warning
    :param learned_files: the corrections earlier deploys learned (``artifacts/learned/<host>.json``, written by the
        vllm_serve role after a re-planned start): an identical host (same SKU group, model, vLLM version) takes
        them instead of the estimate, under the user's pins (:func:`with_learned`)
    :param role_inputs: the vllm_serve role's documented inputs (its argument spec's options): accepted beside the
        launch settings, any other ``vllm_serve_*`` name is refused (``inputs.check_host_inputs``)
    :returns: ``{"stage", "errors", "warnings", "records", "inputs"}``; ``stage`` is the stage that failed
        (``inputs``, ``facts``, ``multinode``, ``plan``) or ``ok``; ``inputs`` are the hosts'
        :func:`record.host_input` (what auto-tune re-plans from)
    """
    errors: list[str] = []
    warnings: list[str] = []
    for host, state in hosts.items():
        variables = dict(state.get("vars") or {})
        groups = [str(g) for g in state.get("groups") or []]
        try:
            found = check_host_inputs(host, variables, groups, planning=planning, role_inputs=role_inputs)
            # A port launch setting is checked by both, with the same line: reported once.
            errors += found + [line for line in check_ports(host, _ports(variables)) if line not in found]
            warnings += host_warnings(host, variables, planning=planning)
        except Exception as exc:
            errors.append(unexpected(host, "checking its variables", exc))
            continue
        model = variables.get("vllm_fleet_model")
        note = str(state.get("model_note") or "")
        if state.get("model_error"):
            errors.append(f"{host}: {state['model_error']}")
        elif note.startswith("offline"):
            warnings.append(f"{host}: {note}")
        elif isinstance(model, str) and model.strip() and not state.get("model_exists"):
            errors.append(f"{host}: model path {model} does not exist on the controller: set vllm_fleet_model "
                          "to a model directory or its config.json")
        if recorded and state.get("facts") is None and not state.get("facts_error"):
            directory = variables.get("vllm_fleet_recorded_facts_dir")
            errors.append(f"{host}: no recorded GPU facts at {directory}/{host}.json: record them with the "
                          "gpu_facts module, or unset vllm_fleet_recorded_facts_dir to discover them")
    result: dict[str, Any] = {"stage": "inputs", "errors": errors, "warnings": warnings, "records": {},
                              "inputs": {}}
    if errors:
        return result

    records: dict[str, dict[str, Any]] = {}
    for host, state in hosts.items():
        variables = state.get("vars") or {}
        if state.get("facts_error"):
            errors.append(f"{host}: {state['facts_error']}")
            continue
        facts = state.get("facts")
        found = check_facts_shape(host, facts)
        found = found or amd.check_amd_host(host, facts)  # AMD GPUs: planned, never deployed (preflight/amd.py)
        if not found:
            found = check_sku_match(host, dict(facts or {}), _sku(list(state.get("groups") or [])),
                                    variables.get("vllm_fleet_sku_match"))
        errors += found
        records[host] = {"sku": _sku(list(state.get("groups") or [])), "facts": facts,
                         "multinode_group": variables.get("vllm_fleet_multinode_group") or None}
    if errors:
        result["stage"] = "facts"
        return result

    errors += check_multinode_facts(records)
    if errors:
        result["stage"] = "multinode"
        return result

    inputs = {}
    for host, state in hosts.items():
        variables = dict(state.get("vars") or {})
        inputs[host] = host_input(variables, host, sku=records[host]["sku"], facts=records[host]["facts"],
                                  address=str(state.get("address") or host), model_dir=str(state.get("model_dir") or ""),
                                  ports=_ports(variables), feedback=state.get("feedback"),
                                  network=state.get("network"))
    inputs, errors = with_cpu_kv_space(inputs)
    if errors:
        result.update(stage="plan", errors=errors, inputs=inputs)
        return result
    inputs = with_observed(with_learned(inputs, learned_files))
    launched = fleet_launch(inputs, lbs, check_image=check_image, planning=planning)
    result.update(stage="plan" if launched["errors"] else "ok", errors=launched["errors"],
                  records=launched["records"], inputs=inputs)
    result["warnings"] = warnings + list(launched.get("warnings") or []) + twin_drift(inputs)
    return result
