"""`promtool check rules` and `promtool test rules` on the rules the role renders (real promtool 2.42)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import monitoring as mr  # noqa: E402

pytestmark = pytest.mark.integration
FIXTURES = ROOT / "tests" / "fixtures" / "monitoring"


def _role_thresholds() -> dict[str, Any]:
    """The thresholds exactly as the role passes them (defaults/main.yml monitoring_alert_*)."""
    defaults = yaml.safe_load((ROOT / "roles" / "monitoring" / "defaults" / "main.yml").read_text())
    prefix = "monitoring_alert_"
    return {k[len(prefix) :]: v for k, v in defaults.items() if k.startswith(prefix)}


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: run scripts/testbed/60-prometheus.sh (make testbed)")
    return path


def _render(tmp_path: Path, thresholds: dict[str, Any]) -> Path:
    rules = tmp_path / "vllm-fleet.rules.yml"
    rules.write_text(yaml.safe_dump(mr.alert_rules(thresholds, "docs/runbooks"), sort_keys=False, width=1000))
    shutil.copy(FIXTURES / "alerts.test.yml", tmp_path / "alerts.test.yml")
    return rules


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def test_role_defaults_cover_every_threshold() -> None:
    assert set(_role_thresholds()) == set(mr.DEFAULT_THRESHOLDS)
    assert _role_thresholds() == mr.DEFAULT_THRESHOLDS


def test_rules_pass_promtool_check_and_unit_tests(tmp_path: Path, promtool: str) -> None:
    rules = _render(tmp_path, _role_thresholds())
    check = _run(promtool, "check", "rules", str(rules))
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(mr.RUNBOOKS)} rules found" in check.stdout
    test = _run(promtool, "test", "rules", str(tmp_path / "alerts.test.yml"))
    assert test.returncode == 0, test.stdout + test.stderr
    # Every alert has at least one firing and one quiet case in the test file.
    cases = yaml.safe_load((FIXTURES / "alerts.test.yml").read_text())["tests"]
    firing = {a["alertname"] for c in cases for a in c["alert_rule_test"] if a["exp_alerts"]}
    quiet = {a["alertname"] for c in cases for a in c["alert_rule_test"] if not a["exp_alerts"]}
    assert firing == quiet == set(mr.RUNBOOKS)


@pytest.mark.parametrize(
    ("overrides", "alert"),
    [
        ({"kv_cache_usage_max": 0.995}, "VllmKvCacheSaturated"),
        ({"gpu_util_min_percent": 20}, "VllmGpuUtilisationLow"),
        ({"ttft_max_seconds": 1.0}, "VllmChatTtftP99High"),
        ({"throughput_swing_ratio": 0.5}, "VllmThroughputSwing"),
        ({"waiting_requests_max": 30}, "VllmWaitingQueueGrowing"),
    ],
)
def test_the_unit_tests_catch_a_changed_threshold(
    tmp_path: Path, promtool: str, overrides: dict[str, Any], alert: str
) -> None:
    """The promtool tests are not vacuous: a looser threshold makes the firing case fail."""
    _render(tmp_path, {**_role_thresholds(), **overrides})
    test = _run(promtool, "test", "rules", str(tmp_path / "alerts.test.yml"))
    assert test.returncode != 0
    assert f"alertname: {alert}," in test.stdout + test.stderr
