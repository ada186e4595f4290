"""Compare the planner's predictions with real vLLM start-up observations.

An observation is one JSON object (one per line in a ``.jsonl`` file): the configuration vLLM was
started with and what it logged (``observed.kv_cache_tokens`` = "GPU KV cache size: N tokens").
``vllm-fleet calibrate OBSERVATIONS.jsonl --models MODEL_CONFIGS.json`` prints the error per case and the
summary figures the planner is held to (median absolute error, worst over-prediction) on the V1 engine.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.hardware import lookup_gpu
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import (
    parse_version,
    rules_for,
    scheduler_defaults,
)


@dataclass
class CaseResult:
    case_id: str
    engine: str
    version: str
    observed_tokens: int
    predicted_tokens: int | None
    error: float | None  # (predicted - observed) / observed
    observed_kv_gib: float | None
    predicted_kv_gib: float | None
    note: str = ""

    @property
    def current_engine(self) -> bool:
        """V1 and vLLM >= 0.10: the observations the accuracy targets apply to."""
        try:
            return self.engine == "v1" and parse_version(self.version) >= (0, 10, 0)
        except ValueError:
            return False


def _version(text: str) -> str:
    match = re.search(r"\d+\.\d+(\.\d+)?", text)
    if not match:
        raise ValueError(f"no version in {text!r}")
    return match.group(0)


def observation_inputs(obs: dict[str, Any], model_config: dict[str, Any]) -> dict[str, Any]:
    """Planner keyword arguments that reproduce one observation's configuration."""
    name = str(obs["gpu_name"]).split("(", maxsplit=1)[0].strip()
    sku = lookup_gpu(name)
    visible_mib = round(float(obs["gpu_mem_gib_total"]) * 1024)
    gpu = {"name": name, "memory_total_mib": visible_mib, "memory_free_mib": visible_mib, "memory_used_mib": 0,
           "compute_capability": sku.compute_capability if sku else "8.0"}
    count = int(obs.get("num_gpus") or obs.get("tp", 1) * obs.get("pp", 1))
    facts = {"gpus": [dict(gpu, index=i) for i in range(count)],
             "nvlink_domains": [list(range(count))] if count > 1 else []}
    engine_args: dict[str, Any] = {
        "tensor_parallel_size": obs.get("tp", 1),
        "gpu_memory_utilization": obs.get("gpu_memory_utilization"),
        "max_model_len": obs.get("max_model_len"),
    }
    if (obs.get("pp") or 1) > 1:
        engine_args["pipeline_parallel_size"] = obs["pp"]
    if obs.get("enforce_eager"):
        engine_args["enforce_eager"] = True
    text = " ".join(str(obs.get(k, "")) for k in ("notes",)) + " ".join(obs.get("evidence", []))
    offline = bool(re.search(r"\bLLM\(|[Oo]ffline LLM", text))
    # The observation ran vLLM's own scheduler defaults unless it says otherwise: reproduce them.
    version = _version(str(obs["vllm_version"]))
    if rules_for(version).engine == "v0":
        seqs, tokens = 256, max(int(obs.get("max_model_len") or 2048), 2048)
    else:
        defaults = scheduler_defaults(name, float(obs["gpu_mem_gib_total"]), 1, offline)
        seqs, tokens = defaults.max_num_seqs, defaults.max_num_batched_tokens
    engine_args["max_num_seqs"] = obs.get("max_num_seqs") or seqs
    engine_args["max_num_batched_tokens"] = tokens
    quant = str(obs.get("quantization") or "none")
    if "online" in quant and quant.startswith("fp8"):
        engine_args["quantization"] = "fp8"
    if obs.get("kv_cache_dtype") not in (None, "auto"):
        engine_args["kv_cache_dtype"] = obs["kv_cache_dtype"]
    return {
        "facts": facts,
        "model_config": model_config,
        "vllm_version": version,
        "engine_args": engine_args,
        "policy": {"offline": offline, "max_nodes": max(1, int(obs.get("pp") or 1))},
        "profile": "chat",
    }


def evaluate(observations: list[dict[str, Any]], model_configs: dict[str, dict[str, Any]]) -> list[CaseResult]:
    results: list[CaseResult] = []
    for obs in observations:
        observed = obs["observed"]
        tokens = int(observed.get("kv_cache_tokens") or 0)
        version = _version(str(obs["vllm_version"]))
        try:
            kwargs = observation_inputs(obs, model_configs[obs["model"]])
            result = plan(**kwargs)
            predicted = int(result["prediction"]["kv_cache_tokens"])
            results.append(CaseResult(obs["id"], str(obs.get("engine")), version, tokens, predicted,
                                      (predicted - tokens) / tokens if tokens else None,
                                      observed.get("kv_cache_gib"), result["prediction"]["kv_cache_gib"]))
        except (PlanError, KeyError) as exc:
            results.append(CaseResult(obs["id"], str(obs.get("engine")), version, tokens, None, None,
                                      observed.get("kv_cache_gib"), None, note=str(exc)))
    return results


def summary(results: list[CaseResult]) -> dict[str, Any]:
    """Median absolute error and worst over-prediction, on current-engine cases and on all."""
    def figures(rows: list[CaseResult]) -> dict[str, Any]:
        errors = [r.error for r in rows if r.error is not None]
        return {
            "cases": len(rows),
            "planned": len(errors),
            "median_abs_error": statistics.median(abs(e) for e in errors) if errors else None,
            "max_overprediction": max(errors) if errors else None,
            "max_abs_error": max(abs(e) for e in errors) if errors else None,
        }

    return {"current_engine": figures([r for r in results if r.current_engine]), "all": figures(results)}


def format_table(results: list[CaseResult]) -> str:
    lines = [f"{'case':46} {'eng':3} {'vLLM':8} {'observed':>10} {'predicted':>10} {'error':>8}  kv GiB obs/pred"]
    for r in results:
        err = f"{r.error * 100:+.1f}%" if r.error is not None else "n/a"
        pred = str(r.predicted_tokens) if r.predicted_tokens is not None else "-"
        kv = f"{r.observed_kv_gib}/{r.predicted_kv_gib}"
        lines.append(f"{r.case_id[:46]:46} {r.engine:3} {r.version:8} {r.observed_tokens:>10} {pred:>10} {err:>8}  {kv}"
                     + (f"  ({r.note})" if r.note else ""))
    s = summary(results)
    for key, label in (("current_engine", "V1, vLLM >= 0.10"), ("all", "all cases")):
        f = s[key]
        if f["median_abs_error"] is not None:
            lines.append(f"{label}: {f['planned']}/{f['cases']} planned, median |error| "
                         f"{f['median_abs_error'] * 100:.1f}%, worst over-prediction {f['max_overprediction'] * 100:+.1f}%")
    return "\n".join(lines)
