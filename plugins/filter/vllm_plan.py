DOCUMENTATION = r"""
name: vllm_plan
short_description: Compute vLLM launch parameters from a host's GPU facts and the model's config
version_added: 0.1.0
description:
  - Wraps the pure planning core C(plugins/plugin_utils/planner/core.py). Every computed flag carries a
    one-line reason; values the user sets win and are validated.
  - Bad input raises an error whose one-line message says what to change, so preflight stops before any
    host changes.
options:
  _input:
    description: GPU facts as returned by M(vllm_fleet.fleet.gpu_facts) (C(ansible_facts['gpu'])). No GPUs plans the CPU lane.
    type: dict
    required: true
  model:
    description: Model directory or C(config.json) path on the controller, or the config as a dict.
    type: raw
    required: true
  profile:
    description: Workload profile, C(chat), C(batch), C(long-context), or a dict with prompt_tokens, output_tokens, p99_latency_ms.
    type: raw
    default: chat
  vllm_version:
    description: Target vLLM version; rules are keyed by it.
    type: str
    default: 0.32.0
  engine_args:
    description: vLLM engine arguments the user set (snake_case or dash form). Null values are ignored.
    type: dict
    default: {}
  policy:
    description: Headroom and fleet shape (safety_margin_mib, co_located_mib, instances_per_gpu, max_nodes, cpu_kv_cache_gib, offline).
    type: dict
    default: {}
  extra_args:
    description: Free-form vLLM arguments to validate (removed flags are refused).
    type: list
    elements: str
    default: []
  served_model_path:
    description: Path of the model as the vLLM server sees it (e.g. inside the container); defaults to the model directory.
    type: str
"""

EXAMPLES = r"""
- name: Plan vLLM for this host
  ansible.builtin.set_fact:
    __vllm_serve_plan: >-
      {{ ansible_facts['gpu'] | vllm_fleet.fleet.vllm_plan('/srv/models/llama-3.1-8b',
         profile='chat', engine_args={'max_model_len': 32768}) }}
"""

RETURN = r"""
_value:
  description: The plan (docs/architecture.md, contract 2).
  type: dict
  contains:
    engine_args: {description: vLLM flag names without dashes mapped to values., type: dict}
    cli_args: {description: The same as an argument list for vllm serve., type: list, elements: str}
    memory_gib: {description: Per-GPU memory breakdown in GiB., type: dict}
    prediction: {description: KV-cache tokens, blocks, block size, max concurrency, max_model_len., type: dict}
    reasons: {description: One line per decision., type: dict}
    warnings: {description: Things to know about this plan., type: list, elements: str}
"""

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
