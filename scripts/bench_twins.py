"""Compare the hosts of one benchmark run: measured / predicted per host, and hosts well below identical twins.

Reads the JSON objects ``scripts/bench_report.py`` printed (one file per host endpoint, or one JSON list), groups
the hosts by SKU group and plan hash, flags a host whose output throughput is more than ``--threshold`` below the
median of its twins at a shared concurrency level, with the GPU facts in which it differs
(``plugins/plugin_utils/observe/predicted.py``), and writes ``fleet.json`` and ``fleet.md`` into ``--out``.
Prints the result as one JSON object; exit status 0 (outliers are findings, not errors).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import predicted as pv  # noqa: E402


def _records(paths: list[Path]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in paths:
        data = json.loads(path.read_text())
        out.extend(data if isinstance(data, list) else [data])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reports", type=Path, nargs="+", help="bench_report.py outputs (JSON object or list per file)")
    p.add_argument("--out", type=Path, required=True, help="directory for fleet.json and fleet.md")
    p.add_argument("--threshold", type=float, default=pv.DEFAULT_OUTLIER_THRESHOLD)
    p.add_argument("--max-noise", type=float, default=pv.DEFAULT_MAX_NOISE,
                   help="most of a gap the repeats' own spread may excuse (as benchmark_max_noise)")
    args = p.parse_args(argv)
    try:
        records = _records(args.reports)
        result = pv.outliers(records, args.threshold, args.max_noise)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"bench_twins: {exc}", file=sys.stderr)
        return 2
    per_host = {str(r["host"]): {"ratio": r.get("ratio") or {}, "why": r.get("prediction_note") or ""}
                for r in records}
    result["measured_vs_predicted"] = per_host
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fleet.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (args.out / "fleet.md").write_text(pv.render_markdown(result, per_host))
    result["report"] = str(args.out / "fleet.md")
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
