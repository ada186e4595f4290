"""The GPU lane: candidate layouts -> pick -> settle max_model_len -> scheduler -> record the plan."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .candidate import Candidate, evaluate
from .context import GpuInputs, PlanInputs
from .decision import Decision
from .engine_args import wanted_max_model_len
from .errors import PlanError
from .hardware import GIB, attention_backend, default_block_size
from .headroom import Utilization, utilization
from .inputs import Gpu
from .model import ModelSpec
from .plan_types import Parallel, Plan, assemble_plan
from .scheduler import UNBOUNDED_KV_TOKENS, schedule

TP_SIZES = (1, 2, 4, 8, 16, 32, 64)  # tensor-parallel sizes tried, smallest first
# Re-evaluations after the first guess (UNBOUNDED_KV_TOKENS). max_num_seqs follows the KV pool, and the
# pool shrinks a little as max_num_seqs grows (sampler rows, CUDA-graph capture sizes), so the pair
# settles fast: over the test fixtures plus 1,500 random GPUs (7,554 layouts), 98% reach a fixed point
# within 2 re-evaluations and 98.7% within 3; the other 1.2% alternate between two neighbouring values
# for ever (a larger max_num_seqs shrinks the pool just enough to lower it again), so for them the bound,
# not convergence, ends the loop (deterministically). Reaching a fixed point earlier stops it (same result).
SCHEDULER_SETTLE_PASSES = 3
# Passes to settle max_model_len. Pass 1 checks the wanted length; if one request does not fit, the length
# is clamped to the longest the current pool holds and pass 2 re-evaluates at it (the scheduler re-settles
# too, so the pool can move a little). That fits in every measured case (3 passes at most, even with a
# longer scheduler settle); the 4th is margin, after which the plan is refused.
MAX_MODEL_LEN_SETTLE_PASSES = 4


@dataclass(frozen=True)
class Pick:
    """The chosen layout's candidate, its utilisation decision, and the budget fraction settling uses."""

    candidate: Candidate
    utilization: Utilization  # recorded as gpu-memory-utilization
    # The budget fraction settle_max_model_len evaluates with: the LAST layout tried's. It differs from
    # utilization.value only when a fallback earlier than the last layout is picked (kept as it was).
    settle_util: float


# --- Fixed inputs ------------------------------------------------------------------------------


def _block_size(ctx: PlanInputs, gpu: Gpu, d: Decision) -> int:
    """The user's block size (a multiple of 16), else the attention backend's preference."""
    if "block-size" in ctx.user:
        block_size = int(ctx.user["block-size"])
        if block_size % 16:
            raise PlanError(f"--block-size {block_size} is not a multiple of 16, which every CUDA attention backend needs")
        d.set("block-size", block_size, "set by you (vLLM warns if it precludes a faster backend)")
        return block_size
    block_size = default_block_size(gpu.compute_capability, ctx.spec.mla)
    d.note("block-size", f"left to the attention backend ({attention_backend(gpu.compute_capability, ctx.spec.mla)}"
           f" prefers {block_size}); no size-based rule exists in vLLM")
    return block_size


def _check_forced_tp(spec: ModelSpec, gpu: Gpu, tp: int) -> None:
    """Refuse a user TP that does not divide the heads, cannot replicate KV heads, or leaves the host."""
    if spec.num_heads % tp:
        raise PlanError(f"--tensor-parallel-size {tp} does not divide the model's {spec.num_heads} attention heads: "
                        f"use one of {', '.join(str(t) for t in range(1, spec.num_heads + 1) if spec.num_heads % t == 0 and t <= 64)}")
    if not spec.mla and tp > spec.num_kv_heads and tp % spec.num_kv_heads:
        raise PlanError(f"--tensor-parallel-size {tp} is above the model's {spec.num_kv_heads} KV heads and not a "
                        f"multiple of them: vLLM cannot replicate KV heads evenly; use a multiple of {spec.num_kv_heads}")
    if tp > gpu.count:
        raise PlanError(f"--tensor-parallel-size {tp} is more than the {gpu.count} GPU(s) on the host: "
                        "tensor parallelism stays inside one host; use pipeline parallelism across hosts")


