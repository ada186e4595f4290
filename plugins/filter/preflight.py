# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Preflight filters: thin wrappers over plugins/plugin_utils/preflight/ (docs: one <filter>.yml each)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import compat as image_compat
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import plan as plan_host
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import (
    ModelFilesError,
    load_model,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import checks as fc
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import report as fr

# The keyword options of the vllm_plan filter (what fleet_plan_options builds and fleet_try_plan accepts).
_PLAN_OPTIONS = ("profile", "vllm_version", "engine_args", "policy", "extra_args", "served_model_path")


# ---- checks ---------------------------------------------------------------------------------------

def fleet_host_errors(variables: Mapping[str, Any], host: str, group_names: Sequence[str],
                      ports: Mapping[str, Any] | None = None) -> list[str]:
    if not isinstance(variables, Mapping):
        raise AnsibleFilterError("fleet_host_errors expects a dict of variables")
    errors = fc.check_host_inputs(str(host), dict(variables), [str(g) for g in group_names])
    return errors + fc.check_ports(str(host), fleet_port_map(ports or {}))


def fleet_facts_errors(facts: Any, host: str, sku_group: str | None = None, match: str | None = None) -> list[str]:
    errors = fc.check_facts_shape(str(host), facts)
    if not errors:
        errors = fc.check_sku_match(str(host), facts, sku_group, match)
    return errors


def _image_checker(facts: Mapping[str, Any], plan: Mapping[str, Any]) -> str | None:
    """The IMAGE stage's compatibility table decides whether any image runs on this driver and GPUs."""
    version = str(plan.get("vllm_version") or "")
    if not version:
        return None
    gpus = facts.get("gpus") or []
    ccs = [str(g.get("compute_capability")) for g in gpus if g.get("compute_capability")]
    message: str | None = image_compat.check_host(version, facts.get("driver_version"), ccs,
                                                  variant="cuda", allow_fallback=False)
    return message


def fleet_errors(records: Mapping[str, Mapping[str, Any]], check_image: bool = True) -> list[str]:
    if not isinstance(records, Mapping):
        raise AnsibleFilterError("fleet_errors expects a dict host -> record")
    return fc.check_fleet(records, _image_checker if check_image else None)


def fleet_multinode_errors(records: Mapping[str, Mapping[str, Any]]) -> list[str]:
    if not isinstance(records, Mapping):
        raise AnsibleFilterError("fleet_multinode_errors expects a dict host -> record")
    return fc.check_multinode_facts(records)


def fleet_sku_groups(group_names: Sequence[str]) -> list[str]:
    return fc.sku_groups([str(g) for g in group_names])


def fleet_port_map(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None and v != ""}


def fleet_port_variables(value: Any = None) -> list[str]:
    """The variable names that hold ports: the given list, or the default one when unset."""
    if value is None:
        return list(fc.DEFAULT_PORT_VARIABLES)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise AnsibleFilterError("vllm_fleet_port_variables must be a list of variable names")
    return list(value)


# ---- planning -------------------------------------------------------------------------------------

def fleet_plan_options(variables: Mapping[str, Any], records: Mapping[str, Any] | None = None,
                       host: str = "") -> dict[str, Any]:
    """Keyword options for vllm_plan from the host's vllm_fleet_* variables.

    A host in a multi-node group gets ``policy.max_nodes`` = the group's size unless the policy sets it.
    """
    opts: dict[str, Any] = {}
    for key in _PLAN_OPTIONS:
        value = variables.get(f"vllm_fleet_{key}")
        if value is not None:
            opts[key] = value
    group = (records or {}).get(host, {}).get("multinode_group") if records else None
    if group:
        size = sum(1 for rec in (records or {}).values() if rec.get("multinode_group") == group)
        policy = dict(opts.get("policy") or {})
        policy.setdefault("max_nodes", size)
        opts["policy"] = policy
    return opts


def fleet_try_plan(facts: Any, model: Any, host: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The vllm_plan filter's answer as data: ``{"plan": plan, "error": None}`` or ``{"plan": None, "error": msg}``.

    Preflight asserts on ``error`` so the message reads "<host>: <what to change>" instead of a chain of
    template errors. Calls the planner core directly (as vllm_plan does), with vllm_plan's options.
    """
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(_PLAN_OPTIONS))
    if unknown:
        return {"plan": None, "error": f"{host}: vllm_plan rejected the options: unknown option(s) "
                                       f"{', '.join(map(str, unknown))} (known: {', '.join(_PLAN_OPTIONS)})"}
    if not isinstance(facts, dict):
        return {"plan": None, "error": f"{host}: input must be the gpu_facts dict, not {type(facts).__name__}"}
    try:
        if isinstance(model, dict):
            config, weights_total, model_dir = model, None, None
        else:
            config, weights_total, model_dir = load_model(str(model))
        kwargs: dict[str, Any] = {
            "engine_args": dict(opts.get("engine_args") or {}),
            "policy": dict(opts.get("policy") or {}),
            "extra_args": [str(a) for a in (opts.get("extra_args") or [])],
            "weights_total_bytes": weights_total,
            "model_path": str(opts["served_model_path"]) if opts.get("served_model_path") else model_dir,
        }
        if "profile" in opts:
            kwargs["profile"] = opts["profile"]
        if "vllm_version" in opts:
            kwargs["vllm_version"] = str(opts["vllm_version"])
        return {"plan": plan_host(facts, config, **kwargs), "error": None}
    except (PlanError, ModelFilesError) as exc:
        return {"plan": None, "error": f"{host}: {exc}"}
    except TypeError as exc:  # an option of the wrong type (a contract mismatch)
        return {"plan": None, "error": f"{host}: vllm_plan rejected the options: {exc}"}


# ---- report ---------------------------------------------------------------------------------------

def _records(records: Any) -> Mapping[str, Mapping[str, Any]]:
    if not isinstance(records, Mapping):
        raise AnsibleFilterError("fleet report filters expect a dict host -> record")
    return records


def fleet_report_html(records: Any, title: str = "vllm-fleet plan") -> str:
    return fr.render_html(_records(records), title)


def fleet_report_markdown(records: Any, title: str = "vllm-fleet plan") -> str:
    return fr.render_markdown(_records(records), title)


def fleet_memory_svg(plan: Any, host: str) -> str:
    if not isinstance(plan, Mapping):
        raise AnsibleFilterError("fleet_memory_svg expects a plan dict")
    return fr.memory_svg(str(host), plan)


def fleet_summary(records: Any) -> list[str]:
    return fr.summary_lines(_records(records))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "fleet_host_errors": fleet_host_errors,
            "fleet_facts_errors": fleet_facts_errors,
            "fleet_errors": fleet_errors,
            "fleet_multinode_errors": fleet_multinode_errors,
            "fleet_sku_groups": fleet_sku_groups,
            "fleet_port_map": fleet_port_map,
            "fleet_port_variables": fleet_port_variables,
            "fleet_plan_options": fleet_plan_options,
            "fleet_try_plan": fleet_try_plan,
            "fleet_report_html": fleet_report_html,
            "fleet_report_markdown": fleet_report_markdown,
            "fleet_memory_svg": fleet_memory_svg,
            "fleet_summary": fleet_summary,
        }
