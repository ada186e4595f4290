"""Auto-tune: the trial grid and the choice of the winner (pure Python, stdlib only, no I/O).

A trial is one (max_num_seqs, max_num_batched_tokens) pair served on the canary and measured with the
serving benchmark at one concurrency level, ``autotune_repeats`` times. As in bench.py, a trial counts by
the median of its repeats, and its spread, (max - min) / median of the output throughputs, is the run-to-run
noise.

Rule (issue 15):

1. A trial meets the target when every repeat completed requests and its median latency (P99 TTFT) is at
   most the target.
2. The candidate is the trial with the highest median output throughput among those that meet the target.
3. The current configuration (the trial with engine ``{}``: the planned configuration) stays unless the
   candidate's median throughput exceeds the current median × (1 + margin), where margin =
   max(noise, ``min_gain``) and noise = max(spread of the candidate, spread of the current configuration):
   a gain inside the repeats' own spread is noise, not a win. When the current configuration misses the
   target, or no trial has engine ``{}``, the candidate wins without this check.
4. When no trial meets the target, the lowest median latency is reported with ``met_target: false`` and no
   override is written.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe.bench import METRICS

# Per trial in the decision, after the engine and the two medians.
_TRIAL_FIELDS = ("spread", "repeats", "output_throughputs", "meets_target", "reason")


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


def median_spread(values: Sequence[float]) -> tuple[float, float]:
    """Median and spread, (max - min) / median (0 for one value or a median of 0), as bench.summarize."""
    if not values:
        return 0.0, 0.0
    middle = float(statistics.median(values))
    spread = (max(values) - min(values)) / middle if len(values) > 1 and middle > 0 else 0.0
    return middle, spread


def _number(result: Mapping[str, Any], key: str) -> float | None:
    value = result.get(key)
    return None if value is None else float(value)


def _repeats(trial: Mapping[str, Any], index: int) -> list[Mapping[str, Any]]:
    """The trial's benchmark results: ``results`` (one per repeat) or the older single ``result``."""
    if "results" in trial:
        results = trial["results"]
    elif "result" in trial:
        results = [trial["result"]]
    else:
        raise AutotuneError(f"trial {index} has no 'results' (a list of benchmark results, one per repeat)")
    if not isinstance(results, list | tuple) or not all(isinstance(r, Mapping) for r in results):
        raise AutotuneError(f"trial {index}: 'results' must be a list of benchmark results (dicts)")
    if not results:
        raise AutotuneError(f"trial {index} has no benchmark result: autotune_repeats must be >= 1")
    return list(results)


def _summarize(index: int, trial: Mapping[str, Any], target: float, metric: str) -> dict[str, Any]:
    """One trial's row: medians over the repeats, throughput spread, and whether it meets the target."""
    if not isinstance(trial, Mapping) or not isinstance(trial.get("engine"), Mapping):
        raise AutotuneError(f"trial {index} has no 'engine' dict (use {{}} for the current configuration)")
    results = _repeats(trial, index)
    throughputs = [_number(r, "output_throughput") or 0.0 for r in results]
    latencies = [v for v in (_number(r, metric) for r in results) if v is not None]
    failed = [
        k
        for k, r in enumerate(results)
        if int(r.get("completed") or 0) <= 0 or None in (_number(r, metric), _number(r, "output_throughput"))
    ]
    throughput, spread = median_spread(throughputs)
    latency = float(statistics.median(latencies)) if latencies else math.nan
    if failed:
        reason = f"repeat {failed[0] + 1} of {len(results)} completed no request or lacks {metric}"
    elif latency > target:
        reason = f"median {metric} {latency:,.1f} above the target {target:,.1f}"
    else:
        reason = ""
    return {
        "engine": dict(trial["engine"]),
        "output_throughput": throughput,
        metric: latency,
        "spread": spread,
        "repeats": len(results),
        "output_throughputs": throughputs,
        "measured": not failed,
        "meets_target": not reason,
        "reason": reason,
    }


def _public(row: Mapping[str, Any] | None, metric: str) -> dict[str, Any] | None:
    """A row as the decision reports it (engine, medians, spread, repeats)."""
    if row is None:
        return None
    return {
        "engine": dict(row["engine"]),
        "output_throughput": row["output_throughput"],
        metric: row[metric],
        "spread": row["spread"],
        "repeats": row["repeats"],
    }


def _pct(value: float) -> str:
    return f"{value * 100:.1f} %"


def _name(engine: Mapping[str, Any]) -> str:
    if not engine:
        return "the current configuration"
    return ", ".join(f"{key}={value}" for key, value in engine.items())


def _line(row: Mapping[str, Any], metric: str) -> str:
    """``1,234.5 output tok/s, P99 TTFT 300.0 ms (median of 3 repeats, throughput spread 4.0 %)``."""
    label = METRICS.get(metric, ("lower", metric))[1]
    value = row[metric]
    latency = f"{label[:-3]} {value:,.1f} ms" if label.endswith(" ms") else f"{label} {value:,.1f}"
    return (
        f"{row['output_throughput']:,.1f} output tok/s, {latency} "
        f"(median of {row['repeats']} repeats, throughput spread {_pct(row['spread'])})"
    )


