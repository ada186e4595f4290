"""Benchmark baseline library: keys, summaries, regression comparison and the Markdown report.

Pure Python, standard library only, no I/O. Inputs are the JSON results ``vllm bench serve`` writes with
``--save-result --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99`` (fields
``output_throughput``, ``request_throughput``, ``p50_ttft_ms``, ``p99_ttft_ms``, ``p99_e2el_ms``, ...,
``max_concurrency``). A run is a list of such results, one per concurrency level (or several per level:
repeats, summarised by their median).

Regression rule (issue 7): at any concurrency level present in both runs, output throughput fell by more
than ``threshold`` (15 %) or a P99 latency (TTFT, end-to-end) rose by more than ``threshold``. With
repeated runs per level the limit is ``max(threshold, min(spread of the baseline + spread of the current
run, max_noise))`` (spread = (max - min) / median of the repeats): on a shared or noisy host a P99 over a
few dozen requests can move more than 15 % between identical runs, and such a change is noise, not a
regression — but never more than ``max_noise`` (50 %) is excused. A P99 needs at least 100 requests to be more
than the slowest one or two: where a level completed fewer (in either run), its P50 is gated in place of each P99
(``TAIL_FALLBACK``), and the finding says so.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

DEFAULT_THRESHOLD = 0.15
# Noise never excuses a change larger than this (a halved throughput is a finding on any host).
DEFAULT_MAX_NOISE = 0.5
# Metric -> direction ("higher" is better or "lower" is better) and label in the report.
METRICS: dict[str, tuple[str, str]] = {
    "output_throughput": ("higher", "output tok/s"),
    "request_throughput": ("higher", "req/s"),
    "p50_ttft_ms": ("lower", "P50 TTFT ms"),
    "p99_ttft_ms": ("lower", "P99 TTFT ms"),
    "p50_e2el_ms": ("lower", "P50 E2E ms"),
    "p99_e2el_ms": ("lower", "P99 E2E ms"),
    "p99_itl_ms": ("lower", "P99 ITL ms"),
}
# The metrics the regression rule looks at.
GATED: tuple[str, ...] = ("output_throughput", "p99_ttft_ms", "p99_e2el_ms")
# A P99 over fewer requests than this is the slowest request or two (one stall on a shared host moves it several-fold):
# the level's P50 is gated in its place.
MIN_TAIL_SAMPLES = 100
TAIL_FALLBACK: dict[str, str] = {"p99_ttft_ms": "p50_ttft_ms", "p99_e2el_ms": "p50_e2el_ms"}


class BenchError(ValueError):
    """Unusable benchmark input; the message says what is wrong."""


def plan_hash(plan: Mapping[str, Any] | None) -> str:
    """Short stable hash of what was deployed: the plan's vLLM version, CLI arguments and environment.

    Only the parts that change the server's behaviour are hashed (not ``reasons`` or ``warnings`` texts),
    so a re-worded explanation does not start a new baseline. No plan → ``"noplan"``.
    """
    if not plan:
        return "noplan"
    material = {
        "vllm_version": plan.get("vllm_version"),
        "device": plan.get("device"),
        "cli_args": list(plan.get("cli_args") or []),
        "engine_args": dict(plan.get("engine_args") or {}),
        "env": dict(plan.get("env") or {}),
    }
    digest = hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:12]


def slug(value: str) -> str:
    """A file-system safe path component."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "_", value.strip()).strip("._")
    return text or "unknown"


def baseline_key(host: str, model: str, image: str, plan: Mapping[str, Any] | str | None) -> dict[str, str]:
    """The library key: host, model, image and plan hash (a plan dict is hashed; a string is a hash)."""
    phash = plan if isinstance(plan, str) else plan_hash(plan)
    return {"host": host, "model": model, "image": image, "plan_hash": phash}


def key_path(key: Mapping[str, str]) -> list[str]:
    """Path components of a key inside the library (file-system safe)."""
    return [slug(key["host"]), slug(key["model"]), slug(key["image"]), slug(key["plan_hash"])]


