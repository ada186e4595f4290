"""The thin preflight filter wrappers (plugins/filter/preflight.py): registered, input errors."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter import preflight as ff
from ansible_collections.vllm_fleet.fleet.plugins.filter import preflight as fr


def test_filters_are_registered() -> None:
    assert {"fleet_sku_groups", "fleet_preflight", "fleet_replan", "fleet_host_files", "fleet_report_files",
            "fleet_with_feedback"} <= set(ff.FilterModule().filters())
    assert {"fleet_report_html", "fleet_report_markdown", "fleet_summary"} <= set(fr.FilterModule().filters())


def test_report_filters_reject_non_dicts() -> None:
    with pytest.raises(AnsibleFilterError):
        fr.fleet_report_html(["x"])
    with pytest.raises(AnsibleFilterError):
        fr.fleet_report_markdown(["x"])
    with pytest.raises(AnsibleFilterError):
        fr.fleet_summary(["x"])