def choose(
    trials: Iterable[Mapping[str, Any]],
    p99_target_ms: float,
    latency_metric: str = "p99_ttft_ms",
    min_gain: float = 0.0,
) -> dict[str, Any]:
    """``trials``: ``{"engine": {...}, "results": [<vllm bench serve result>, ...]}`` (or one ``result``).
    Returns the decision (see the module docstring for the rule)."""
    if math.isnan(min_gain) or min_gain < 0:
        raise AutotuneError(f"min_gain must be >= 0 (a fraction: 0.05 is 5 %), got {min_gain}")
    rows = [_summarize(i, t, float(p99_target_ms), latency_metric) for i, t in enumerate(trials)]
    if not rows:
        raise AutotuneError("no trials")
    current = next((r for r in rows if not r["engine"]), None)
    valid = [r for r in rows if r["meets_target"]]
    candidate = max(valid, key=lambda r: r["output_throughput"]) if valid else None  # first wins a tie
    kept = False
    if candidate is None:
        measured = [r for r in rows if r["measured"]]
        if not measured:
            raise AutotuneError("no trial completed requests in every repeat: check the canary serves")
        best = min(measured, key=lambda r: r[latency_metric])
        noise = max(best["spread"], current["spread"] if current and current["measured"] else 0.0)
        reason = (
            f"no trial met the target ({latency_metric} <= {p99_target_ms:,.1f}); the lowest median, "
            f"{best[latency_metric]:,.1f}, is {_name(best['engine'])}'s: overrides unchanged"
        )
    else:
        best = candidate
        noise = max(candidate["spread"], current["spread"] if current and current["measured"] else 0.0)
        margin = max(noise, min_gain)
        if noise >= min_gain:
            margin_text = f"the noise {_pct(noise)} (spread of the repeats)"
        else:
            margin_text = f"min_gain {_pct(min_gain)} (noise {_pct(noise)})"
        if candidate is current:
            kept = True
            reason = (
                f"the current configuration has the highest median output throughput "
                f"({candidate['output_throughput']:,.1f} tok/s) of the trials that meet the target"
            )
        elif current is None:
            reason = (
                f"{_name(candidate['engine'])} is the fastest trial that meets the target "
                "(no trial with engine {} to compare with)"
            )
        elif not current["meets_target"]:
            reason = (
                f"the current configuration misses the target ({current['reason']}); "
                f"{_name(candidate['engine'])} is the fastest trial that meets it"
            )
        else:
            before, after = current["output_throughput"], candidate["output_throughput"]
            gain = after / before - 1 if before > 0 else math.inf
            change = f"{gain * 100:+.1f} % median output tok/s ({before:,.1f} -> {after:,.1f})"
            if after > before * (1 + margin):
                reason = f"{_name(candidate['engine'])} wins: {change}, more than {margin_text}"
            else:
                kept = True
                best = current
                reason = (
                    f"the current configuration stays: {_name(candidate['engine'])} was faster by only "
                    f"{change}, within {margin_text}"
                )
    decision: dict[str, Any] = {
        "met_target": candidate is not None,
        "kept_current": kept,
        "reason": reason,
        "noise": noise,
        "min_gain": float(min_gain),
        "best": _public(best, latency_metric),
        "candidate": _public(candidate, latency_metric),
        "current": _public(current, latency_metric),
        "p99_target_ms": p99_target_ms,
        "latency_metric": latency_metric,
        "trials": [
            {key: row[key] for key in ("engine", "output_throughput", latency_metric, *_TRIAL_FIELDS)}
            for row in rows
        ],
    }
    decision["summary"] = summary_lines(decision)
    return decision


def summary_lines(decision: Mapping[str, Any]) -> list[str]:
    """Before / after / decision lines for the written group_vars header (no arithmetic left to Jinja)."""
    metric = decision["latency_metric"]
    current, best = decision.get("current"), decision["best"]
    before = f"before: {_line(current, metric)}" if current else "before: none (no trial with engine {})"
    changed = decision["met_target"] and not decision.get("kept_current", False) and bool(best["engine"])
    after = f"after:  {_line(best, metric)}, {_name(best['engine'])}" if changed else "after:  unchanged"
    return [before, after, f"decision: {decision['reason']}"]


def group_overrides(
    decision: Mapping[str, Any], current_overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The group_vars content to write: the winner merged over the current engine overrides (nothing new
    when the target was not met or the current configuration was kept)."""
    merged = dict(current_overrides or {})
    if decision["met_target"] and not decision.get("kept_current", False):
        merged.update(decision["best"]["engine"])
    return {"vllm_fleet_engine_args": merged}
