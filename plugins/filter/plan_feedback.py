DOCUMENTATION = r"""
name: vllm_plan_feedback
short_description: Compare what vLLM logged at start-up with the plan's KV-cache prediction
description:
  - Parses each replica's container log (last start-up) for the KV-cache size, the maximum concurrency and
    the KV-cache memory, compares them with the plan's C(prediction), and returns the per-host report
    (C(plugins/plugin_utils/observe/feedback.py)). C(status) is C(warn) when an error exceeds C(tolerance).
  - Also provides C(vllm_plan_feedback_line), the one-line summary of a report.
options:
  _input:
    description: >-
      The replicas' logs: either C([{replica, log}]) or the C(results) of a looped
      C(ansible.builtin.command) (each with C(item.container), C(stdout), C(stderr)).
    type: list
    elements: dict
    required: true
  plan:
    description: The plan (CONTRACT 2) the replicas were started from.
    type: dict
    required: true
  host:
    description: Inventory host name recorded in the report.
    type: str
    required: true
  tolerance:
    description: Relative error above which the report warns.
    type: float
    default: 0.05
"""

EXAMPLES = r"""
- name: Compare with the plan
  ansible.builtin.set_fact:
    feedback: "{{ logs.results | vllm_fleet.fleet.vllm_plan_feedback(vllm_serve_plan, host=inventory_hostname) }}"
"""

RETURN = r"""
_value:
  description: "{host, status (ok/warn/missing), worst_error, tolerance, replicas: [...], warnings: [...]}"
  type: dict
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import feedback as pf


def _entries(logs: Any) -> list[dict[str, str]]:
    if not isinstance(logs, list):
        raise AnsibleFilterError("vllm_plan_feedback: input must be a list")
    out = []
    for entry in logs:
        if not isinstance(entry, Mapping):
            raise AnsibleFilterError(f"vllm_plan_feedback: entry is not a dict: {entry!r:.80}")
        if "replica" in entry and "log" in entry:
            out.append({"replica": str(entry["replica"]), "log": str(entry["log"])})
            continue
        item = entry.get("item")
        name = item.get("container") if isinstance(item, Mapping) else item
        if not name:
            raise AnsibleFilterError("vllm_plan_feedback: a command result without item.container")
        # vLLM logs to stderr; docker logs keeps the two streams apart.
        text = "\n".join(str(entry.get(k) or "") for k in ("stdout", "stderr"))
        out.append({"replica": str(name), "log": text})
    return out


def vllm_plan_feedback(logs: Any, plan: Any, host: str, tolerance: float = pf.DEFAULT_TOLERANCE) -> dict[str, Any]:
    try:
        return pf.host_feedback(host, plan, _entries(logs), float(tolerance))
    except (pf.FeedbackError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_plan_feedback: {exc}") from exc


def vllm_plan_feedback_line(report: Any) -> str:
    if not isinstance(report, Mapping):
        raise AnsibleFilterError("vllm_plan_feedback_line: input must be a report dict")
    return pf.summary_line(report)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"vllm_plan_feedback": vllm_plan_feedback, "vllm_plan_feedback_line": vllm_plan_feedback_line}