def gpu_inputs(ctx: PlanInputs, gpu: Gpu, d: Decision) -> GpuInputs:
    """Block size, eager mode, wanted max_model_len and a checked user layout: what every layout shares."""
    block_size = _block_size(ctx, gpu, d)
    eager = bool(ctx.user.get("enforce-eager", False))
    want_len = wanted_max_model_len(ctx.spec, ctx.user, " (max_position_embeddings x rope scaling)")
    nodes_allowed = ctx.policy.max_nodes
    forced_tp, forced_pp = ctx.user.get("tensor-parallel-size"), ctx.user.get("pipeline-parallel-size")
    if forced_tp is not None:
        _check_forced_tp(ctx.spec, gpu, int(forced_tp))
    if forced_pp is not None and int(forced_pp) > nodes_allowed * gpu.count // int(forced_tp or 1):
        raise PlanError(f"--pipeline-parallel-size {forced_pp} needs more GPUs than the group has "
                        f"({nodes_allowed} host(s) x {gpu.count}): add hosts to the group or lower it")
    return GpuInputs(plan=ctx, gpu=gpu, block_size=block_size, eager=eager, want_len=want_len,
                     forced_tp=None if forced_tp is None else int(forced_tp),
                     forced_pp=None if forced_pp is None else int(forced_pp))


# --- Step 1: candidate layouts ------------------------------------------------------------------


def _tp_candidates(spec: ModelSpec, gpu: Gpu) -> list[int]:
    """TP sizes that fit the host, divide the heads and split or evenly replicate the KV heads."""
    values = []
    for tp in TP_SIZES:
        if tp > gpu.count:
            break
        if spec.num_heads % tp:
            continue
        if not spec.mla and tp >= spec.num_kv_heads and tp % spec.num_kv_heads:
            continue
        values.append(tp)
    return values


def candidate_layouts(g: GpuInputs) -> list[tuple[int, int]]:
    """(TP, PP) layouts, smallest first: TP inside the NVLink domain, then beyond it, then PP across hosts."""
    if g.forced:
        return [(g.forced_tp or 1, g.forced_pp or 1)]
    spec, gpu = g.plan.spec, g.gpu
    tps = _tp_candidates(spec, gpu)
    if not tps:
        raise PlanError(f"no tensor-parallel size divides the model's {spec.num_heads} heads with "
                        f"{gpu.count} GPU(s): use a host with a GPU count that divides {spec.num_heads}")
    layouts = [(tp, 1) for tp in tps if tp <= gpu.nvlink_domain]
    layouts += [(tp, 1) for tp in tps if tp > gpu.nvlink_domain]
    layouts += [(tps[-1], pp) for pp in range(2, g.plan.policy.max_nodes + 1)]
    return layouts


# --- Step 2: pick -------------------------------------------------------------------------------


def _settle_scheduler(g: GpuInputs, tp: int, pp: int, util: Utilization) -> Candidate:
    """Evaluate a layout at the profile's scheduler, then let scheduler and KV pool settle together."""
    ctx, world = g.plan, tp * pp
    sched = schedule(ctx, g.gpu, UNBOUNDED_KV_TOKENS, g.want_len, world)
    cand = evaluate(g, tp=tp, pp=pp, util=util.value, outside=util.outside, max_model_len=g.want_len, sched=sched)
    for _pass in range(SCHEDULER_SETTLE_PASSES):
        settled = schedule(ctx, g.gpu, max(cand.kv_tokens, 1), g.want_len, world)
        if (settled.max_num_seqs, settled.max_num_batched_tokens) == (
                sched.max_num_seqs, sched.max_num_batched_tokens):
            break  # a fixed point: evaluating again gives the same candidate
        sched = settled
        cand = evaluate(g, tp=tp, pp=pp, util=util.value, outside=util.outside, max_model_len=g.want_len,
                        sched=sched)
    return cand


