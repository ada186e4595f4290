# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Planner filters: thin wrappers over plugins/plugin_utils/planner/ (docs: one <filter>.yml each)."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import (
    ModelFilesError,
    load_model,
)


def vllm_plan(
    facts: Any,
    model: Any,
    profile: Any = "chat",
    vllm_version: str = "0.32.0",
    engine_args: Any = None,
    policy: Any = None,
    extra_args: Any = None,
    served_model_path: Any = None,
) -> dict[str, Any]:
    """Plan one host; errors become AnsibleFilterError with the planner's one-line message."""
    if not isinstance(facts, dict):
        raise AnsibleFilterError(f"vllm_plan: input must be the gpu_facts dict, not {type(facts).__name__}")
    try:
        if isinstance(model, dict):
            config, weights_total, model_dir = model, None, None
        else:
            config, weights_total, model_dir = load_model(str(model))
        result = plan(
            facts,
            config,
            profile=profile,
            vllm_version=str(vllm_version),
            engine_args=dict(engine_args or {}),
            policy=dict(policy or {}),
            weights_total_bytes=weights_total,
            model_path=str(served_model_path) if served_model_path else model_dir,
            extra_args=[str(a) for a in (extra_args or [])],
        )
    except (PlanError, ModelFilesError) as exc:
        raise AnsibleFilterError(f"vllm_plan: {exc}") from exc
    return result


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"vllm_plan": vllm_plan}
