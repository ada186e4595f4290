# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Observe filters (monitoring, auto-tune, plan feedback): thin wrappers over plugins/plugin_utils/observe/."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import autotune as at
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import feedback as pf
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import learned as ln
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import monitoring as mr
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import startup_failure as sf
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import upstream_dashboards as ud
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import correction as corr
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.inputs import resolve_profile

# ---- monitoring -----------------------------------------------------------------------------------


def monitoring_alert_rules(
    thresholds: Mapping[str, Any], runbook_base_url: str = "docs/runbooks"
) -> dict[str, Any]:
    try:
        return mr.alert_rules(dict(thresholds or {}), runbook_base_url)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


# The vLLM versions the fleet's launch records run (for vLLM's own dashboards): the function itself.
monitoring_vllm_versions = ud.fleet_versions

# Per-host target descriptions from the inventory (address, vLLM ports, node exporter, DCGM): no adaptation
# needed, so the filter is the function itself.
monitoring_targets = mr.targets_from_inventory
# The balancers' exporter targets (each vllm_lb host's stats port).
monitoring_balancer_targets = mr.balancer_targets


def monitoring_scrape_configs(
    targets: list[dict[str, Any]],
    node_exporter_port: int = mr.NODE_EXPORTER_PORT,
    dcgm_exporter_port: int = mr.DCGM_EXPORTER_PORT,
    scrape_interval: str = "15s",
    balancers: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    try:
        return mr.scrape_configs(targets, node_exporter_port, dcgm_exporter_port, scrape_interval, balancers)
    except (ValueError, KeyError) as exc:
        raise AnsibleFilterError(f"monitoring targets: {exc}") from exc


def monitoring_exporter_listen(address: str, port: int) -> dict[str, str]:
    return mr.exporter_listen(str(address), int(port))


def monitoring_dashboard(title: str, datasource_uid: str = "prometheus") -> dict[str, Any]:
    return mr.dashboard(title, datasource_uid)


# ---- auto-tune ------------------------------------------------------------------------------------

def autotune_grid(max_num_seqs: list[int], max_num_batched_tokens: list[int]) -> list[dict[str, int]]:
    try:
        return at.trial_grid(max_num_seqs, max_num_batched_tokens)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def autotune_choose(
    trials: list[dict[str, Any]],
    p99_target_ms: float,
    latency_metric: str = "p99_ttft_ms",
    min_gain: float = 0.0,
) -> dict[str, Any]:
    try:
        return at.choose(trials, float(p99_target_ms), latency_metric, float(min_gain))
    except (ValueError, KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"autotune_choose: {exc}") from exc


def autotune_overrides(decision: dict[str, Any], current: dict[str, Any] | None = None) -> dict[str, Any]:
    try:
        return at.group_overrides(decision, current)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"autotune_overrides: give an autotune_choose decision ({exc})") from exc


# ---- plan feedback --------------------------------------------------------------------------------

def vllm_plan_feedback(logs: Any, plan: Any, host: str, tolerance: float = pf.DEFAULT_TOLERANCE,
                       planned_with: Any = None) -> dict[str, Any]:
    try:
        return pf.host_feedback(host, plan, pf.log_entries(logs), float(tolerance),
                                planned_with if isinstance(planned_with, Mapping) else None)
    except (pf.FeedbackError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_plan_feedback: {exc}") from exc


def vllm_plan_feedback_line(report: Any) -> str:
    if not isinstance(report, Mapping):
        raise AnsibleFilterError("vllm_plan_feedback_line: input must be a report dict")
    return pf.summary_line(report)


# ---- failed starts ------------------------------------------------------------------------------


def vllm_startup_diagnosis(log: Any, engine_args: Any, plan: Any, planning_input: Any = None, pins: Any = None,
                           autocorrect: Any = True) -> dict[str, Any]:
    """Why a replica failed to start (its log) and the re-plan within the policy (docs in vllm_startup_diagnosis.yml)."""
    if not isinstance(log, str) or not isinstance(engine_args, Mapping) or not isinstance(plan, Mapping):
        raise AnsibleFilterError("vllm_startup_diagnosis expects the container log (a string), the replica's "
                                 "engine_args and its plan (dicts)")
    item = dict(planning_input) if isinstance(planning_input, Mapping) else {}
    options = item.get("options") or {}
    try:
        profile = resolve_profile(options.get("profile"))
    except PlanError as exc:
        raise AnsibleFilterError(f"vllm_startup_diagnosis: {exc}") from exc
    failure = sf.classify(log)
    memory = plan.get("memory_gib") or {}
    lane = "cpu" if plan.get("device") == "cpu" else "gpu"
    if pins is None:  # the planning input's engine_args are the user's pins (vllm_fleet_engine_args)...
        pins = dict(options.get("engine_args") or {})
        # ...but a value learned on an identical host (preflight/fleet.py with_learned) is not the user's: it may be
        # corrected again
        learned = {str(k).replace("_", "-") for k in ((item.get("learned") or {}).get("changes") or {})}
        pins = {k: v for k, v in pins.items() if str(k).replace("_", "-") not in learned}
    pinned = [str(k).replace("_", "-") for k in pins] if isinstance(pins, Mapping) else []
    proposal = corr.propose(failure, dict(engine_args), request_tokens=profile.request_tokens,
                            min_concurrency=profile.min_concurrency, pinned=pinned, lane=lane,
                            gpu_total_gib=memory.get("total") if lane == "gpu" else None,
                            autocorrect=bool(autocorrect),
                            multinode_group=str(item["multinode_group"]) if item.get("multinode_group") else None)
    key = ln.key_for_input(item) if item else None
    return {"failure": failure, "correction": proposal, "key": key}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "monitoring_alert_rules": monitoring_alert_rules,
            "monitoring_targets": monitoring_targets,
            "monitoring_vllm_versions": monitoring_vllm_versions,
            "monitoring_scrape_configs": monitoring_scrape_configs,
            "monitoring_balancer_targets": monitoring_balancer_targets,
            "monitoring_dashboard": monitoring_dashboard,
            "monitoring_exporter_listen": monitoring_exporter_listen,
            "autotune_grid": autotune_grid,
            "autotune_choose": autotune_choose,
            "autotune_overrides": autotune_overrides,
            "vllm_plan_feedback": vllm_plan_feedback,
            "vllm_plan_feedback_line": vllm_plan_feedback_line,
            "vllm_startup_diagnosis": vllm_startup_diagnosis,
        }
