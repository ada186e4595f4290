"""Store a benchmark run in the baseline library, compare it with the baseline, write plots and a summary.

Library layout (``--library``, default ``artifacts/baselines``)::

    <host>/<model>/<image>/<plan hash>/baseline.json        the summary runs are compared with
    <host>/<model>/<image>/<plan hash>/runs/<run id>/       raw results, summary.json, summary.md, *.png

The first run of a key becomes its baseline; later runs are compared with it (``--update-baseline``
replaces it after the comparison). ``--compare-to HOST/MODEL/IMAGE/PLAN`` compares with another key's
baseline instead (e.g. vLLM defaults vs the planned flags). Prints the result as one JSON object;
exit status 0 even on a regression (``"regressed": true``) unless ``--fail-on-regression``.
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
    args = p.parse_args(argv)

    plan: Any = args.plan_hash
    if plan is None and args.plan_json:
        plan = json.loads(args.plan_json.read_text())
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
    record = {"key": key, "run_id": args.run_id, "summary": summary, "command": args.command}
    became_baseline = not (key_dir / "baseline.json").is_file() or args.update_baseline
    if became_baseline:
        (key_dir / "baseline.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    (run_dir / "summary.json").write_text(
        json.dumps({**record, "comparison": comparison}, indent=2, sort_keys=True) + "\n"
    )
    markdown = bc.render_markdown(key, summary, comparison, args.command.split() if args.command else None)
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
    }
    print(json.dumps(out, sort_keys=True))
    return 1 if (args.fail_on_regression and out["regressed"]) else 0


if __name__ == "__main__":
    sys.exit(main())
