"""Compare ``vllm-fleet predict`` with public ``vllm bench serve`` results.

A result is one JSON object per line (``tests/fixtures/calibration/perf/bench_serve_results.jsonl``): the source
URL, the vLLM version and GPU it ran on, the model (a directory with its real config.json, relative to the results
file), the layout and flags (``engine_args``), the workload in bench-serve terms and the published figures
(``observed``: any of the ``--save-result`` keys). A workload may list each request's ``lengths`` ([prompt, output]
pairs, the ``input_lens`` / ``output_lens`` of a ``--save-result`` file): they are replayed as sent.
``vllm-fleet calibrate-perf FILE`` plans each case with the
planner (the version it names when verified, else the newest verified one, with a note), predicts it and prints
the relative error per metric, the median and worst absolute error per metric, and per GPU.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import (
    load_model,
    plan_for_model,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.perf import (
    RESULT_KEYS,
    PerfError,
    Workload,
    predict_for_plan,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import DEFAULT_VLLM_VERSION

#: The metrics the summary reports (the ones public results print most often).
SUMMARY_METRICS = ("request_throughput", "output_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms",
                   "median_ttft_ms", "median_tpot_ms", "p99_ttft_ms", "p99_tpot_ms", "mean_itl_ms")


@dataclass
class PerfCase:
    """One public result against its prediction."""

    case_id: str
    gpu: str
    model: str
    moe: bool
    observed: dict[str, float]
    predicted: dict[str, float] = field(default_factory=dict)
    errors: dict[str, float] = field(default_factory=dict)  # (predicted - observed) / observed
    note: str = ""


def workload_of(record: dict[str, Any]) -> Workload:
    """The bench-serve workload a result names."""
    w = record["workload"]
    rate = w.get("request_rate", "inf")
    pairs = tuple((int(p), int(o)) for p, o in w.get("lengths") or ())
    return Workload(dataset=w.get("dataset_name", "random"), input_len=int(w.get("random_input_len", 1024)),
                    output_len=int(w.get("random_output_len", 128)), num_prompts=int(w["num_prompts"]),
                    max_concurrency=w.get("max_concurrency"),
                    request_rate=math.inf if str(rate) == "inf" else float(rate), pairs=pairs)


def evaluate_record(record: dict[str, Any], base: Path) -> PerfCase:
    """Plan and predict one result; errors per metric the result publishes."""
    model_dir = str((base / record["model"]).resolve())
    config, _total, _dir = load_model(model_dir)
    case = PerfCase(record["id"], record["gpu_key"], record["model_name"], bool(record.get("moe")),
                    {k: float(v) for k, v in record["observed"].items() if k in RESULT_KEYS})
    facts = {"gpu_name": record["gpu_name"], "gpu_count": int(record["gpu_count"])}
    try:
        plan = plan_for_model(facts, model_dir, vllm_version=record.get("plan_vllm_version", DEFAULT_VLLM_VERSION),
                              engine_args=dict(record.get("engine_args") or {}))
        case.predicted = predict_for_plan(config, plan, workload_of(record))
    except (PerfError, ValueError) as exc:
        case.note = f"not predicted: {exc}"
        return case
    for key, obs in case.observed.items():
        if obs > 0:
            case.errors[key] = (case.predicted[key] - obs) / obs
    return case


def evaluate_file(path: str) -> list[PerfCase]:
    """Every result of a JSON lines file."""
    base = Path(path).resolve().parent
    with open(path, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    return [evaluate_record(r, base) for r in records]


def _stats(values: list[float]) -> dict[str, float]:
    absolute = [abs(v) for v in values]
    worst = max(values, key=abs)
    return {"n": len(values), "median_abs": round(statistics.median(absolute), 3), "worst": round(worst, 3)}


def report(cases: list[PerfCase]) -> dict[str, Any]:
    """Median and worst error per metric, overall and per GPU, and the cases."""
    by_metric = {m: _stats([c.errors[m] for c in cases if m in c.errors])
                 for m in SUMMARY_METRICS if any(m in c.errors for c in cases)}
    by_gpu: dict[str, dict[str, Any]] = {}
    for gpu in sorted({c.gpu for c in cases}):
        mine = [c for c in cases if c.gpu == gpu]
        by_gpu[gpu] = {m: _stats([c.errors[m] for c in mine if m in c.errors])
                       for m in SUMMARY_METRICS if any(m in c.errors for c in mine)}
    return {"by_metric": by_metric, "by_gpu": by_gpu,
            "cases": [{"id": c.case_id, "gpu": c.gpu, "model": c.model, "moe": c.moe, "observed": c.observed,
                       "predicted": {k: c.predicted[k] for k in c.observed if k in c.predicted},
                       "errors": {k: round(v, 3) for k, v in c.errors.items()}, "note": c.note} for c in cases]}


def format_report(cases: list[PerfCase]) -> str:
    """The table ``vllm-fleet calibrate-perf`` prints."""
    lines = [f"{'case':44} {'gpu':9} " + " ".join(f"{m[:14]:>14}" for m in SUMMARY_METRICS[:5])]
    for c in cases:
        cells = [f"{c.errors[m]:+14.1%}" if m in c.errors else f"{'-':>14}" for m in SUMMARY_METRICS[:5]]
        lines.append(f"{c.case_id[:44]:44} {c.gpu[:9]:9} " + " ".join(cells) + (f"  {c.note}" if c.note else ""))
    rep = report(cases)
    lines += ["", "error per metric (median |error|, worst):"]
    for metric, s in rep["by_metric"].items():
        lines.append(f"  {metric:24} n={s['n']:<3} median {s['median_abs']:.1%}  worst {s['worst']:+.1%}")
    lines += ["", "per GPU:"]
    for gpu, metrics in rep["by_gpu"].items():
        parts = [f"{m} {s['median_abs']:.0%}/{s['worst']:+.0%}" for m, s in metrics.items() if m in SUMMARY_METRICS[:5]]
        lines.append(f"  {gpu:10} " + ", ".join(parts))
    return "\n".join(lines)
