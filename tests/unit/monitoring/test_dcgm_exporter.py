"""Every DCGM query of the fleet's alerts and dashboard reads a field the installed exporter really collects."""

from __future__ import annotations

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import dcgm_exporter as de
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import monitoring as mr


@pytest.mark.parametrize("release", sorted(de.DEFAULT_COUNTERS))
def test_alerts_and_fleet_dashboard_read_only_exported_dcgm_fields(release: str) -> None:
    alerts = mr.alert_expressions()
    panels = mr.dashboard_queries(mr.dashboard())
    assert any("DCGM_FI_" in e for e in alerts.values()), "no alert reads DCGM: the check would prove nothing"
    assert sum("DCGM_FI_" in e for e in panels) >= 2
    assert de.unexported(alerts, release) == {}
    assert de.unexported(panels, release) == {}


def test_a_field_outside_the_default_counters_is_refused() -> None:
    # DCGM_FI_DEV_POWER_VIOLATION is commented out in the exporter's default-counters.csv: no series on a real host.
    problems = de.unexported({"panel": "sum by (host) (rate(DCGM_FI_DEV_POWER_VIOLATION[5m]))"}, "4.8")
    assert problems == {"panel": ["DCGM_FI_DEV_POWER_VIOLATION"]}


def test_a_grouping_label_the_exporter_does_not_set_is_refused() -> None:
    # The exporter's label is modelName; gpu_model exists nowhere, so a `by (gpu_model)` panel shows one empty line.
    problems = de.unexported(["avg by (host, gpu_model) (DCGM_FI_DEV_GPU_UTIL)"], "4.8")
    assert problems == {"avg by (host, gpu_model) (DCGM_FI_DEV_GPU_UTIL)": ["label gpu_model"]}
    assert de.unexported(["avg by (host, modelName, gpu) (DCGM_FI_DEV_GPU_UTIL)"], "4.8") == {}


def test_queries_without_dcgm_are_not_judged_and_an_unknown_release_is_refused() -> None:
    assert de.unexported(["sum by (host, finished_reason) (rate(vllm:request_success_total[5m]))"], "4.8") == {}
    assert de.unexported(['up{job="DCGM_FI_NOT_A_SERIES"}'], "4.8") == {}  # a label value, not a series
    with pytest.raises(KeyError, match=r"known: 4\.7, 4\.8"):
        de.unexported([], "3.3")


def test_the_role_installs_the_packages_and_unit_of_the_table() -> None:
    from pathlib import Path

    import yaml  # type: ignore[import-untyped]

    root = Path(__file__).resolve().parents[3]
    defaults = yaml.safe_load((root / "roles" / "monitoring" / "defaults" / "main.yml").read_text())
    assert tuple(defaults["monitoring_dcgm_exporter_packages"]) == de.PACKAGES
    tasks = (root / "roles" / "monitoring" / "tasks" / "dcgm_exporter.yml").read_text()
    assert f"name: {de.SERVICE}" in tasks
