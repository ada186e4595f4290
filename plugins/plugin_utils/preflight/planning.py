"""Preflight's planning step: the planner's options from a host's variables, and its answer as data.

``playbooks/preflight.yml`` plans every host with :func:`try_plan` and asserts on its ``error``, so a refusal
reads "<host>: <what to change>" instead of a chain of template errors. Pure apart from reading the model's
files (through ``planner/model_files.py`` plan_for_model).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import (
    ModelFilesError,
    plan_for_model,
)

#: The keyword options of the vllm_plan filter (what :func:`plan_options` builds and :func:`try_plan` accepts).
PLAN_OPTIONS = ("profile", "vllm_version", "engine_args", "policy", "extra_args", "served_model_path", "draft_model")


def plan_options(variables: Mapping[str, Any], records: Mapping[str, Any] | None = None,
                 host: str = "") -> dict[str, Any]:
    """Keyword options for vllm_plan from the host's ``vllm_fleet_*`` variables (unset ones left out).

    A host in a multi-node group gets ``policy.max_nodes`` = the group's size unless the policy sets it.
    """
    opts: dict[str, Any] = {}
    for key in PLAN_OPTIONS:
        value = variables.get(f"vllm_fleet_{key}")
        if value is not None:
            opts[key] = value
    group = (records or {}).get(host, {}).get("multinode_group") if records else None
    if group:
        size = sum(1 for rec in (records or {}).values() if rec.get("multinode_group") == group)
        opts = with_group_size(opts, size)
    return opts


def with_group_size(options: Mapping[str, Any], size: int) -> dict[str, Any]:
    """``options`` with ``policy.max_nodes`` = the multi-node group's ``size`` unless the policy sets it."""
    opts = dict(options)
    policy = dict(opts.get("policy") or {})
    policy.setdefault("max_nodes", size)
    opts["policy"] = policy
    return opts


def try_plan(facts: Any, model: Any, host: str, options: Mapping[str, Any] | None = None,
             observed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The vllm_plan filter's answer as data: ``{"plan": plan, "error": None}`` or ``{"plan": None, "error": msg}``.

    ``msg`` is one line, "<host>: <what to change>"; unknown options and options of the wrong type are refused
    the same way. Nothing raises for input the planner refuses.
    """
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(PLAN_OPTIONS))
    if unknown:
        return {"plan": None, "error": f"{host}: vllm_plan rejected the options: unknown option(s) "
                                       f"{', '.join(map(str, unknown))} (known: {', '.join(PLAN_OPTIONS)})"}
    try:
        return {"plan": plan_for_model(facts, model, **opts, observed=observed), "error": None}
    except (PlanError, ModelFilesError) as exc:
        return {"plan": None, "error": f"{host}: {exc}"}
    except TypeError as exc:  # an option of the wrong type (a contract mismatch)
        return {"plan": None, "error": f"{host}: vllm_plan rejected the options: {exc}"}
