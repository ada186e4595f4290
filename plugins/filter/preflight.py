# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Preflight filters: thin wrappers over plugins/plugin_utils/preflight/ (docs: one <filter>.yml each)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import checks as fc
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import planning as fp
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import report as fr

# ---- checks ---------------------------------------------------------------------------------------

def fleet_host_errors(variables: Mapping[str, Any], host: str, group_names: Sequence[str],
                      ports: Mapping[str, Any] | None = None) -> list[str]:
    if not isinstance(variables, Mapping):
        raise AnsibleFilterError("fleet_host_errors expects a dict of variables")
    errors = fc.check_host_inputs(str(host), dict(variables), [str(g) for g in group_names])
    return errors + fc.check_ports(str(host), fc.port_map(ports or {}))


def fleet_facts_errors(facts: Any, host: str, sku_group: str | None = None, match: str | None = None) -> list[str]:
    errors = fc.check_facts_shape(str(host), facts)
    if not errors:
        errors = fc.check_sku_match(str(host), facts, sku_group, match)
    return errors


def fleet_errors(records: Mapping[str, Mapping[str, Any]], check_image: bool = True) -> list[str]:
    if not isinstance(records, Mapping):
        raise AnsibleFilterError("fleet_errors expects a dict host -> record")
    return fc.check_fleet(records, fc.image_compat_check if check_image else None)


def fleet_multinode_errors(records: Mapping[str, Mapping[str, Any]]) -> list[str]:
    if not isinstance(records, Mapping):
        raise AnsibleFilterError("fleet_multinode_errors expects a dict host -> record")
    return fc.check_multinode_facts(records)


def fleet_sku_groups(group_names: Sequence[str]) -> list[str]:
    return fc.sku_groups([str(g) for g in group_names])


def fleet_port_map(values: Mapping[str, Any]) -> dict[str, Any]:
    return fc.port_map(values)


def fleet_port_variables(value: Any = None) -> list[str]:
    """The variable names that hold ports: the given list, or the default one when unset."""
    try:
        return fc.port_variables(value)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


# ---- planning -------------------------------------------------------------------------------------

def fleet_plan_options(variables: Mapping[str, Any], records: Mapping[str, Any] | None = None,
                       host: str = "") -> dict[str, Any]:
    return fp.plan_options(variables, records, host)


def fleet_try_plan(facts: Any, model: Any, host: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{"plan": plan, "error": None}`` or ``{"plan": None, "error": "<host>: ..."}``; never raises."""
    return fp.try_plan(facts, model, host, options)


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
