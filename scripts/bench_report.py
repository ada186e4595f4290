"""Store a benchmark run in the baseline library, compare it with the baseline, write plots and a summary.

Library layout (``--library``, default ``artifacts/baselines``)::

    <host>/<model>/<image>/<plan hash>/baseline.json        the summary runs are compared with
    <host>/<model>/<image>/<plan hash>/runs/<run id>/       raw results, summary.json, summary.md, *.png

The first run of a key becomes its baseline; later runs are compared with it (``--update-baseline``
replaces it after the comparison). ``--compare-to HOST/MODEL/IMAGE/PLAN`` compares with another key's
baseline instead (e.g. vLLM defaults vs the planned flags). Prints the result as one JSON object;
exit status 0 even on a regression (``"regressed": true``) unless ``--fail-on-regression``.

With ``--model-config`` (the model directory or config.json on the controller) and the benchmark's
``--input-len`` / ``--output-len`` / ``--prompts-per-level``, each level is stored beside the performance model's
prediction for the same workload and the ratio measured / predicted (``observe/predicted.py``); a CPU-lane plan is
measured only, with the reason. ``--sku-group`` and ``--gpus-json`` (the host's gpu_facts GPUs) go into the output
for ``scripts/bench_twins.py``, which compares identical hosts.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import bench as bc  # noqa: E402
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import predicted as pv  # noqa: E402


def _plots(summary: dict[str, dict[str, float]], out: Path, title: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted(summary, key=int)
    x = [int(level) for level in levels]
    written = []
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(x, [summary[level]["output_throughput"] for level in levels], marker="o")
    ax.set(xlabel="concurrency", ylabel="output tokens/s", title=f"Throughput · {title}")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=100)
    plt.close(fig)
    written.append(str(out / "throughput.png"))
    fig, ax = plt.subplots(figsize=(6, 4))
    for metric, style in (
        ("p50_ttft_ms", "o--"),
        ("p99_ttft_ms", "o-"),
        ("p50_e2el_ms", "s--"),
        ("p99_e2el_ms", "s-"),
    ):
        ys = [summary[level].get(metric) for level in levels]
        if all(y is not None for y in ys):
            ax.plot(x, ys, style, label=bc.METRICS[metric][1])
    ax.set(xlabel="concurrency", ylabel="ms", title=f"Latency · {title}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=100)
    plt.close(fig)
    written.append(str(out / "latency.png"))
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, required=True, help="directory of `vllm bench serve` result JSONs")
    p.add_argument("--library", type=Path, default=ROOT / "artifacts" / "baselines")
    p.add_argument("--host", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--image", required=True)
    p.add_argument("--plan-json", type=Path, help="the host's plan (CONTRACT 2); its hash keys the baseline")
    p.add_argument("--plan-hash", help="use this hash instead of hashing --plan-json")
    p.add_argument("--threshold", type=float, default=bc.DEFAULT_THRESHOLD)
    p.add_argument("--max-noise", type=float, default=bc.DEFAULT_MAX_NOISE)
    p.add_argument("--run-id", default=time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    p.add_argument("--compare-to", help="another baseline to compare with: its directory under --library (HOST/MODEL/IMAGE/PLAN as stored)")
    p.add_argument("--update-baseline", action="store_true")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--fail-on-regression", action="store_true")
    p.add_argument("--command", default="", help="benchmark command line, quoted in the summary")
    p.add_argument("--model-config", default="", help="the model directory or config.json (for the prediction)")
    p.add_argument("--input-len", type=int, default=0, help="the benchmark's prompt tokens (for the prediction)")
    p.add_argument("--output-len", type=int, default=0, help="the benchmark's output tokens (for the prediction)")
    p.add_argument("--prompts-per-level", type=int, default=0, help="as bench_serve.py: 0 = 4 x concurrency, >= 8")
    p.add_argument("--sku-group", default="", help="the host's SKU group (identical hosts are compared)")
    p.add_argument("--gpus-json", type=Path, help="the host's gpu_facts GPU list (clocks, ECC, ...) as JSON")
    args = p.parse_args(argv)

    plan_doc: Any = json.loads(args.plan_json.read_text()) if args.plan_json else None
    plan: Any = args.plan_hash if args.plan_hash is not None else plan_doc
    key = bc.baseline_key(args.host, args.model, args.image, plan)
    key_dir = args.library.joinpath(*bc.key_path(key))
    run_dir = key_dir / "runs" / args.run_id
    files = sorted(args.results.glob("*.json"))
    if not files:
        print(f"bench_report: no *.json results in {args.results}", file=sys.stderr)
        return 2
    try:
        summary = bc.summarize(json.loads(f.read_text()) for f in files)
    except (bc.BenchError, json.JSONDecodeError) as exc:
        print(f"bench_report: {exc}", file=sys.stderr)
        return 2
    run_dir.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy2(f, run_dir / f.name)

    if args.compare_to:
        parts = args.compare_to.split("/")
        ref_file = args.library.joinpath(*[bc.slug(x) for x in parts]) / "baseline.json"
    else:
        ref_file = key_dir / "baseline.json"
    comparison = None
    if ref_file.is_file():
        comparison = bc.compare(
            json.loads(ref_file.read_text())["summary"], summary, args.threshold, args.max_noise
        )
    elif args.compare_to:
        print(f"bench_report: no baseline at {ref_file}", file=sys.stderr)
        return 2
    predicted, why = _prediction(args, plan_doc, summary)
    ratio = pv.ratios(summary, predicted) if predicted else {}
    record = {"key": key, "run_id": args.run_id, "summary": summary, "command": args.command,
              "predicted": predicted, "ratio": ratio, "prediction_note": why}
    became_baseline = not (key_dir / "baseline.json").is_file() or args.update_baseline
    if became_baseline:
        (key_dir / "baseline.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    (run_dir / "summary.json").write_text(
        json.dumps({**record, "comparison": comparison}, indent=2, sort_keys=True) + "\n"
    )
    markdown = bc.render_markdown(key, summary, comparison, args.command.split() if args.command else None)
    markdown += _ratio_markdown(ratio, why)
    (run_dir / "summary.md").write_text(markdown)
    plots = [] if args.no_plots else _plots(summary, run_dir, f"{args.host} {args.model}")
    out = {
        "key": key,
        "run_dir": str(run_dir),
        "baseline": str(ref_file),
        "became_baseline": became_baseline,
        "summary": summary,
        "regressed": bool(comparison and comparison["regressed"]),
        "regressions": comparison["regressions"] if comparison else [],
        "plots": plots,
        "host": args.host,
        "sku_group": args.sku_group,
        "plan_hash": key["plan_hash"],
        "gpus": json.loads(args.gpus_json.read_text()) if args.gpus_json else [],
        "predicted": predicted,
        "ratio": ratio,
        "prediction_note": why,
    }
    print(json.dumps(out, sort_keys=True))
    return 1 if (args.fail_on_regression and out["regressed"]) else 0


def _prediction(args: argparse.Namespace, plan: Any, summary: dict[str, dict[str, float]]) -> tuple[dict[str, Any], str]:
    """The performance model's figures per level for this run's workload, or why there are none."""
    if not isinstance(plan, dict) or not plan:
        return {}, "no prediction: no plan given (--plan-json)"
    if not args.input_len or not args.output_len:
        return {}, "no prediction: --input-len and --output-len not given"
    config = None
    if args.model_config:
        from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import (
            ModelFilesError,
            load_model,
        )

        try:
            config, _total, _dir = load_model(args.model_config)
        except (ModelFilesError, OSError, ValueError) as exc:
            return {}, f"no prediction: {exc}"
    return pv.predict_levels(config, plan, args.input_len, args.output_len, [int(x) for x in summary],
                             args.prompts_per_level, summary)


def _ratio_markdown(ratio: dict[str, dict[str, float]], why: str) -> str:
    """The summary's "measured / predicted" section."""
    lines = ["", "## Measured / predicted", ""]
    if why:
        lines += [why, ""]
    if not ratio:
        return "\n".join(lines)
    lines += ["| concurrency | output tok/s | P50 TTFT | P99 TTFT | P50 E2E |", "|---:|---:|---:|---:|---:|"]
    for level, cells in sorted(ratio.items(), key=lambda kv: int(kv[0])):
        lines.append(f"| {level} | " + " | ".join(f"{cells[m]:.2f}" if m in cells else "-" for m in (
            "output_throughput", "p50_ttft_ms", "p99_ttft_ms", "p50_e2el_ms")) + " |")
    return "\n".join([*lines, ""])


if __name__ == "__main__":
    sys.exit(main())
