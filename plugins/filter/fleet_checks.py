"""Thin filter wrappers over plugins/plugin_utils/preflight/checks.py (the logic and its tests live there)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_checks
short_description: Preflight validation of vllm-fleet inventories, facts and fleet plans
version_added: 0.1.0
description:
  - C(fleet_host_errors) validates one host's C(vllm_*) variables and SKU group membership.
  - C(fleet_facts_errors) validates a GPU facts dict (CONTRACT 1) and that it matches the host's SKU group.
  - C(fleet_errors) validates the planned fleet (multi-host TP/PP groups, ports, image CUDA vs driver).
  - C(fleet_multinode_errors) validates multi-node groups from facts alone (before planning).
  - C(fleet_sku_groups) returns the C(gpu_*)/C(cpu_*) groups among a host's groups.
  - C(fleet_plan_options) builds the keyword options for C(vllm_fleet.fleet.vllm_plan) from the variables.
  - C(fleet_try_plan) calls C(vllm_fleet.fleet.vllm_plan) and returns C({plan, error}) instead of raising.
  - C(fleet_port_map) keeps the variables that hold ports (name -> value, undefined ones dropped).
  - Every filter returns a list of one-line messages; an empty list means all good.
options:
  _input:
    description: The variables dict, facts dict, fleet records dict or group list.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Validate this host's inputs
  ansible.builtin.assert:
    that: __errors | length == 0
    fail_msg: "{{ __errors | join('; ') }}"
  vars:
    __errors: "{{ my_vars | vllm_fleet.fleet.fleet_host_errors(inventory_hostname, group_names) }}"
"""

RETURN = r"""
_value:
  description: One-line error messages naming the host and what to change (empty when valid).
  type: list
  elements: str
"""

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import checks as fc


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
    """The IMAGE area's compatibility table decides whether any image runs on this driver and GPUs."""
    try:
        from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import compat as image_compat
    except ImportError:  # pragma: no cover - the image area is not installed
        return None
    gpus = facts.get("gpus") or []
    ccs = [str(g.get("compute_capability")) for g in gpus if g.get("compute_capability")]
    version = str(plan.get("vllm_version") or "")
    if not version:
        return None
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


def fleet_plan_options(variables: Mapping[str, Any], records: Mapping[str, Any] | None = None,
                       host: str = "") -> dict[str, Any]:
    """Keyword options for vllm_plan from the host's vllm_fleet_* variables.

    A host in a multi-node group gets ``policy.max_nodes`` = the group's size unless the policy sets it.
    """
    opts: dict[str, Any] = {}
    for key in ("profile", "vllm_version", "engine_args", "extra_args", "policy", "served_model_path"):
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
    """Call vllm_fleet.fleet.vllm_plan; return {"plan": plan, "error": None} or {"plan": None, "error": msg}.

    Preflight asserts on ``error`` so the message reads "<host>: <what to change>" instead of a traceback-like
    chain of template errors.
    """
    from ansible_collections.vllm_fleet.fleet.plugins.filter.vllm_plan import vllm_plan

    try:
        return {"plan": vllm_plan(facts, model, **dict(options or {})), "error": None}
    except AnsibleFilterError as exc:
        message = str(exc.message if hasattr(exc, "message") else exc)
        message = message.removeprefix("vllm_plan: ")
        return {"plan": None, "error": f"{host}: {message}"}
    except TypeError as exc:  # an option the planner does not take (a contract mismatch)
        return {"plan": None, "error": f"{host}: vllm_plan rejected the options: {exc}"}


def fleet_port_map(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None and v != ""}


def fleet_port_variables(value: Any = None) -> list[str]:
    """The variable names that hold ports: the given list, or the default one when unset."""
    if value is None:
        return list(fc.DEFAULT_PORT_VARIABLES)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise AnsibleFilterError("vllm_fleet_port_variables must be a list of variable names")
    return list(value)


def fleet_sku_groups(group_names: Sequence[str]) -> list[str]:
    return fc.sku_groups([str(g) for g in group_names])


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "fleet_host_errors": fleet_host_errors,
            "fleet_facts_errors": fleet_facts_errors,
            "fleet_errors": fleet_errors,
            "fleet_sku_groups": fleet_sku_groups,
            "fleet_multinode_errors": fleet_multinode_errors,
            "fleet_plan_options": fleet_plan_options,
            "fleet_port_map": fleet_port_map,
            "fleet_try_plan": fleet_try_plan,
            "fleet_port_variables": fleet_port_variables,
        }
