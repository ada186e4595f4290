"""Benchmark: plan N hosts' facts (varied SKUs, counts, models, profiles) and report hosts/second.

    .venv/bin/python scripts/bench_planner.py --hosts 10000

Target: under 1 second per 1,000 hosts on a 2-core machine. Pure computation, one process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan  # noqa: E402

MODELS = ["tiny-llama", "llama-3.1-8b", "qwen3-14b", "qwen3-30b-a3b", "llama-3.1-70b", "gpt-oss-20b",
          "deepseek-v2-lite", "qwen2.5-7b-awq", "gemma-3-27b"]
FACTS = ["h200x2", "h100x8_nvswitch", "a100_40gb_x4", "a100_80gb_x8", "l40s_x4_pcie", "l4_x1", "t4_x1"]
PROFILES = ["chat", "batch", "long-context"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3, help="runs; the median is reported")
    args = parser.parse_args()
    models = {m: json.loads((ROOT / "tests/fixtures/planner/models" / m / "config.json").read_text()) for m in MODELS}
    facts = {f: json.loads((ROOT / "tests/fixtures/gpu" / f / "expected_facts.json").read_text()) for f in FACTS}
    fleet = [(facts[FACTS[i % len(FACTS)]], models[MODELS[(i // len(FACTS)) % len(MODELS)]],
              PROFILES[i % len(PROFILES)]) for i in range(args.hosts)]
    timings = []
    refused = 0
    for _repeat in range(args.repeat):
        refused = 0
        start = time.perf_counter()
        for host_facts, config, profile in fleet:
            try:
                plan(host_facts, config, profile=profile)
            except PlanError:
                refused += 1
        timings.append(time.perf_counter() - start)
    best = statistics.median(timings)
    print(f"planned {args.hosts} hosts ({refused} refused with a message) in {best:.2f} s (median of {args.repeat}): "
          f"{args.hosts / best:,.0f} hosts/s, {best / args.hosts * 1000 * 1000:.0f} ms per 1,000 hosts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
