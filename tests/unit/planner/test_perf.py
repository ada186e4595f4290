"""The performance model's terms on hand-checked cases, the CLI's predict / calibrate-perf, and plan's figures."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import perf
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.hardware import (
    GPU_CATALOGUE,
    GPU_RATES,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model import (
    ModelSpec,
    parse_model_config,
    weights_bytes_per_gpu,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import plan_for_model
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.quant_formats import Quantization

from vllm_fleet.cli import main

ROOT = Path(__file__).resolve().parents[3]
LLAMA8B = ROOT / "tests/fixtures/planner/models/llama-3.1-8b"
QWEN30B = ROOT / "tests/fixtures/planner/models/qwen3-30b-a3b"
H100 = "NVIDIA H100 80GB HBM3"
RESULTS = ROOT / "tests/fixtures/calibration/perf/bench_serve_results.jsonl"


def _model(**kw: object) -> perf.StepModel:
    base: dict[str, object] = dict(
        layers=10, hidden=1000, attn_width=1000, dense_bytes=1e9, expert_bytes=0.0, experts_per_gpu=0,
        moe_layers=0, top_k=0, num_experts=0, active_flops_per_token=2e9, kv_bytes_per_token=1e5,
        bandwidth=1e12, flops=1e15, link=1e11, stage_layers=10)
    base.update(kw)
    return perf.StepModel(**base)  # type: ignore[arg-type]


def test_memory_time_is_weights_plus_kv_over_bandwidth() -> None:
    # 1 GB of weights + 4 sequences x 1000 tokens x 100 kB = 1.4 GB at 1 TB/s = 1.4 ms
    assert perf.memory_time(_model(), decode=4, ctx=1000, prefill=0) == pytest.approx(1.4e-3)


def test_compute_time_linear_plus_attention() -> None:
    # 8 tokens x 2 GFLOP = 16 GFLOP; attention 4 x 10 layers x 1000 x (8 x 500) = 160 MFLOP; at 1 PFLOP/s
    assert perf.compute_time(_model(), decode=8, ctx=500, prefill=0) == pytest.approx((16e9 + 160e6) / 1e15)


def test_small_batch_is_bandwidth_bound_large_prefill_compute_bound() -> None:
    m = _model()
    assert perf.memory_time(m, 1, 100, 0) > perf.compute_time(m, 1, 100, 0)
    assert perf.compute_time(m, 0, 0, 8192, 4096) > perf.memory_time(m, 0, 0, 8192)
    # step time grows with the prefill chunk once compute dominates (chunked prefill interleaving costs the decodes)
    assert perf.step_time(m, 16, 100, 4096, 2048) > 2 * perf.step_time(m, 16, 100)


def test_tp_allreduce_ring_term() -> None:
    # TP 4: 2 all-reduces per layer, each 2(t-1)/t x tokens x hidden x 2 bytes / link + latency
    m = _model(tp=4)
    per = 2 * 3 / 4 * (10 * 1000 * 2) / 1e11 + perf.COLLECTIVE_LATENCY_S
    assert perf.comm_time(m, 10) == pytest.approx(2 * 10 * per)
    assert perf.comm_time(_model(), 10) == 0.0


def test_moe_reads_only_touched_experts() -> None:
    m = _model(moe_layers=10, top_k=8, num_experts=128, experts_per_gpu=128, expert_bytes=1e6)
    assert m.experts_read(1) == pytest.approx(8.0)  # one token touches its top-k
    assert m.experts_read(10_000) == pytest.approx(128.0)  # a large batch touches them all
    assert 8 < m.experts_read(16) < 128


def test_eager_adds_launch_overhead_per_layer() -> None:
    graph, eager = _model(), _model(eager=True)
    assert perf.step_time(eager, 1, 10) - perf.step_time(graph, 1, 10) == pytest.approx(
        10 * perf.EAGER_LAYER_OVERHEAD_S)


def test_pipeline_stages_add_to_the_step() -> None:
    one = _model()
    two = _model(pp=2, stage_layers=5, dense_bytes=0.5e9, active_flops_per_token=1e9)
    assert perf.step_time(two, 1, 10) > perf.step_time(one, 1, 10) * 0.99


def test_percentile_matches_numpy_linear() -> None:
    assert perf._pct([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert perf._pct([0.0, 10.0], 99) == pytest.approx(9.9)


def test_sharegpt_lengths_keep_the_published_mean_and_the_bench_filter() -> None:
    pairs = perf.sharegpt_lengths(1000)
    assert len(pairs) == 1000
    assert all(4 <= p <= 1024 and o >= 4 and p + o <= 2048 for p, o in pairs)
    mean_in = sum(prompt for prompt, _out in pairs) / 1000
    assert 150 < mean_in < 260  # the filter trims the tail below the published 215


def test_concurrency_one_is_serial() -> None:
    m = _model()
    wl = perf.Workload("random", 100, 11, 3, max_concurrency=1)
    reqs = perf.simulate(m, wl, 256, 8192, 100_000, 4096)
    res = perf.summarise(reqs)
    step = perf.step_time(m, 1, 100 + 5)
    assert res["mean_tpot_ms"] == pytest.approx(step * 1000, rel=0.05)
    # three requests one after the other: e2el adds up to the duration
    assert res["request_throughput"] == pytest.approx(1000 / res["mean_e2el_ms"], rel=0.01)


def test_a_requests_own_time_is_simulated_before_the_scheduler_sees_it() -> None:
    # the CPU lane's request_s (HTTP, tokenising): each request reaches the waiting queue that long after it is sent
    plain, delayed = _model(), _model(request_s=0.05)
    wl = perf.Workload("random", 100, 11, 3, max_concurrency=1)
    base = perf.summarise(perf.simulate(plain, wl, 256, 8192, 100_000, 4096))
    got = perf.summarise(perf.simulate(delayed, wl, 256, 8192, 100_000, 4096))
    assert got["mean_ttft_ms"] == pytest.approx(base["mean_ttft_ms"] + 50, abs=1e-3)
    assert got["mean_tpot_ms"] == pytest.approx(base["mean_tpot_ms"], abs=1e-3)
    # with 8 clients a request's own time overlaps the others' steps: the engine is not idle for 50 ms per request
    wl8 = perf.Workload("random", 100, 11, 64, max_concurrency=8)
    serial = 64 * 0.05
    elapsed = 64 / perf.summarise(perf.simulate(delayed, wl8, 256, 8192, 100_000, 4096))["request_throughput"]
    assert elapsed < serial / 4


def test_more_concurrency_more_throughput_and_longer_tpot() -> None:
    m = _model()
    one = perf.summarise(perf.simulate(m, perf.Workload("random", 200, 50, 32, 1), 256, 8192, 10**6, 4096))
    many = perf.summarise(perf.simulate(m, perf.Workload("random", 200, 50, 32, 32), 256, 8192, 10**6, 4096))
    assert many["output_throughput"] > 5 * one["output_throughput"]
    assert many["mean_tpot_ms"] > one["mean_tpot_ms"]
    assert many["mean_ttft_ms"] > one["mean_ttft_ms"]


def test_kv_capacity_and_max_num_seqs_bound_the_batch() -> None:
    m = _model()
    wl = perf.Workload("random", 900, 100, 20)
    wide = perf.summarise(perf.simulate(m, wl, 256, 8192, 10**6, 4096))
    narrow = perf.summarise(perf.simulate(m, wl, 256, 8192, 2000, 4096))  # two requests fit the pool
    assert narrow["request_throughput"] < wide["request_throughput"] / 3
    seqs = perf.summarise(perf.simulate(m, wl, 2, 8192, 10**6, 4096))
    assert seqs["request_throughput"] == pytest.approx(narrow["request_throughput"], rel=0.05)


def test_request_rate_spreads_arrivals() -> None:
    m = _model()
    burst = perf.summarise(perf.simulate(m, perf.Workload("random", 200, 20, 50), 256, 8192, 10**6, 4096))
    slow = perf.summarise(perf.simulate(m, perf.Workload("random", 200, 20, 50, None, 2.0), 256, 8192, 10**6, 4096))
    assert slow["request_throughput"] == pytest.approx(2.0, rel=0.35)
    assert slow["mean_ttft_ms"] < burst["mean_ttft_ms"]


def test_refuses_what_it_cannot_predict() -> None:
    with pytest.raises(perf.PerfError):
        perf.simulate(_model(), perf.Workload("random", 5000, 10, 1), 256, 8192, 10**6, 4096)
    with pytest.raises(perf.PerfError):
        perf.Workload("sonnet").lengths()


def test_every_catalogue_gpu_but_two_has_rates() -> None:
    missing = {s.key for s in GPU_CATALOGUE} - set(GPU_RATES)
    assert missing == {"GB10", "GTX1080"}
    bandwidth = {s.key: s.bandwidth_gbs for s in GPU_CATALOGUE}
    assert all(r.bandwidth_gbs == bandwidth[k] for k, r in GPU_RATES.items())


def test_plan_carries_predicted_figures() -> None:
    result = plan_for_model({"gpu_name": H100, "gpu_count": 1}, str(LLAMA8B))
    predicted = result["performance"]["predicted"]
    assert set(predicted) == set(perf.RESULT_KEYS)
    # 16 GB of bf16 weights over ~2.8 TB/s: a decode step cannot be under 5 ms on one H100
    assert 5 < predicted["median_tpot_ms"] < 40


def test_moe_decode_is_faster_than_its_total_weights_suggest() -> None:
    result = plan_for_model({"gpu_name": H100, "gpu_count": 1}, str(QWEN30B))
    tpot = result["performance"]["predicted"]["median_tpot_ms"]
    full_read_ms = result["memory_gib"]["weights"] * 2**30 / (3350e9 * perf.BANDWIDTH_EFFICIENCY) * 1000
    assert tpot < full_read_ms


def test_cli_predict_json_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["predict", "--model", str(LLAMA8B), "--gpu", H100, "--dataset-name", "random",
               "--random-input-len", "512", "--random-output-len", "64", "--num-prompts", "20",
               "--max-concurrency", "4", "--json"])
    assert rc == 0
    figures = json.loads(capsys.readouterr().out)
    assert set(figures) == set(perf.RESULT_KEYS)
    rc = main(["predict", "--model", str(LLAMA8B), "--gpu", H100, "--dataset-name", "random",
               "--num-prompts", "5", "--request-rate", "fast", "--json"])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "request-rate" in err


def test_calibrate_perf_reports_every_result(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate-perf", str(RESULTS), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    lines = [json.loads(x) for x in RESULTS.read_text().splitlines() if x.strip()]
    assert len(rep["cases"]) == len(lines)
    assert all(c["errors"] for c in rep["cases"]), [c["note"] for c in rep["cases"] if not c["errors"]]
    assert all(r["source_url"].startswith("https://") and r["command"] and r["verbatim"] for r in lines)
    assert not math.isnan(rep["by_metric"]["mean_tpot_ms"]["median_abs"])


def test_cli_expert_parallel_and_plan_text(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["predict", "--model", str(QWEN30B), "--gpu", H100, "--gpu-count", "2", "--tensor-parallel-size", "2",
            "--dataset-name", "random", "--num-prompts", "16", "--max-concurrency", "4", "--json"]
    assert main(base) == 0
    tp = json.loads(capsys.readouterr().out)
    assert main([*base, "--enable-expert-parallel"]) == 0
    ep = json.loads(capsys.readouterr().out)
    assert ep != tp  # the EP layout is timed differently (all-to-all instead of sharded experts)
    assert main(["plan", "--model", str(LLAMA8B), "--gpu", H100]) == 0
    text = capsys.readouterr().out
    assert "predicted (vllm bench serve --dataset-name random" in text and "TPOT (ms): mean" in text


def test_calibration_set_meets_the_issue_floor() -> None:
    # issue 28: at least 20 public results over 4+ GPU types, dense and MoE, TP 1-8
    lines = [json.loads(x) for x in RESULTS.read_text().splitlines() if x.strip()]
    assert len(lines) >= 20
    assert len({r["gpu_key"] for r in lines}) >= 4
    assert {bool(r["moe"]) for r in lines} == {True, False}
    tps = {int((r.get("engine_args") or {}).get("tensor-parallel-size", 1)) for r in lines}
    assert {1, 2, 4, 8} <= tps
    assert len({r["id"] for r in lines}) == len(lines)


def test_replayed_lengths_are_sent_as_published() -> None:
    # one request of 100 prompt tokens and 10 output tokens, alone: a prefill step, then 9 decode steps
    m = _model()
    wl = perf.Workload("sharegpt", num_prompts=1, max_concurrency=1, pairs=((100, 10),))
    assert wl.lengths() == [(100, 10)]
    got = perf.summarise(perf.simulate(m, wl, 256, 8192, 10**6, 4096))
    prefill = perf.step_time(m, 0, 0.0, 100, 50.0)
    assert got["mean_ttft_ms"] == pytest.approx(prefill * 1000, rel=1e-6)
    assert got["mean_e2el_ms"] > got["mean_ttft_ms"] + 9 * perf.step_time(m, 1, 100) * 1000 * 0.99
    # an empty completion (0 tokens in a result file) is replayed as one token
    assert perf.Workload("sharegpt", pairs=((5, 0),)).lengths() == [(5, 1)]


ARCH = ROOT / "tests/fixtures/planner/architectures"
MODELS = ROOT / "tests/fixtures/planner/models"
CHECKPOINTS = ROOT / "tests/fixtures/planner/checkpoints"


def _plan(config_dir: Path, gpus: int = 1) -> dict[str, object]:
    return plan_for_model({"gpus": [{"name": H100, "memory_total_mib": 81559}] * gpus}, str(config_dir))


def _spec(config_dir: Path) -> ModelSpec:
    return parse_model_config(json.loads((config_dir / "config.json").read_text()))


@pytest.mark.parametrize("config_dir", [
    ARCH / "nemotron-3-nano-30b-a3b-bf16",  # Mamba-2 + MoE + attention single blocks
    ARCH / "nemotron-h-56b-base-8k",  # Mamba-2 + MLP + attention single blocks
    ARCH / "qwen3.5-27b",  # gated delta + output-gated full attention, vision tower
    ARCH / "qwen3.6-35b-a3b-nvfp4",  # the same, MoE
    ARCH / "gemma-4-26b-a4b",  # sliding + full layers of their own head shape, MoE beside a dense MLP
    CHECKPOINTS / "deepseek-v3",  # MLA, leading dense layers, shared expert
    MODELS / "llama-3.1-8b",
])  # fmt: skip
def test_performance_params_are_the_memory_models(config_dir: Path) -> None:
    # one home for a model's shape: the FLOPs and bytes a step is timed from count the parameters the weights are
    # sized from (BF16, no quantization), less the vision tower a text step does not read
    spec = _spec(config_dir)
    params = perf._param_counts(spec)
    sized = sum(weights_bytes_per_gpu(spec, 1, 1, 2, Quantization("none"))) / 2 - spec.vision_params
    assert params.dense + params.moe_layers * spec.num_experts * params.expert == pytest.approx(sized, rel=1e-9)


def test_hybrid_params_match_the_published_counts() -> None:
    # NVIDIA Nemotron-3-Nano-30B-A3B: "31.6 billion total parameters but only uses about 3.6 billion at a time"
    # (tests/fixtures/planner/architectures/SOURCES.json). The performance model had counted every layer as
    # attention + MLP: 69.4 B total, 5.7 B active. Active here is what a token multiplies; the published figure also
    # counts the input embedding it looks up.
    source = json.loads((ARCH / "SOURCES.json").read_text())["nemotron-3-nano-30b-a3b-bf16"]["published"]
    spec = _spec(ARCH / "nemotron-3-nano-30b-a3b-bf16")
    params = perf._param_counts(spec)
    total = params.dense + params.moe_layers * spec.num_experts * params.expert
    assert total == pytest.approx(source["params_total"], abs=0.05e9)
    assert params.active + spec.embedding_params()[0] == pytest.approx(3.6e9, abs=0.1e9)
    # "23 Mamba-2 and MoE layers, along with 6 Attention layers": the routed experts sit in 23 of its 52 blocks
    assert "23 Mamba-2 and MoE layers" in source["layers_line"] and params.moe_layers == 23
    assert perf.step_model(spec, _plan(ARCH / "nemotron-3-nano-30b-a3b-bf16", 2), GPU_RATES["H100-SXM"]).moe_layers == 23


def test_hybrid_attention_reads_context_only_in_its_attention_layers() -> None:
    # Qwen3.5-27B: 16 of its 64 layers are full attention, the rest gated delta (fixed-size state, no KV context)
    spec = _spec(ARCH / "qwen3.5-27b")
    assert spec.attention_layers == 16 and spec.num_layers == 64
    m = perf.step_model(spec, _plan(ARCH / "qwen3.5-27b"), GPU_RATES["H100-SXM"])
    assert m.attn_layers == 16
    long_ctx = perf.compute_time(m, 1, 100_000.0, 0) - perf.compute_time(m, 1, 0.0, 0)
    every_layer = perf.compute_time(perf.StepModel(**{**m.__dict__, "attn_layers": None}), 1, 100_000.0, 0)
    assert every_layer - perf.compute_time(m, 1, 0.0, 0) == pytest.approx(4 * long_ctx)


def test_rate_constants_are_the_measured_ones() -> None:
    # perf.py names its constants from scripts/bench/hopper_rates.py runs on the lent GPUs, not from fits
    perf_dir = ROOT / "tests/fixtures/calibration/perf"
    h200 = json.loads((perf_dir / "h200_torch_rates.json").read_text())
    h100 = json.loads((perf_dir / "h100_torch_rates.json").read_text())
    assert (h200["device"], h100["device"]) == ("NVIDIA H200", "NVIDIA H100 80GB HBM3")
    assert pytest.approx(h200["read_gbs"]["4"] / 4800, abs=5e-4) == perf.BANDWIDTH_EFFICIENCY
    assert pytest.approx(h200["gemm_tflops"]["bf16:8192x8192x8192"] / 989, abs=5e-4) == perf.BF16_EFFICIENCY
    assert pytest.approx(h200["gemm_tflops"]["fp8:8192x8192x8192"] / 1979, abs=5e-4) == perf.FP8_EFFICIENCY
    launch = h100["launch_us"]
    assert pytest.approx(launch["eager"] - launch["graph"], abs=0.01) == perf.LAUNCH_OVERHEAD_US
    assert pytest.approx(10 * perf.LAUNCH_OVERHEAD_US * 1e-6) == perf.EAGER_LAYER_OVERHEAD_S
    # the H100 runs at or above the H200-measured fractions the model applies to every GPU (kept: perf.py says why)
    sxm = GPU_RATES["H100-SXM"]
    assert h100["read_gbs"]["4"] / sxm.bandwidth_gbs >= perf.BANDWIDTH_EFFICIENCY
    assert h100["gemm_tflops"]["bf16:8192x8192x8192"] / sxm.bf16_tflops >= perf.BF16_EFFICIENCY
