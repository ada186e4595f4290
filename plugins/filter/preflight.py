# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Preflight filters: thin wrappers over plugins/plugin_utils/preflight/ (docs: one <filter>.yml each)."""
from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.nvidia_smi import GpuFactsError, validate_facts
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_source import (
    ModelSourceError,
    is_reference,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import fleet as ff
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import record as fl
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import report as fr
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.inputs import sku_groups
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.machines import port_variables
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.staging import resolve_for_host

# ---- checks ---------------------------------------------------------------------------------------

#: The vllm_serve role's argument spec, in this collection: its options are the role's documented inputs, which
#: preflight accepts beside the launch settings (any other vllm_serve_* name is refused as a typo).
_SERVE_SPEC = Path(__file__).resolve().parents[2] / "roles" / "vllm_serve" / "meta" / "argument_specs.yml"


@functools.lru_cache(maxsize=1)
def serve_role_inputs() -> tuple[str, ...]:
    """The vllm_serve role's documented inputs (the options of its ``meta/argument_specs.yml``)."""
    try:
        spec = yaml.safe_load(_SERVE_SPEC.read_text(encoding="utf-8"))
        return tuple(sorted(spec["argument_specs"]["main"]["options"]))
    except (OSError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise AnsibleFilterError(f"cannot read the vllm_serve role's inputs from {_SERVE_SPEC}: {exc} "
                                 "(the collection is incomplete: reinstall it)") from exc


def fleet_sku_groups(group_names: Sequence[str]) -> list[str]:
    return sku_groups([str(g) for g in group_names])


# ---- the launch record ----------------------------------------------------------------------------

def _data(value: Any) -> Any:
    """Plain JSON data (Ansible hands filters tagged and lazy containers)."""
    return json.loads(json.dumps(value, default=str))


def fleet_host_files(result: Mapping[str, Any]) -> dict[str, str]:
    if not isinstance(result, Mapping):
        raise AnsibleFilterError("fleet_host_files expects the result of fleet_preflight")
    return fl.host_files(_data(result))


def fleet_report_files(records: Mapping[str, Any], pages: bool = True) -> dict[str, str]:
    if not isinstance(records, Mapping):
        raise AnsibleFilterError("fleet_report_files expects a dict host -> record")
    return fl.report_files(_data(records), pages=bool(pages))


def fleet_with_feedback(records: Mapping[str, Any], feedback: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(records, Mapping) or not isinstance(feedback, Mapping):
        raise AnsibleFilterError("fleet_with_feedback expects a dict host -> record and a dict host -> feedback")
    return fl.with_feedback(_data(records), _data(feedback))


def fleet_lb_inputs(names: Sequence[str], hostvars: Any, defaults: Mapping[str, Any] | None = None
                    ) -> dict[str, dict[str, Any]]:
    """The load-balancer hosts for fleet_preflight's machine checks: ``{name: {"address", "ports"}}`` (a helper of
    fleet_preflight, not a filter).

    ``defaults`` are the vllm_lb role's defaults (its listen and stats ports when the inventory sets none).
    """
    out: dict[str, dict[str, Any]] = {}
    defaults = dict(defaults or {})
    for name in names or []:
        hv = hostvars[name]
        ports = []
        for var in ("vllm_lb_port", "vllm_lb_stats_port"):
            value = hv[var] if var in hv else defaults.get(var)
            if value not in (None, "", 0, "0"):
                ports.append(int(value))
        address = hv.get("ansible_host", name)
        servers = hv.get("vllm_lb_servers")
        out[str(name)] = {"address": str(address), "ports": ports, "servers": servers,
                          "remote": "ansible_host" in hv and hv.get("ansible_connection") != "local"}
    return out


_HOST_VAR = re.compile(r"^(vllm|gpu)_")


def _read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _host_state(name: str, hv: Any, recorded_dir: str | None, artifacts_dir: str) -> dict[str, Any]:
    """One host's variables, groups, address and what the controller's disk says (model, facts, feedback)."""
    names = [n for n in hv if _HOST_VAR.match(str(n))]
    variables = {str(n): hv[n] for n in names}
    try:
        port_names = port_variables(variables.get("vllm_fleet_port_variables"))
    except ValueError:
        port_names = []
    for port_name in port_names:
        if port_name not in variables and port_name in hv:
            variables[port_name] = hv[port_name]
    variables = _data(variables)
    model = variables.get("vllm_fleet_model")
    model_dir, exists, model_error, model_note = "", False, None, None
    if isinstance(model, str) and model.strip():
        path = os.path.realpath(os.path.expanduser(model))
        exists = os.path.exists(path)
        model_dir = os.path.dirname(path) if os.path.isfile(path) else path
    elif is_reference(model):
        try:
            staged = resolve_for_host(variables)
            variables["vllm_fleet_model"] = staged["directory"]
            for key, value in staged["defaults"].items():
                variables.setdefault(key, value)
            model_dir, exists, model_note = staged["host_path"], True, staged["source"]["note"]
        except ModelSourceError as exc:
            model_error = f"{exc}"
    elif isinstance(model, Mapping):
        exists = True
    facts: Any = None
    facts_error = None
    network: Any = None  # ansible_facts.network (gpu_facts), or a recorded file's "network"
    if recorded_dir:
        path = os.path.join(os.path.realpath(os.path.expanduser(recorded_dir)), f"{name}.json")
        if os.path.isfile(path):
            try:
                raw = _read_json(path)
                facts = validate_facts(raw, f"facts_file {path} (CONTRACT 1 GPU facts)")
                network = raw.get("network") if isinstance(raw, Mapping) else None
            except (OSError, ValueError, GpuFactsError) as exc:
                facts_error = f"recorded facts {path}: {exc}"
    else:
        gathered = hv.get("ansible_facts", {})
        facts = _data(gathered.get("gpu")) if isinstance(gathered, Mapping) else None
        network = _data(gathered.get("network")) if isinstance(gathered, Mapping) else None
        if facts is None:
            facts_error = "no GPU facts: the discovery task did not run on this host"
    feedback_dir = variables.get("vllm_fleet_feedback_dir") or os.path.join(artifacts_dir, "feedback")
    feedback = None
    feedback_path = os.path.join(str(feedback_dir), f"{name}.json")
    if os.path.isfile(feedback_path):
        try:
            feedback = _read_json(feedback_path)
        except (OSError, ValueError):
            feedback = None
    return {"vars": variables, "groups": [str(g) for g in hv["group_names"]], "facts": facts, "network": network,
            "facts_error": facts_error, "address": str(hv.get("ansible_host", name)), "model_dir": model_dir,
            "model_exists": exists, "feedback": feedback, "model_error": model_error, "model_note": model_note}


def fleet_preflight(names: Sequence[str], hostvars: Any, lb_names: Sequence[str] | None = None,
                    lb_defaults: Mapping[str, Any] | None = None, recorded_dir: str | None = None,
                    planning: bool = True, artifacts_dir: str = "artifacts", check_image: bool = True
                    ) -> dict[str, Any]:
    """The whole preflight after discovery, in one controller step (plugin_utils/preflight/fleet.py)."""
    states = {}
    for name in names or []:
        try:
            states[str(name)] = _host_state(str(name), hostvars[name], recorded_dir or None, str(artifacts_dir))
        except Exception as exc:
            return {"stage": "inputs", "errors": [f"{name}: preflight cannot read this host's variables: "
                                                  f"{type(exc).__name__}: {exc}"],
                    "warnings": [], "records": {}, "inputs": {}}
    lbs = fleet_lb_inputs(list(lb_names or []), hostvars, lb_defaults)
    return ff.fleet_preflight(states, recorded=bool(recorded_dir), planning=bool(planning), lbs=lbs,
                              check_image=bool(check_image), role_inputs=serve_role_inputs(),
                              learned_files=_learned_files(str(artifacts_dir)))


def _learned_files(artifacts_dir: str) -> list[dict[str, Any]]:
    """The corrections earlier deploys learned: ``<artifacts>/learned/<host>.json`` (the vllm_serve role writes them)."""
    folder = os.path.join(artifacts_dir, "learned")
    found: list[dict[str, Any]] = []
    if not os.path.isdir(folder):
        return found
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json"):
            try:
                data = _read_json(os.path.join(folder, name))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                found.append(data)
    return found


def fleet_replan(host_input: Mapping[str, Any], host: str, engine_args: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(host_input, Mapping) or not isinstance(engine_args, Mapping):
        raise AnsibleFilterError("fleet_replan expects a host's input (fleet_preflight's inputs[host]) and a dict of "
                                 "engine arguments")
    return fl.replan(_data(host_input), str(host), _data(engine_args))


# ---- report ---------------------------------------------------------------------------------------

def _records(records: Any) -> Mapping[str, Mapping[str, Any]]:
    if not isinstance(records, Mapping):
        raise AnsibleFilterError("fleet report filters expect a dict host -> record")
    return records


def fleet_report_html(records: Any, title: str = "vllm-fleet plan") -> str:
    return fr.render_html(_records(records), title)


def fleet_report_markdown(records: Any, title: str = "vllm-fleet plan") -> str:
    return fr.render_markdown(_records(records), title)


def fleet_summary(records: Any) -> list[str]:
    return fr.summary_lines(_records(records))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "fleet_sku_groups": fleet_sku_groups,
            "fleet_host_files": fleet_host_files,
            "fleet_replan": fleet_replan,
            "fleet_preflight": fleet_preflight,
            "fleet_report_files": fleet_report_files,
            "fleet_with_feedback": fleet_with_feedback,
            "fleet_report_html": fleet_report_html,
            "fleet_report_markdown": fleet_report_markdown,
            "fleet_summary": fleet_summary,
        }
