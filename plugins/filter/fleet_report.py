"""Thin filter wrappers over plugins/plugin_utils/preflight/report.py (pure rendering, tested there)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_report
short_description: Render the vllm-fleet plan report (HTML, Markdown, SVG memory bars, summary lines)
version_added: 0.1.0
description:
  - C(fleet_report_html) renders a self-contained HTML page, one row per host, inline SVG memory bars.
  - C(fleet_report_markdown) renders the same as Markdown, charts referenced as C(memory/<host>.svg).
  - C(fleet_memory_svg) renders one host's memory bar chart from its plan (CONTRACT 2).
  - C(fleet_summary) returns fixed-width summary lines for the end of the play.
options:
  _input:
    description: Fleet records (host -> {sku, facts, plan, multinode_group}), or a plan for C(fleet_memory_svg).
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Write the fleet plan page
  ansible.builtin.copy:
    content: "{{ records | vllm_fleet.fleet.fleet_report_html }}"
    dest: artifacts/fleet-plan/index.html
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The rendered text (a list of lines for C(fleet_summary)).
  type: raw
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import report as fr


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
            "fleet_report_html": fleet_report_html,
            "fleet_report_markdown": fleet_report_markdown,
            "fleet_memory_svg": fleet_memory_svg,
            "fleet_summary": fleet_summary,
        }
