"""Auto-tune: the trial grid and the choice of the winner (pure Python, stdlib only, no I/O).

A trial is one (max_num_seqs, max_num_batched_tokens) pair served on the canary and measured with the
serving benchmark at one concurrency level. The winner is the trial with the highest output throughput whose
P99 latency meets the target; when no trial meets it, the one with the lowest P99 is reported with
``met_target: false`` and no override is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


class AutotuneError(ValueError):
    """Unusable auto-tune input; the message says what to change."""


def trial_grid(max_num_seqs: Sequence[int], max_num_batched_tokens: Sequence[int]) -> list[dict[str, int]]:
    """Every pair vLLM accepts: batched tokens >= seqs (vLLM's scheduler check). Chunked prefill is on
    by default in 0.32, so batched tokens below ``max_model_len`` are allowed."""
    if not max_num_seqs or not max_num_batched_tokens:
        raise AutotuneError("auto-tune needs at least one max_num_seqs and one max_num_batched_tokens value")
    if any(int(v) <= 0 for v in [*max_num_seqs, *max_num_batched_tokens]):
        raise AutotuneError("auto-tune values must be positive integers")
    grid = []
    for seqs in sorted({int(v) for v in max_num_seqs}):
        for tokens in sorted({int(v) for v in max_num_batched_tokens}):
            if tokens < seqs:
                continue
            grid.append({"max_num_seqs": seqs, "max_num_batched_tokens": tokens})
    if not grid:
        raise AutotuneError("no valid pair: max_num_batched_tokens must be >= max_num_seqs")
    return grid


def choose(
    trials: Iterable[Mapping[str, Any]], p99_target_ms: float, latency_metric: str = "p99_ttft_ms"
) -> dict[str, Any]:
    """``trials``: ``{"engine": {...}, "result": <vllm bench serve result>}``. Returns the decision."""
    rows = []
    for trial in trials:
        result = trial["result"]
        if int(result.get("completed", 0)) <= 0 or latency_metric not in result:
            rows.append({**trial, "ok": False, "reason": "no completed requests"})
            continue
        meets = float(result[latency_metric]) <= p99_target_ms
        rows.append({**trial, "ok": meets, "reason": "" if meets else f"{latency_metric} above target"})
    if not rows:
        raise AutotuneError("no trials")
    valid = [r for r in rows if r["ok"]]
    if valid:
        best = max(valid, key=lambda r: float(r["result"]["output_throughput"]))
    else:
        measured = [r for r in rows if latency_metric in r["result"]]
        if not measured:
            raise AutotuneError("no trial completed a request")
        best = min(measured, key=lambda r: float(r["result"][latency_metric]))
    return {
        "met_target": bool(valid),
        "best": {
            "engine": dict(best["engine"]),
            "output_throughput": float(best["result"]["output_throughput"]),
            latency_metric: float(best["result"][latency_metric]),
        },
        "p99_target_ms": p99_target_ms,
        "latency_metric": latency_metric,
        "trials": [
            {
                "engine": dict(r["engine"]),
                "output_throughput": float(r["result"].get("output_throughput", 0.0)),
                latency_metric: float(r["result"].get(latency_metric, float("nan"))),
                "meets_target": r["ok"],
            }
            for r in rows
        ],
    }


def group_overrides(
    decision: Mapping[str, Any], current_overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The group_vars content to write: the winner merged over the current engine overrides (nothing new
    when the target was not met)."""
    merged = dict(current_overrides or {})
    if decision["met_target"]:
        merged.update(decision["best"]["engine"])
    return {"vllm_fleet_engine_args": merged}
