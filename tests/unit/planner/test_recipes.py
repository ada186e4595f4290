"""Recipe-grade settings (planner/recipes.py): the FP8 KV cache policy knob, gated by the GPU's first-choice
attention backend, on the plan and the `vllm-fleet plan` CLI; the settings left to vLLM's defaults say so with the
release's source line; a user pin wins; the CPU lane is unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan

from .planner_data import GPU, MODELS, facts, model

H100X8 = facts("h100x8_nvswitch")
A100X8 = facts("a100_80gb_x8")
CPU = facts("cpu_only")


def _plan(host: dict[str, Any], name: str = "llama-3.1-8b", **kw: Any) -> dict[str, Any]:
    return plan(host, model(name), vllm_version=kw.pop("vllm_version", "0.32.0"), **kw)


def test_capacity_first_puts_the_kv_cache_in_fp8_on_hopper_and_doubles_its_tokens() -> None:
    """H100 (cc 9.0): FlashAttention 3 is the first choice and takes an fp8 KV cache; one byte per element instead
    of two holds about twice the tokens in about the same KV memory."""
    base = _plan(H100X8)
    fp8 = _plan(H100X8, policy={"kv_cache_policy": "capacity_first"})
    assert "kv-cache-dtype" not in base["engine_args"]
    assert fp8["engine_args"]["kv-cache-dtype"] == "fp8"
    assert fp8["reasons"]["kv-cache-dtype"].startswith("policy capacity_first: fp8 KV cache on FLASH_ATTN")
    assert "--kv-cache-dtype" in fp8["cli_args"] and fp8["cli_args"][fp8["cli_args"].index("--kv-cache-dtype") + 1] \
        == "fp8"
    ratio = fp8["prediction"]["kv_cache_tokens"] / base["prediction"]["kv_cache_tokens"]
    assert 1.8 < ratio < 2.2


def test_capacity_first_keeps_auto_where_fp8_would_change_the_backend() -> None:
    """A100 (cc 8.0): the first choice, FlashAttention 2, has no fp8 KV cache (vllm-facts row 6): auto kept, and the
    reason says why."""
    result = _plan(A100X8, policy={"kv_cache_policy": "capacity_first"})
    assert "kv-cache-dtype" not in result["engine_args"]
    assert "has no fp8 KV cache" in result["reasons"]["kv-cache-dtype"]


def test_a_pin_wins_over_the_policy_and_accuracy_first_is_the_default() -> None:
    pinned = _plan(H100X8, policy={"kv_cache_policy": "capacity_first"}, engine_args={"kv_cache_dtype": "auto"})
    assert pinned["engine_args"].get("kv-cache-dtype", "auto") == "auto"
    assert _plan(H100X8) == _plan(H100X8, policy={"kv_cache_policy": "accuracy_first"})
    with pytest.raises(PlanError, match="policy kv_cache_policy must be accuracy_first or capacity_first"):
        _plan(H100X8, policy={"kv_cache_policy": "fast"})


def test_cpu_lane_plans_are_unchanged_by_the_policy() -> None:
    assert _plan(CPU, "tiny-llama") == _plan(CPU, "tiny-llama", policy={"kv_cache_policy": "capacity_first"})


@pytest.mark.parametrize(("version", "line"), [("0.32.0", "vllm/envs.py:1619"), ("0.33.0", "vllm/envs.py:1600")])
def test_settings_left_to_vllm_name_the_release_source(version: str, line: str) -> None:
    result = _plan(H100X8, "qwen3-30b-a3b", vllm_version=version)
    reasons = result["reasons"]
    assert reasons["env:VLLM_USE_DEEP_GEMM"] == f"not set: defaults to 1 (vLLM {version} {line})"
    assert reasons["async-scheduling"].startswith("left on (vLLM's default")
    assert "VLLM_ATTENTION_BACKEND" in reasons["attention-backend"]
    assert "VLLM_USE_FLASHINFER_MOE_FP8" in reasons["moe-backend"]
    assert not any(k.startswith("VLLM_USE_FLASHINFER") for k in result["env"])


def test_the_cli_takes_the_policy() -> None:
    proc = subprocess.run([sys.executable, "-m", "vllm_fleet.cli", "plan", "--model", str(MODELS / "llama-3.1-8b"),
                           "--facts", str(GPU / "h100x8_nvswitch" / "expected_facts.json"), "--kv-cache-policy",
                           "capacity_first", "--json"], capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["engine_args"]["kv-cache-dtype"] == "fp8"