def _refuse_or_accept_last(g: GpuInputs, last: Candidate, d: Decision) -> None:
    """No layout gives a useful pool: refuse if the largest holds no KV at all, else warn of queueing."""
    mem, gpu, prof = last.memory, g.gpu, g.plan.profile
    if last.num_blocks <= 0 or mem.kv_cache <= 0:
        need = mem.before_kv
        raise PlanError(
            f"the model does not fit: at TP={last.tp} PP={last.pp} each {gpu.name} needs "
            f"{need / GIB:.1f} GiB before any KV cache but the budget is {mem.budget / GIB:.1f} GiB; "
            f"needs about {(need * last.tp * last.pp) / GIB + 2:.0f} GiB of GPU memory in all: add GPUs/hosts "
            f"(policy max_nodes={g.plan.policy.max_nodes}) or use a quantized checkpoint")
    d.warnings.append(f"KV cache holds only {last.kv_tokens} tokens, fewer than {prof.min_concurrency} "
                      f"{prof.name} requests of {prof.request_tokens} tokens: expect queueing; add GPUs")


def pick_layout(g: GpuInputs, layouts: list[tuple[int, int]], d: Decision) -> Pick:
    """The first layout whose pool is useful and fits a full request; else the first useful one (the
    length gets clamped); else the largest that holds any KV cache (with a warning)."""
    prof = g.plan.profile
    fallback: tuple[Candidate, Utilization] | None = None
    last: tuple[Candidate, Utilization] | None = None
    for tp, pp in layouts:
        util = utilization(g.gpu, min(tp * pp, g.gpu.count), g.plan.policy, g.plan.rules, g.plan.user)
        cand = _settle_scheduler(g, tp, pp, util)
        last = (cand, util)
        useful = cand.kv_tokens >= prof.min_concurrency * prof.request_tokens
        if cand.num_blocks > 0 and (g.forced or (useful and cand.fits_one_request)):
            return Pick(candidate=cand, utilization=util, settle_util=util.value)
        if cand.num_blocks > 0 and useful and fallback is None:
            fallback = (cand, util)  # useful pool, but max_model_len must be clamped
    if last is None:
        raise AssertionError("no layout was evaluated")
    if fallback is not None:
        return Pick(candidate=fallback[0], utilization=fallback[1], settle_util=last[1].value)
    _refuse_or_accept_last(g, last[0], d)
    return Pick(candidate=last[0], utilization=last[1], settle_util=last[1].value)


# --- Step 3: settle max_model_len ---------------------------------------------------------------


def settle_max_model_len(g: GpuInputs, pick: Pick) -> tuple[Candidate, int, bool]:
    """Re-evaluate at the wanted length; clamp it to what the pool holds (unless the user set it).

    The scheduler values feed back (activation, sliding-window blocks), so they settle together.
    Returns (candidate, max_model_len, clamped).
    """
    ctx, chosen = g.plan, pick.candidate
    spec, kv_bytes = ctx.spec, ctx.precision.kv_bytes
    final_len, clamped = g.want_len, False
    for _pass in range(MAX_MODEL_LEN_SETTLE_PASSES):
        sched = schedule(ctx, g.gpu, max(chosen.kv_tokens, 1), final_len, chosen.world)
        chosen = evaluate(g, tp=chosen.tp, pp=chosen.pp, util=pick.settle_util,
                          outside=chosen.memory.outside_budget, max_model_len=final_len, sched=sched)
        if chosen.fits_one_request:
            break
        kv_gib = max(chosen.memory.kv_cache, 0) / GIB
        if "max-model-len" in ctx.user:
            fit_len = chosen.longest_fitting_len(spec, kv_bytes, g.want_len)
            raise PlanError(f"--max-model-len {g.want_len} does not fit one request in the KV cache "
                            f"({kv_gib:.2f} GiB per GPU): lower it to at most "
                            f"{fit_len} or add GPUs / raise tensor-parallel-size")
        final_len = chosen.longest_fitting_len(spec, kv_bytes, final_len)
        final_len -= final_len % g.block_size if final_len > g.block_size else 0
        clamped = True
        if final_len < min(ctx.profile.request_tokens, spec.max_model_len):
            raise PlanError(f"the KV cache ({kv_gib:.2f} GiB per GPU) holds only "
                            f"{final_len} tokens, less than one {ctx.profile.name} request: add GPUs or hosts")
    if not chosen.fits_one_request:
        raise PlanError(f"no max_model_len fits one request in {max(chosen.memory.kv_cache, 0) / GIB:.2f} GiB "
                        "of KV cache per GPU: add GPUs or hosts")
    return chosen, final_len, clamped


# --- Steps 4-5: scheduler and record ------------------------------------------------------------