def summarize(results: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per concurrency level (as a string key) the median of each metric over the repeats."""
    grouped: dict[int, list[Mapping[str, Any]]] = {}
    for result in results:
        if "max_concurrency" not in result or result["max_concurrency"] is None:
            raise BenchError("benchmark result without max_concurrency (run with --max-concurrency)")
        if int(result.get("completed", 0)) <= 0:
            raise BenchError(f"benchmark at concurrency {result['max_concurrency']} completed no request")
        grouped.setdefault(int(result["max_concurrency"]), []).append(result)
    if not grouped:
        raise BenchError("no benchmark results")
    summary: dict[str, dict[str, float]] = {}
    for level in sorted(grouped):
        runs = grouped[level]
        row: dict[str, float] = {"repeats": float(len(runs)),
                                 "completed": float(statistics.median(int(r["completed"]) for r in runs))}
        for metric in METRICS:
            values = [float(r[metric]) for r in runs if r.get(metric) is not None]
            if values:
                middle = statistics.median(values)
                row[metric] = middle
                if len(values) > 1 and middle > 0:
                    row[f"{metric}_spread"] = (max(values) - min(values)) / middle
        if "output_throughput" not in row:
            raise BenchError(f"benchmark at concurrency {level} has no output_throughput")
        summary[str(level)] = row
    return summary


def _gated_metric(metric: str, before: Mapping[str, float], after: Mapping[str, float]) -> tuple[str, str]:
    """The metric compared for ``metric`` at one level, and why when it is not ``metric`` itself: a P99 over fewer
    than MIN_TAIL_SAMPLES requests (in either run; a summary without ``completed`` keeps its P99) gives way to the
    P50."""
    fallback = TAIL_FALLBACK.get(metric)
    if fallback is None or fallback not in before or fallback not in after:
        return metric, ""
    requests = min(float(before.get("completed", MIN_TAIL_SAMPLES)), float(after.get("completed", MIN_TAIL_SAMPLES)))
    if requests >= MIN_TAIL_SAMPLES:
        return metric, ""
    return fallback, (f"{METRICS[metric][1]} over {requests:.0f} requests is the slowest one or two: "
                      f"{METRICS[fallback][1]} gated instead (P99 needs {MIN_TAIL_SAMPLES})")


def compare(
    baseline: Mapping[str, Mapping[str, float]],
    current: Mapping[str, Mapping[str, float]],
    threshold: float = DEFAULT_THRESHOLD,
    max_noise: float = DEFAULT_MAX_NOISE,
) -> dict[str, Any]:
    """Compare two summaries; ``regressed`` is true when any gated metric crossed its limit."""
    if not 0 < threshold < 1:
        raise BenchError(f"threshold must be between 0 and 1, got {threshold}")
    levels = sorted(set(baseline) & set(current), key=int)
    findings: list[dict[str, Any]] = []
    for level in levels:
        for wanted in GATED:
            metric, note = _gated_metric(wanted, baseline[level], current[level])
            if metric not in baseline[level] or metric not in current[level]:
                continue
            before = float(baseline[level][metric])
            after = float(current[level][metric])
            if before <= 0:
                continue
            change = after / before - 1
            direction, label = METRICS[metric]
            worse = -change if direction == "higher" else change
            # Repeats measure the run-to-run noise: a change inside the two runs' own spread is not a
            # finding, whatever its size. Without repeats the plain threshold applies.
            noise = float(baseline[level].get(f"{metric}_spread", 0.0)) + float(
                current[level].get(f"{metric}_spread", 0.0)
            )
            limit = max(threshold, min(noise, max_noise))
            findings.append(
                {
                    "concurrency": int(level),
                    "metric": metric,
                    "label": label,
                    "baseline": before,
                    "current": after,
                    "change": change,
                    "noise": noise,
                    "limit": limit,
                    "regressed": worse > limit,
                    **({"note": note} if note else {}),
                }
            )
    return {
        "threshold": threshold,
        "compared_levels": [int(level) for level in levels],
        "missing_levels": sorted(int(level) for level in set(baseline) ^ set(current)),
        "findings": findings,
        "regressions": [f for f in findings if f["regressed"]],
        "regressed": any(f["regressed"] for f in findings),
    }


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:,.2f}"


def render_markdown(
    key: Mapping[str, str],
    current: Mapping[str, Mapping[str, float]],
    comparison: Mapping[str, Any] | None,
    command: Sequence[str] | None = None,
) -> str:
    """The run summary as Markdown (results table, comparison, how to reproduce)."""
    lines = [
        f"# Benchmark: {key['host']} · {key['model']}",
        "",
        f"- image: `{key['image']}`",
        f"- plan hash: `{key['plan_hash']}`",
        "",
        "| concurrency | " + " | ".join(label for _key, label in METRICS.values()) + " |",
        "|---:|" + "---:|" * len(METRICS),
    ]
    for level, row in sorted(current.items(), key=lambda kv: int(kv[0])):
        lines.append(f"| {level} | " + " | ".join(_fmt(row.get(m)) for m in METRICS) + " |")
    lines.append("")
    if comparison is None:
        lines.append("No baseline for this key yet: this run is now the baseline.")
    else:
        pct = round(float(comparison["threshold"]) * 100)
        verdict = "**REGRESSION**" if comparison["regressed"] else "no regression"
        lines += [f"## Against the baseline: {verdict} (threshold {pct} %)", ""]
        lines += [
            "| concurrency | metric | baseline | now | change | limit | flagged |",
            "|---:|---|---:|---:|---:|---:|---|",
        ]
        for f in comparison["findings"]:
            flag = "yes" if f["regressed"] else ""
            lines.append(
                f"| {f['concurrency']} | {f['label']} | {_fmt(f['baseline'])} | {_fmt(f['current'])} "
                f"| {f['change'] * 100:+.1f} % | {f['limit'] * 100:.0f} % | {flag} |"
            )
        notes = sorted({f"concurrency {f['concurrency']}: {f['note']}" for f in comparison["findings"] if f.get("note")})
        if notes:
            lines += ["", *(f"- {note}" for note in notes)]
        if comparison["missing_levels"]:
            lines.append("")
            lines.append(f"Levels in only one of the runs (not compared): {comparison['missing_levels']}")
    if command:
        lines += ["", "Reproduce one level:", "", "```", " ".join(command), "```"]
    return "\n".join(lines) + "\n"
