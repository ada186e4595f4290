"""scripts/bench_report.py: the baseline library on disk (synthetic `vllm bench serve` results, no server)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "bench_report.py"


def _results(directory: Path, tput: dict[int, float]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for level, value in tput.items():
        result = {"max_concurrency": level, "completed": 8, "output_throughput": value, "p99_ttft_ms": 50.0,
                  "p99_e2el_ms": 200.0, "request_throughput": value / 16}  # fmt: skip
        (directory / f"c{level}-r0.json").write_text(json.dumps(result))
    return directory


def _report(tmp: Path, results: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--results", str(results), "--library", str(tmp / "lib"), "--host", "h1",
         "--model", "org/model", "--image", "reg:5000/vllm:1", *extra],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    return proc.returncode, (json.loads(proc.stdout) if proc.stdout.strip() else {"stderr": proc.stderr})


def test_first_run_is_baseline_then_compared(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"vllm_version": "0.32.0", "cli_args": ["--max-num-seqs", "8"]}))
    rc, first = _report(tmp_path, _results(tmp_path / "r1", {1: 100.0, 4: 300.0}), "--plan-json", str(plan),
                        "--run-id", "a")  # fmt: skip
    assert rc == 0 and first["became_baseline"] and not first["regressed"]
    key_dir = Path(first["run_dir"]).parents[1]
    assert key_dir.relative_to(tmp_path / "lib").parts[:3] == ("h1", "org_model", "reg_5000_vllm_1")
    assert all(Path(p).read_bytes()[:4] == b"\x89PNG" for p in first["plots"])

    rc, same = _report(tmp_path, _results(tmp_path / "r2", {1: 98.0, 4: 290.0}), "--plan-json", str(plan),
                       "--run-id", "b")  # fmt: skip
    assert rc == 0 and not same["became_baseline"] and not same["regressed"]

    rc, slow = _report(tmp_path, _results(tmp_path / "r3", {1: 100.0, 4: 150.0}), "--plan-json", str(plan),
                       "--run-id", "c", "--fail-on-regression", "--no-plots")  # fmt: skip
    assert rc == 1 and slow["regressed"]
    assert [(r["concurrency"], r["metric"]) for r in slow["regressions"]] == [(4, "output_throughput")]
    assert "**REGRESSION**" in (key_dir / "runs" / "c" / "summary.md").read_text()
    assert json.loads((key_dir / "baseline.json").read_text())["run_id"] == "a"


def test_other_plan_other_baseline_and_compare_to(tmp_path: Path) -> None:
    _report(tmp_path, _results(tmp_path / "r1", {4: 300.0}), "--plan-hash", "p1", "--no-plots")
    rc, other = _report(tmp_path, _results(tmp_path / "r2", {4: 100.0}), "--plan-hash", "p2", "--no-plots")
    assert rc == 0 and other["became_baseline"] and not other["regressed"]
    rc, cmp = _report(tmp_path, _results(tmp_path / "r3", {4: 100.0}), "--plan-hash", "p2", "--no-plots",
                      "--compare-to", "h1/org/model/reg:5000/vllm:1/p1")  # fmt: skip
    assert rc == 2  # a model name with "/" is one component of the key, not two
    rc, cmp = _report(tmp_path, _results(tmp_path / "r4", {4: 100.0}), "--plan-hash", "p2", "--no-plots",
                      "--compare-to", "h1/org_model/reg_5000_vllm_1/p1")  # fmt: skip
    assert rc == 0 and cmp["regressed"]


def test_bad_input_exit_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert _report(tmp_path, tmp_path / "empty", "--plan-hash", "x")[0] == 2
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "c1.json").write_text(json.dumps({"max_concurrency": 1, "completed": 0}))
    assert _report(tmp_path, bad, "--plan-hash", "x")[0] == 2
