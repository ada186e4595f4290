"""Preflight on the embedded local default (this machine, CPU lane, generated tiny model): real discovery
with gpu_facts, a CPU plan, and a re-run that changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


def test_local_default_plans_the_cpu_lane(tmp_path: Path, playbook: Callable[..., Any]) -> None:
    if not (ROOT / ".cache/tiny-model/config.json").is_file():
        pytest.fail(".cache/tiny-model is missing: run scripts/testbed/40-tiny-model.sh (make testbed)")
    first = playbook("playbooks/preflight.yml", ROOT / "inventories/local/hosts.yml", tmp_path)
    assert first.rc == 0, first.output[-6000:]
    plans = json.loads((tmp_path / "fleet-plan/plans.json").read_text())
    local = plans["localhost"]
    assert local["sku"] == "cpu_lane"
    assert local["facts"]["gpu_count"] == 0 and local["facts"]["host"]["cpu_cores"] >= 1
    assert local["plan"]["device"] == "cpu" and local["plan"]["prediction"]["kv_cache_tokens"] > 0
    assert local["plan"]["engine_args"]["model"] == str((ROOT / ".cache/tiny-model").resolve())
    second = playbook("playbooks/preflight.yml", ROOT / "inventories/local/hosts.yml", tmp_path)
    assert second.rc == 0 and second.recap["localhost"]["changed"] == 0, second.output[-4000:]
