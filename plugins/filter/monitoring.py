DOCUMENTATION = r"""
name: monitoring_alert_rules
short_description: Prometheus alert rules for vLLM endpoints (real vLLM 0.32 and DCGM series)
description:
  - Builds the rule file dict from thresholds; render it with C(to_nice_yaml).
  - Also provides C(monitoring_scrape_configs), C(monitoring_targets), C(monitoring_dashboard) and the
    auto-tune helpers C(autotune_grid), C(autotune_choose), C(autotune_overrides).
options:
  _input:
    description: Thresholds (keys of C(DEFAULT_THRESHOLDS) in C(plugin_utils/observe/monitoring.py)).
    type: dict
    required: true
  runbook_base_url:
    description: Base URL or path of docs/runbooks; each alert gets C(runbook_url=<base>/<file>.md).
    type: str
    default: docs/runbooks
"""

EXAMPLES = r"""
- name: Render the rules
  ansible.builtin.copy:
    content: "{{ {'kv_cache_usage_max': 0.9} | vllm_fleet.fleet.monitoring_alert_rules(runbook_base_url='https://x/docs/runbooks') | to_nice_yaml }}"
    dest: /etc/prometheus/rules/vllm-fleet.rules.yml
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The rule file (C(groups) list) as a dict.
  type: dict
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import autotune as at
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import monitoring as mr


def monitoring_alert_rules(
    thresholds: Mapping[str, Any], runbook_base_url: str = "docs/runbooks"
) -> dict[str, Any]:
    try:
        return mr.alert_rules(dict(thresholds or {}), runbook_base_url)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def monitoring_targets(
    hosts: list[str],
    hostvars: Mapping[str, Any],
    port_var: str = "vllm_serve_port",
    ports_var: str = "vllm_serve_ports",
    default_port: int = 8000,
    plan_var: str = "vllm_serve_plan",
) -> list[dict[str, Any]]:
    """Per-host target descriptions from the inventory (address, vLLM ports, node exporter, DCGM)."""
    result = []
    for host in hosts:
        hv = hostvars[host]
        ports = hv.get(ports_var)
        if not ports:
            # vllm_serve runs plan.parallel.replicas servers on PORT, PORT+1, ... (roles/vllm_serve).
            base = int(hv.get(port_var) or default_port)
            plan = hv.get(plan_var) or {}
            replicas = int((plan.get("parallel") or {}).get("replicas") or 1)
            ports = list(range(base, base + replicas))
        dcgm = hv.get("monitoring_dcgm_enabled")
        if dcgm is None:
            facts = hv.get("ansible_facts") or {}
            gpu = facts.get("gpu") or {}
            dcgm = bool(gpu.get("gpu_count") or 0)
        result.append(
            {
                "host": host,
                "address": hv.get("ansible_host") or host,
                "vllm_ports": [int(p) for p in ports],
                "node_exporter": bool(hv.get("monitoring_node_exporter_enabled", True)),
                "dcgm": bool(dcgm),
            }
        )
    return result


def monitoring_scrape_configs(
    targets: list[dict[str, Any]],
    node_exporter_port: int = 9100,
    dcgm_exporter_port: int = 9400,
    scrape_interval: str = "15s",
) -> list[dict[str, Any]]:
    try:
        return mr.scrape_configs(targets, node_exporter_port, dcgm_exporter_port, scrape_interval)
    except (ValueError, KeyError) as exc:
        raise AnsibleFilterError(f"monitoring targets: {exc}") from exc


def monitoring_dashboard(title: str, datasource_uid: str = "prometheus") -> dict[str, Any]:
    return mr.dashboard(title, datasource_uid)


def autotune_grid(max_num_seqs: list[int], max_num_batched_tokens: list[int]) -> list[dict[str, int]]:
    try:
        return at.trial_grid(max_num_seqs, max_num_batched_tokens)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def autotune_choose(
    trials: list[dict[str, Any]], p99_target_ms: float, latency_metric: str = "p99_ttft_ms"
) -> dict[str, Any]:
    try:
        return at.choose(trials, float(p99_target_ms), latency_metric)
    except (ValueError, KeyError) as exc:
        raise AnsibleFilterError(f"autotune: {exc}") from exc


def autotune_overrides(decision: dict[str, Any], current: dict[str, Any] | None = None) -> dict[str, Any]:
    return at.group_overrides(decision, current)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "monitoring_alert_rules": monitoring_alert_rules,
            "monitoring_targets": monitoring_targets,
            "monitoring_scrape_configs": monitoring_scrape_configs,
            "monitoring_dashboard": monitoring_dashboard,
            "autotune_grid": autotune_grid,
            "autotune_choose": autotune_choose,
            "autotune_overrides": autotune_overrides,
        }