def _record_max_model_len(g: GpuInputs, final_len: int, clamped: bool, d: Decision) -> None:
    """Emit max-model-len with why: the user's, clamped, or the model's limit."""
    model_max = g.plan.spec.max_model_len
    if "max-model-len" in g.plan.user:
        d.set("max-model-len", g.want_len, "set by you; one full-length request fits the predicted KV cache")
    elif clamped:
        d.set("max-model-len", final_len, f"model allows {model_max} but one request of that length would not "
              f"fit the KV cache: clamped to {final_len}")
    else:
        d.set("max-model-len", final_len, f"the model's limit ({model_max}); one full-length request fits")


def _record_layout(g: GpuInputs, chosen: Candidate, d: Decision) -> Parallel:
    """Emit TP/PP with why (and the PCIe warning); return the parallel layout."""
    spec, gpu, prof = g.plan.spec, g.gpu, g.plan.profile
    tp, pp = chosen.tp, chosen.pp
    if g.forced_tp is not None:
        d.set("tensor-parallel-size", tp, "set by you; divides the attention heads")
    else:
        why = (f"smallest TP that holds the weights ({chosen.memory.weights / GIB:.1f} GiB/GPU) and a KV pool of "
               f"{chosen.kv_tokens} tokens (>= {prof.min_concurrency} {prof.name} requests); divides "
               f"{spec.num_heads} heads")
        if tp > gpu.nvlink_domain:
            why += f"; spans beyond the NVLink domain of {gpu.nvlink_domain} (PCIe all-reduce is slower)"
            d.warnings.append(f"TP={tp} crosses PCIe: expect slower all-reduce than inside an NVLink domain")
        elif tp > 1:
            why += f"; inside one {gpu.interconnect} domain"
        d.set("tensor-parallel-size", tp, why)
    if pp > 1:
        d.set("pipeline-parallel-size", pp, f"one host's {gpu.count} GPUs are not enough: {pp} stages across hosts")
    elif g.forced_pp is not None:
        d.set("pipeline-parallel-size", pp, "set by you")
    nodes = max(1, math.ceil(tp * pp / gpu.count))
    replicas = max(1, gpu.count // (tp * pp)) if nodes == 1 else 1
    return Parallel(tensor_parallel_size=tp, pipeline_parallel_size=pp, replicas=replicas,
                    gpus_per_replica=tp * pp, nodes=nodes)


def _record_features(g: GpuInputs, chosen: Candidate, d: Decision) -> None:
    """Emit expert parallelism, eager/compile mode, explicit KV bytes, the sliding-window note, user args."""
    spec, user = g.plan.spec, g.plan.user
    if spec.is_moe and chosen.world > 1:
        d.set("enable-expert-parallel", True, f"MoE with {spec.num_experts} experts: shard whole experts over "
              f"the {chosen.world} GPUs instead of slicing each one (fewer, larger GEMMs)")
    if g.eager:
        d.set("enforce-eager", True, "set by you: no CUDA graphs (faster start, slower decode)")
    else:
        d.note("optimization-level", "left at vLLM's default -O2 (compile + full and piecewise CUDA graphs); "
               "O3 is identical in this version")
    if "kv-cache-memory-bytes" in user:
        d.set("kv-cache-memory-bytes", user["kv-cache-memory-bytes"], "set by you: vLLM skips its utilisation budget")
    if spec.sliding_window:
        d.note("sliding-window", f"{spec.layer_kinds.count('sliding')} of {spec.num_layers} layers keep only "
               f"{spec.sliding_window} tokens: the hybrid KV manager sizes those layers by the window")
    d.keep_user_args(user)


def plan_gpu(ctx: PlanInputs, gpu: Gpu, d: Decision) -> Plan:
    """Plan one host (or a multi-host group under ``policy.max_nodes``) of identical GPUs."""
    g = gpu_inputs(ctx, gpu, d)
    pick = pick_layout(g, candidate_layouts(g), d)
    pick.utilization.record(d)
    chosen, final_len, clamped = settle_max_model_len(g, pick)
    schedule(ctx, gpu, max(chosen.kv_tokens, 1), final_len, chosen.world).record(d)
    _record_max_model_len(g, final_len, clamped, d)
    parallel = _record_layout(g, chosen, d)
    _record_features(g, chosen, d)
    return assemble_plan(ctx, "cuda", d, chosen, parallel, gpu)
