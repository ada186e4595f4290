# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Planner filters: thin wrappers over plugins/plugin_utils/planner/ (docs: one <filter>.yml each)."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import (
    ModelFilesError,
    plan_for_model,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import DEFAULT_VLLM_VERSION


def vllm_plan(
    facts: Any,
    model: Any,
    profile: Any = "chat",
    vllm_version: str = DEFAULT_VLLM_VERSION,
    engine_args: Any = None,
    policy: Any = None,
    extra_args: Any = None,
    served_model_path: Any = None,
    draft_model: Any = None,
) -> dict[str, Any]:
    """Plan one host; errors become AnsibleFilterError with the planner's one-line message."""
    try:
        return plan_for_model(facts, model, profile=profile, vllm_version=vllm_version, engine_args=engine_args,
                              policy=policy, extra_args=extra_args, served_model_path=served_model_path,
                              draft_model=draft_model)
    except (PlanError, ModelFilesError) as exc:
        raise AnsibleFilterError(f"vllm_plan: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"vllm_plan": vllm_plan}
