"""VLLM_CPU_KVCACHE_SPACE in vllm_fleet_env is planned as vLLM's CPU build applies it (issue 30, item 4).

vLLM 0.32.0 ``vllm/platforms/cpu.py:323-327`` (0.33.0: ``:340-344``): when the variable is set and not empty, the CPU platform sets
``cache_config.kv_cache_memory_bytes = int(value) * GiB_bytes`` after argument parsing, over
``--kv-cache-memory-bytes`` (docs/notes/cpu-kv-sizing.md section 1; the cited lines are checked below against the
release sources when they are on disk). Preflight turns it into the plan's pin, refuses a second pin beside it and a
value ``int()`` cannot read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.fleet import with_cpu_kv_space
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import (
    fleet_launch,
    host_input,
)

ROOT = Path(__file__).resolve().parents[3]
CPU = json.loads((ROOT / "tests" / "fixtures" / "planner" / "cpu_host.json").read_text())
H200 = json.loads((ROOT / "inventories" / "example" / "recorded_facts" / "h200-01.json").read_text())
MODEL = str(ROOT / "inventories" / "example" / "models" / "llama-3.1-8b")
SRC = ROOT / ".cache" / "vllm-src"


def _input(env: dict[str, str], facts: dict[str, Any] = CPU, **variables: Any) -> dict[str, Any]:
    base = {"vllm_fleet_model": MODEL, "vllm_fleet_vllm_version": "0.32.0", "vllm_fleet_api_key": "sk-unit-12345678",
            "vllm_fleet_env": env, **variables}
    return host_input(base, "c1", sku="cpu_lane" if not facts.get("gpus") else "gpu_h200", facts=facts,
                      address="c1", model_dir=MODEL)


def test_the_variable_is_the_plans_kv_pool_and_the_reason_says_why() -> None:
    inputs, errors = with_cpu_kv_space({"c1": _input({"VLLM_CPU_KVCACHE_SPACE": "3"})})
    assert errors == []
    result = fleet_launch(inputs, check_image=False)
    assert result["errors"] == [], result["errors"]
    plan = result["records"]["c1"]["plan"]
    assert plan["engine_args"]["kv-cache-memory-bytes"] == 3 << 30
    assert plan["reasons"]["kv-cache-memory-bytes"].startswith("3 GiB from VLLM_CPU_KVCACHE_SPACE=3 in vllm_fleet_env")
    assert "vllm/platforms/cpu.py:323-327" in plan["reasons"]["kv-cache-memory-bytes"]
    assert plan["prediction"]["kv_cache_gib"] == 3.0
    # Without it the plan sizes the pool itself (another size): the variable is what changed it.
    plain = fleet_launch(with_cpu_kv_space({"c1": _input({})})[0], check_image=False)["records"]["c1"]["plan"]
    assert plain["engine_args"]["kv-cache-memory-bytes"] != 3 << 30


@pytest.mark.parametrize(("env", "pins", "words"), [
    ({"VLLM_CPU_KVCACHE_SPACE": "1"}, {"kv_cache_memory_bytes": 1 << 30}, "both set the CPU KV pool"),
    ({"VLLM_CPU_KVCACHE_SPACE": "0.5"}, {}, "is not an integer: vLLM reads it with int()"),
    ({"VLLM_CPU_KVCACHE_SPACE": "0"}, {}, "leaves vLLM no KV cache"),
])
def test_what_vllm_would_not_take_is_refused(env: dict[str, str], pins: dict[str, Any], words: str) -> None:
    _inputs, errors = with_cpu_kv_space({"c1": _input(env, vllm_fleet_engine_args=pins)})
    assert len(errors) == 1 and errors[0].startswith("c1: vllm_fleet_env VLLM_CPU_KVCACHE_SPACE") and words in errors[0]


def test_a_gpu_host_and_an_empty_value_are_left_alone() -> None:
    for item in (_input({"VLLM_CPU_KVCACHE_SPACE": "1"}, facts=H200), _input({"VLLM_CPU_KVCACHE_SPACE": ""})):
        inputs, errors = with_cpu_kv_space({"c1": item})
        assert errors == [] and inputs["c1"] is item


@pytest.mark.parametrize(("version", "first"), [("0.32.0", 323), ("0.33.0", 340)])
def test_the_cited_lines_are_vllms(version: str, first: int) -> None:
    source = SRC / version / "vllm" / "platforms" / "cpu.py"
    if not source.exists():
        if os.environ.get("VLLM_FLEET_REQUIRE_VLLM_SRC"):
            pytest.fail(f"{source} is missing: run `make vllm-src`")
        pytest.skip(f"{source} is not on disk (make vllm-src)")
    lines = source.read_text().splitlines()[first - 1:first + 4]
    text = "\n".join(lines)
    assert 'env_key = "VLLM_CPU_KVCACHE_SPACE"' in text and "kv_cache_memory_bytes = kv_cache_space * GiB_bytes" in text
