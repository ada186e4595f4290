"""The GPU lane: candidate layouts -> pick -> settle max_model_len -> scheduler -> record the plan."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from . import targets
from .candidate import Candidate, evaluate, expert_parallel, uses_expert_parallel
from .context import GpuInputs, PlanInputs
from .decision import Decision
from .engine_args import wanted_max_model_len
from .errors import PlanError
from .hardware import GIB, attention_backend, default_block_size
from .headroom import Utilization, utilization
from .inputs import Gpu
from .lora import describe as describe_lora
from .lora import lora_bytes_per_stage
from .memory import (
    MODULAR_MOE_SINCE,
    activation_terms,
    checkpoint_scale,
    describe_layout,
    eplb_bytes_per_stage,
)
from .model import ModelSpec, moe_expert_shards
from .multimodal import fallback_reason, multimodal_profile
from .observed import reasons as observed_reasons
from .plan_types import Parallel, Plan, assemble_plan
from .scheduler import UNBOUNDED_KV_TOKENS, schedule
from .shape_rules import refusal, shape_violations
from .speculative import SpecDecode, check_draft_tp, describe, draft_kv
from .weight_split import weight_split

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
# The first release whose source the MoE layout comparison (DP-attention with EP vs TP) was checked against:
# fused_moe/config.py, distributed/parallel_state.py, device_communicators/all2all.py and the MLA KV spec.
MOE_DP_MIN_VERSION = (0, 32, 0)


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
    d.note("block-size", f"left to the attention backend ({attention_backend(gpu.compute_capability, ctx.spec.mla, gpu.vendor)}"
           f" prefers {block_size}); no size-based rule exists in vLLM")
    return block_size


def _check_forced_tp(ctx: PlanInputs, gpu: Gpu, tp: int) -> None:
    """Refuse a user TP that does not divide the heads, cannot replicate KV heads, breaks another of vLLM's load-time
    shape rules (:mod:`.shape_rules`) or leaves the host."""
    spec = ctx.spec
    if spec.num_heads % tp:
        raise PlanError(f"--tensor-parallel-size {tp} does not divide the model's {spec.num_heads} attention heads: "
                        f"use one of {', '.join(str(t) for t in range(1, spec.num_heads + 1) if spec.num_heads % t == 0 and t <= 64)}")
    if not spec.mla and tp > spec.num_kv_heads and tp % spec.num_kv_heads:
        raise PlanError(f"--tensor-parallel-size {tp} is above the model's {spec.num_kv_heads} KV heads and not a "
                        f"multiple of them: vLLM cannot replicate KV heads evenly; use a multiple of {spec.num_kv_heads}")
    if not _shape_ok(ctx, tp, int(ctx.user.get("data-parallel-size", 1))):
        pinned = ctx.user.get("enable-expert-parallel")
        words = refusal(spec, ctx.precision.quant, tp, bool(pinned), int(ctx.user.get("data-parallel-size", 1)),
                        ctx.rules.version, max(gpu.count, tp))
        raise PlanError(words or f"--tensor-parallel-size {tp} breaks a vLLM load-time shape rule")
    if tp > gpu.count:
        raise PlanError(f"--tensor-parallel-size {tp} is more than the {gpu.count} GPU(s) on the host: "
                        "tensor parallelism stays inside one host; use pipeline parallelism across hosts")


def _data_parallel(ctx: PlanInputs, gpu: Gpu) -> tuple[int, int]:
    """The user's --data-parallel-size (1 when unset) and the hosts its ranks spread over, checked.

    One host (``policy.max_nodes`` 1): vLLM's internal load balancing, one ``vllm serve`` starts DP engines of TP x PP
    GPUs each on the local GPUs (rank r takes GPUs r*TP*PP onwards, vLLM 0.32 ``v1/worker/gpu_worker.py:447-459``) and
    its API server processes (DP of them by default, ``entrypoints/cli/serve.py:125``) balance requests over the
    engines, all on the one port.

    A multi-node group (``policy.max_nodes`` = the group's size, set by preflight): :func:`_data_parallel_nodes`.
    """
    dp = int(ctx.user.get("data-parallel-size", 1))
    if dp == 1:
        return 1, 1
    if ctx.policy.max_nodes > 1:
        return dp, _data_parallel_nodes(ctx, gpu, dp)
    tp, pp = int(ctx.user.get("tensor-parallel-size", 1)), int(ctx.user.get("pipeline-parallel-size", 1))
    if dp * tp * pp > gpu.count:
        layout = f"--data-parallel-size {dp}" + (f" x --tensor-parallel-size {tp}" if tp > 1 else "") + (
            f" x --pipeline-parallel-size {pp}" if pp > 1 else "")
        fix = (f"lower data_parallel_size to at most {gpu.count // (tp * pp)}" if gpu.count >= tp * pp
               else "lower data_parallel_size")
        raise PlanError(f"{layout} needs {dp * tp * pp} GPUs but the host has {gpu.count}: data parallelism runs "
                        f"every rank inside one host; {fix}")
    return dp, 1


def _data_parallel_nodes(ctx: PlanInputs, gpu: Gpu, dp: int) -> int:
    """Data parallelism across the hosts of a multi-node group: the number of hosts (``policy.max_nodes``), checked.

    vLLM 0.32's multi-node internal load balancing: every host runs ``dp / hosts`` local ranks
    (``--data-parallel-size-local``) of TP GPUs each in one ``vllm serve``; the first host serves the API and
    balances over all ranks, the others run ``--headless`` from their start rank (``entrypoints/cli/serve.py:181-262``,
    ``engine/arg_utils.py:2445-2470``). Each rank is a whole TP instance inside one host, so pipeline stages are
    refused, and every host runs the same number of ranks.
    """
    nodes = ctx.policy.max_nodes
    where = f"over the {nodes} hosts of the multi-node group"
    pp = int(ctx.user.get("pipeline-parallel-size", 1))
    if pp != 1:
        raise PlanError(f"--pipeline-parallel-size {pp} with --data-parallel-size {dp} {where} is refused: each "
                        "data-parallel rank runs as one tensor-parallel instance inside one host (no pipeline stages "
                        "across hosts): drop pipeline_parallel_size from the group's hosts")
    if dp % nodes:
        lower, upper = dp - dp % nodes, dp + nodes - dp % nodes
        raise PlanError(f"--data-parallel-size {dp} does not split evenly {where}: every host runs the same number "
                        f"of ranks (data_parallel_size / {nodes}); set data_parallel_size to a multiple of {nodes} "
                        f"({', '.join(str(v) for v in (lower, upper) if v > 1)}) on every host of the group")
    local = dp // nodes
    tp = ctx.user.get("tensor-parallel-size")
    if local * int(tp or 1) > gpu.count:
        if tp is None:
            raise PlanError(f"--data-parallel-size {dp} {where} puts {local} ranks on each host but a host has "
                            f"{gpu.count} GPUs: lower data_parallel_size to at most {nodes * gpu.count}")
        fix = (f"lower data_parallel_size to at most {nodes * (gpu.count // int(tp))} or tensor_parallel_size to "
               f"at most {gpu.count // local}" if gpu.count >= int(tp) else "lower data_parallel_size")
        raise PlanError(f"--data-parallel-size {dp} x --tensor-parallel-size {tp} {where} puts {local} ranks of "
                        f"{tp} GPUs = {local * int(tp)} GPUs on each host but a host has {gpu.count}: {fix}")
    return nodes


def eplb_inputs(ctx: PlanInputs) -> tuple[bool, int, int]:
    """``(enabled, redundant experts, migration buffers)`` from the user's ``--enable-eplb`` and ``--eplb-config``.

    vLLM 0.32: EPLB needs ``--enable-expert-parallel`` (``config/parallel.py:565-566``), ``num_redundant_experts``
    (default 0, ``:76``) needs EPLB (``:581-588``), and the communicator defaults to NIXL only where NIXL is installed
    (``:1097-1115``). The memory plan counts the redundant experts and the buffers (:func:`.memory.eplb_bytes_per_stage`);
    the layout checks (TP x DP > 1, an even split of the experts) follow the pick (:func:`check_eplb_layout`).
    """
    user, spec = ctx.user, ctx.spec
    enabled = user.get("enable-eplb", False)
    config = user.get("eplb-config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError as err:
            raise PlanError(f"--eplb-config {config!r} is not JSON: give eplb_config as a dict "
                            "(e.g. {num_redundant_experts: 32})") from err
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise PlanError(f"--eplb-config must be a dict (e.g. {{num_redundant_experts: 32}}), got {config!r}")
    redundant = config.get("num_redundant_experts", 0)
    if isinstance(redundant, bool) or not isinstance(redundant, int) or redundant < 0:
        raise PlanError(f"eplb_config.num_redundant_experts must be a whole number >= 0, got {redundant!r}")
    if not isinstance(enabled, bool):
        raise PlanError(f"--enable-eplb must be true or false, got {enabled!r}")
    if not enabled:
        if redundant:
            raise PlanError(f"eplb_config.num_redundant_experts = {redundant} needs EPLB (vLLM refuses it otherwise): "
                            "set enable_eplb: true, or leave num_redundant_experts out")
        return False, 0, 0
    if not spec.is_moe:
        raise PlanError("--enable-eplb balances the experts of an MoE model, and this model has none: leave it out")
    if user.get("enable-expert-parallel") is False:
        raise PlanError("--enable-eplb needs expert parallelism (vLLM: 'enable_expert_parallel must be True to use "
                        "EPLB'): leave enable_expert_parallel unset (the planner turns it on) or set it true")
    buffers = 1 if config.get("communicator") == "nixl" else 2
    return True, redundant, buffers


def check_eplb_layout(g: GpuInputs, chosen: Candidate, d: Decision) -> None:
    """The chosen layout runs EPLB as vLLM 0.32 requires, and the plan says what EPLB costs (user-set: never picked).

    vLLM: TP x PCP x DP > 1 (``config/parallel.py:567-580``) and ``num_experts + num_redundant_experts`` a multiple of
    the expert-parallel group, DP x TP GPUs (``model_executor/layers/fused_moe/layer.py:257-264``).
    """
    if not g.eplb:
        return
    spec = g.plan.spec
    ep = chosen.tp * g.dp
    if ep <= 1:
        raise PlanError(f"--enable-eplb needs the experts spread over more than one GPU (vLLM: TP x DP > 1) but the "
                        f"plan runs TP {chosen.tp} x DP {g.dp}: pin tensor_parallel_size or data_parallel_size above "
                        "1, or leave EPLB out")
    physical = spec.num_experts + g.redundant_experts
    if physical % ep:
        fit = next(r for r in range(g.redundant_experts, g.redundant_experts + ep) if (spec.num_experts + r) % ep == 0)
        raise PlanError(f"--enable-eplb spreads {spec.num_experts} + {g.redundant_experts} redundant = {physical} "
                        f"experts evenly over the expert-parallel group of {ep} GPUs (DP {g.dp} x TP {chosen.tp}), "
                        f"and {physical} is not a multiple of {ep}: set eplb_config.num_redundant_experts to {fit} "
                        f"(or another value that makes the total a multiple of {ep})")
    prec = g.plan.precision
    extra = max(eplb_bytes_per_stage(spec, chosen.tp, chosen.pp, prec.dense_bytes, prec.quant,
                                     g.plan.weights_total_bytes, moe_expert_shards(chosen.tp, g.dp),
                                     g.redundant_experts, g.eplb_buffers))
    buffers = "one copy (NIXL)" if g.eplb_buffers == 1 else "two copies (the buffer and the profile's reservation)"
    d.set("enable-eplb", True, f"set by you: {physical} experts over {ep} GPUs ({physical // ep} per GPU, "
          f"{g.redundant_experts} redundant) and EPLB's migration buffers of one MoE layer's local experts, "
          f"{buffers}: {extra / GIB:.2f} GiB more weights per GPU, counted before the KV cache")


def gpu_inputs(ctx: PlanInputs, gpu: Gpu, d: Decision) -> GpuInputs:
    """Block size, eager mode, wanted max_model_len and a checked user layout: what every layout shares."""
    eplb, redundant, eplb_buffers = eplb_inputs(ctx)
    block_size = _block_size(ctx, gpu, d)
    eager = bool(ctx.user.get("enforce-eager", False))
    want_len = wanted_max_model_len(ctx.spec, ctx.user, " (max_position_embeddings x rope scaling)")
    nodes_allowed = ctx.policy.max_nodes
    forced_tp, forced_pp = ctx.user.get("tensor-parallel-size"), ctx.user.get("pipeline-parallel-size")
    if forced_tp is not None:
        _check_forced_tp(ctx, gpu, int(forced_tp))
    if forced_pp is not None and int(forced_pp) > nodes_allowed * gpu.count // int(forced_tp or 1):
        raise PlanError(f"--pipeline-parallel-size {forced_pp} needs more GPUs than the group has "
                        f"({nodes_allowed} host(s) x {gpu.count}): add hosts to the group or lower it")
    dp, dp_nodes = _data_parallel(ctx, gpu)
    return GpuInputs(plan=ctx, gpu=gpu, block_size=block_size, eager=eager, want_len=want_len,
                     forced_tp=None if forced_tp is None else int(forced_tp),
                     forced_pp=None if forced_pp is None else int(forced_pp), dp=dp, dp_nodes=dp_nodes,
                     eplb=eplb, redundant_experts=redundant, eplb_buffers=eplb_buffers)


# --- Step 1: candidate layouts ------------------------------------------------------------------


def _tp_candidates(spec: ModelSpec, gpus: int, sd: SpecDecode | None = None, dcp: int = 1,
                   ctx: PlanInputs | None = None, dp: int = 1) -> list[int]:
    """TP sizes that fit ``gpus`` (the host's, or one data-parallel rank's share), divide the heads, split or
    evenly replicate the KV heads, are a multiple of the decode-context-parallel size ``dcp`` and (given ``ctx``)
    pass vLLM's load-time shape rules at DP ``dp``."""
    values = []
    for tp in TP_SIZES:
        if tp > gpus:
            break
        if spec.num_heads % tp or tp % dcp:
            continue
        if not spec.mla and tp >= spec.num_kv_heads and tp % spec.num_kv_heads:
            continue
        if sd is not None and check_draft_tp(sd, tp):
            continue  # the draft cannot run at this TP (speculative.check_draft_tp)
        if ctx is not None and not _shape_ok(ctx, tp, dp):
            continue  # vLLM would refuse the shard at load time (shape_rules)
        values.append(tp)
    return values


def _shape_ok(ctx: PlanInputs, tp: int, dp: int) -> bool:
    """Whether TP (x DP) passes vLLM's load-time shape rules with the user's expert-parallel setting, or, when EP is
    not pinned, with either setting (the EP decision then takes the one that passes)."""
    quant, version, pinned = ctx.precision.quant, ctx.rules.version, ctx.user.get("enable-expert-parallel")
    settings = (bool(pinned),) if pinned is not None else (False, True) if ctx.spec.is_moe else (False,)
    return any(not shape_violations(ctx.spec, quant, tp, ep, dp, version) for ep in settings)


def candidate_layouts(g: GpuInputs) -> list[tuple[int, int]]:
    """(TP, PP) layouts, smallest first: TP inside the NVLink domain, then beyond it, then PP across hosts."""
    if g.forced:
        return [(g.forced_tp or 1, g.forced_pp or 1)]
    spec, gpu = g.plan.spec, g.gpu
    tps = _tp_candidates(spec, gpu.count // g.dp_local, g.plan.speculative,
                         int(g.plan.user.get("decode-context-parallel-size") or 1), g.plan, g.dp)
    if not tps:
        raise PlanError(f"no tensor-parallel size divides the model's {spec.num_heads} heads with "
                        f"{gpu.count} GPU(s): use a host with a GPU count that divides {spec.num_heads}")
    layouts = [(tp, 1) for tp in tps if tp <= gpu.nvlink_domain]
    layouts += [(tp, 1) for tp in tps if tp > gpu.nvlink_domain]
    if g.dp_nodes == 1:  # data parallelism across hosts keeps every rank inside one host: no pipeline stages
        layouts += [(tps[-1], pp) for pp in range(2, g.plan.policy.max_nodes + 1)]
    return layouts


# --- Step 2: pick -------------------------------------------------------------------------------


def _moe_dp(g: GpuInputs) -> int:
    """The data-parallel ranks whose tokens an MoE's experts gather (scheduler._moe_dp_step); 1 for a dense model."""
    return g.dp if g.plan.spec.is_moe else 1


def _settle_scheduler(g: GpuInputs, tp: int, pp: int, util: Utilization) -> Candidate:
    """Evaluate a layout at the profile's scheduler, then let scheduler and KV pool settle together."""
    ctx, world = g.plan, tp * pp
    sched = schedule(ctx, g.gpu, UNBOUNDED_KV_TOKENS, g.want_len, world, _moe_dp(g))
    cand = evaluate(g, tp=tp, pp=pp, util=util.value, outside=util.outside, max_model_len=g.want_len, sched=sched)
    for _pass in range(SCHEDULER_SETTLE_PASSES):
        settled = schedule(ctx, g.gpu, max(cand.kv_tokens, 1), g.want_len, world, _moe_dp(g))
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
        fix = (f"lower data_parallel_size {g.dp} (each rank holds a whole copy on at most {gpu.count // g.dp_local} "
               "GPU(s))" if g.dp > 1 else f"add GPUs/hosts (policy max_nodes={g.plan.policy.max_nodes})")
        raise PlanError(
            f"the model does not fit: at TP={last.tp} PP={last.pp} each {gpu.name} needs "
            f"{need / GIB:.1f} GiB before any KV cache but the budget is {mem.budget / GIB:.1f} GiB; "
            f"needs about {(need * last.tp * last.pp) / GIB + 2:.0f} GiB of GPU memory in all: {fix} "
            "or use a quantized checkpoint")
    d.warnings.append(f"KV cache holds only {last.kv_tokens} tokens, fewer than {prof.min_concurrency} "
                      f"{prof.name} requests of {prof.request_tokens} tokens: expect queueing; add GPUs")


def pick_layout(g: GpuInputs, layouts: list[tuple[int, int]], d: Decision) -> Pick:
    """The first layout whose pool is useful and fits a full request; else the first useful one (the
    length gets clamped); else the largest that holds any KV cache (with a warning)."""
    prof = g.plan.profile
    fallback: tuple[Candidate, Utilization] | None = None
    last: tuple[Candidate, Utilization] | None = None
    for tp, pp in layouts:
        # A dense model's data-parallel ranks are independent engines, each exactly a TP x PP instance (vLLM 0.32
        # v1/engine/core.py:1478-1482); an MoE model's ranks join one DP group (core.py:1473-1476), with NCCL.
        ranks = g.dp if g.plan.spec.is_moe else 1
        util = utilization(g.gpu, min(tp * pp * ranks, g.gpu.count), g.plan.policy, g.plan.rules, g.plan.user)
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


def _layout_label(tp: int, dp: int, expert_parallel: bool, replicas: int) -> str:
    """``DP 8 x TP 1 with EP``, ``TP 8 with EP``, ``TP 1 x 8 replicas``."""
    if dp > 1:
        return f"DP {dp} x TP {tp}" + (" with EP" if expert_parallel else "")
    return f"TP {tp}" + (" with EP" if expert_parallel else "") + (f" x {replicas} replicas" if replicas > 1 else "")


def _moe_comparison_applies(g: GpuInputs) -> bool:
    """An MoE on one host of several GPUs, no layout pinned (TP, PP, DP), expert parallel not turned off, no pinned
    KV size, and a target vLLM whose source the comparison follows."""
    ctx, user = g.plan, g.plan.user
    return (ctx.spec.is_moe and not g.forced and g.dp == 1 and "data-parallel-size" not in user
            and ctx.policy.max_nodes == 1 and g.gpu.count > 1 and ctx.rules.version >= MOE_DP_MIN_VERSION
            and user.get("enable-expert-parallel", True) is not False and "kv-cache-memory-bytes" not in user)


Settled = tuple[Candidate, int, bool]  # settle_max_model_len's (candidate, max_model_len, clamped)


def compare_moe_layouts(g: GpuInputs, pick: Pick, d: Decision) -> tuple[GpuInputs, Pick, Settled | None]:
    """For an MoE on one host whose picked TP layout needs more than one GPU per replica: that layout (with EP)
    against DP-attention with EP over all the host's GPUs (DP = GPUs / T ranks of TP T, for every T that divides the
    heads), by predicted KV capacity per host. An MoE that fits one GPU keeps its independent replicas (no lock-step
    between ranks, no all-to-all over the interconnect), with a note saying so; DP-attention is for MoE replicas that
    span GPUs, where TP would replicate an MLA latent cache.

    DP-attention (vLLM 0.32 ``--data-parallel-size D --tensor-parallel-size T --enable-expert-parallel``): each rank
    holds the attention and dense weights split by T and its own KV cache, the routed experts are spread over all
    D x T GPUs (:func:`.model.moe_expert_shards`). Capacity per host: a DP layout's ranks each hold their own KV cache,
    so the host holds D x the per-rank tokens; a TP layout's replicas likewise (GPUs / TP of them). Under TP an MLA
    model's latent KV cache is not split (``max_tp_shards=1``, ``model_executor/layers/attention/mla_attention.py:
    1354-1357``: every TP rank stores the whole latent), so its capacity does not grow with TP while DP multiplies it.
    A DP layout counts only if each rank holds the profile's ``min_concurrency`` requests and one full-length
    request; the larger capacity wins (ties keep TP). Every layout is compared as it will be planned (max_model_len
    and scheduler settled), so the figures are the prediction's. Returns the inputs, pick and settled candidate to
    plan with (``None``: the comparison did not run, settle as usual).
    """
    if not _moe_comparison_applies(g):
        return g, pick, None
    ctx, gpu = g.plan, g.gpu
    prof = ctx.profile
    tp_settled = settle_max_model_len(g, pick)
    tp_cand = tp_settled[0]
    replicas = max(1, gpu.count // tp_cand.world)
    if tp_cand.world == 1:  # fits one GPU: independent replicas, no lock-step and no all-to-all between the GPUs
        d.note("data-parallel-size", f"not set: the MoE fits one GPU per replica: {replicas} independent replicas "
               "(no lock-step, no all-to-all between GPUs); pin data_parallel_size for DP-attention with EP")
        return g, pick, tp_settled
    tp_total = tp_cand.kv_tokens * replicas
    tp_label = _layout_label(tp_cand.tp, 1, uses_expert_parallel(g, tp_cand.tp, tp_cand.pp), replicas)
    best: tuple[int, GpuInputs, Pick, Settled] | None = None
    for tp in _tp_candidates(ctx.spec, gpu.count, ctx.speculative, int(ctx.user.get("decode-context-parallel-size") or 1)):
        dp = gpu.count // tp
        if dp < 2 or gpu.count % tp or not _shape_ok(ctx, tp, dp):
            continue
        gd = replace(g, dp=dp)
        util = utilization(gpu, gpu.count, ctx.policy, ctx.rules, ctx.user)
        cand = _settle_scheduler(gd, tp, 1, util)
        useful = cand.kv_tokens >= prof.min_concurrency * prof.request_tokens
        if cand.num_blocks <= 0 or not useful or not cand.fits_one_request:
            continue
        dp_pick = Pick(candidate=cand, utilization=util, settle_util=util.value)
        settled = settle_max_model_len(gd, dp_pick)
        if best is None or settled[0].kv_tokens * dp > best[0]:
            best = (settled[0].kv_tokens * dp, gd, dp_pick, settled)
    if best is None:
        d.note("data-parallel-size", f"not set: no DP-attention layout with EP over the {gpu.count} GPUs holds the "
               f"weights, {prof.min_concurrency} {prof.name} requests and one full-length request per rank; "
               f"{tp_label}: {tp_total:,} tokens")
        return g, pick, tp_settled
    dp_total, gd, dp_pick, dp_settled = best
    dp_label = _layout_label(dp_settled[0].tp, gd.dp, True, 1)
    if dp_total <= tp_total:
        d.note("data-parallel-size", f"not set: MoE layouts compared by predicted KV capacity on the host "
               f"({prof.name} profile): {tp_label}: {tp_total:,} tokens vs {dp_label}: {dp_total:,} tokens")
        return g, pick, tp_settled
    line = f"{dp_label}: {dp_total:,} tokens vs {tp_label}: {tp_total:,} tokens"
    return replace(gd, dp_picked=line), dp_pick, dp_settled


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
        sched = schedule(ctx, g.gpu, max(chosen.kv_tokens, 1), final_len, chosen.world, _moe_dp(g))
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
    if g.tp_reason:
        d.set("tensor-parallel-size", tp, g.tp_reason)
        if tp > gpu.nvlink_domain:
            d.warnings.append(f"TP={tp} crosses PCIe: expect slower all-reduce than inside an NVLink domain")
    elif g.forced_tp is not None:
        d.set("tensor-parallel-size", tp, "set by you; divides the attention heads")
    elif g.dp_picked:
        d.set("tensor-parallel-size", tp, f"per data-parallel rank (attention split by TP inside a rank, experts "
              f"over all {g.dp * tp} GPUs): the layout with the most KV cache, {g.dp_picked}; divides "
              f"{spec.num_heads} heads")
    else:
        why = (f"smallest TP that holds the weights ({chosen.memory.weights / GIB:.1f} GiB/GPU) and a KV pool of "
               f"{chosen.kv_tokens} tokens (>= {prof.min_concurrency} {prof.name} requests); divides "
               f"{spec.num_heads} heads")
        if tp > gpu.nvlink_domain:
            why += f"; spans beyond the NVLink domain of {gpu.nvlink_domain} (PCIe all-reduce is slower)"
            d.warnings.append(f"TP={tp} crosses PCIe: expect slower all-reduce than inside an NVLink domain")
        elif tp > 1:
            why += f"; inside one {gpu.interconnect} domain"
        if g.dp > 1 and g.dp_nodes > 1:
            why += (f"; {g.dp_local} data-parallel ranks per host leave each at most {gpu.count // g.dp_local} of a "
                    f"host's {gpu.count} GPUs")
        elif g.dp > 1:
            why += f"; {g.dp} data-parallel ranks leave each at most {gpu.count // g.dp} of the {gpu.count} GPUs"
        d.set("tensor-parallel-size", tp, why)
    if pp > 1 and tp * pp > gpu.count:
        d.set("pipeline-parallel-size", pp, f"one host's {gpu.count} GPUs are not enough: {pp} stages across hosts")
    elif g.forced_pp is not None:
        d.set("pipeline-parallel-size", pp, "set by you")
    if g.dp_nodes > 1:
        # Data parallelism across the group's hosts: one container per host with its dp_local ranks, so here
        # gpus_per_replica counts ONE host's GPUs (dp_local x TP), not the group's (as it does for TP x PP across hosts).
        nodes, per_replica, replicas = g.dp_nodes, g.dp_local * tp, 1
        d.set("data-parallel-size", g.dp, _data_parallel_nodes_reason(g, tp) + _moe_engines_note(g, chosen))
        if per_replica < gpu.count:
            d.warnings.append(f"data parallelism across {nodes} hosts uses {per_replica} of each host's {gpu.count} "
                              f"GPUs ({g.dp_local} ranks x TP {tp}): the other {gpu.count - per_replica} stay idle; "
                              f"raise data_parallel_size to {nodes * (gpu.count // tp)} to use them")
        return Parallel(tensor_parallel_size=tp, pipeline_parallel_size=pp, replicas=replicas,
                        gpus_per_replica=per_replica, nodes=nodes, data_parallel_size=g.dp)
    nodes = max(1, math.ceil(tp * pp / gpu.count))
    per_replica = g.dp * tp * pp  # every data-parallel rank of a replica runs in its one container
    replicas = max(1, gpu.count // per_replica) if nodes == 1 else 1
    if g.dp > 1:
        d.set("data-parallel-size", g.dp, _data_parallel_reason(g, tp, pp, replicas) + _moe_engines_note(g, chosen))
    return Parallel(tensor_parallel_size=tp, pipeline_parallel_size=pp, replicas=replicas,
                    gpus_per_replica=per_replica, nodes=nodes, data_parallel_size=g.dp)


def _data_parallel_reason(g: GpuInputs, tp: int, pp: int, replicas: int) -> str:
    """Why a replica holds DP x TP x PP GPUs, and what the per-engine figures mean."""
    count = g.gpu.count
    shape = f"DP x TP = {g.dp} x {tp}" if pp == 1 else f"DP x TP x PP = {g.dp} x {tp} x {pp}"
    who = (f"picked by predicted KV capacity on the host ({g.plan.profile.name} profile): {g.dp_picked}"
           if g.dp_picked else "set by you")
    return (f"{who}: {g.dp} engines in one container per replica, vLLM balancing requests between them; "
            f"{shape} = {g.dp * tp * pp} GPUs per replica, {replicas} replica(s) on the host's {count} GPUs; "
            + _engines_hold(g))


def _data_parallel_nodes_reason(g: GpuInputs, tp: int) -> str:
    """Why each host of the group runs dp_local ranks, and what the per-engine figures mean."""
    return (f"set by you: {g.dp} engines over the multi-node group's {g.dp_nodes} hosts, {g.dp_local} per host "
            f"(DP x TP = {g.dp_local} x {tp} = {g.dp_local * tp} GPUs of each host, one container per host); the "
            "first host serves the API and vLLM balances requests over every engine; " + _engines_hold(g))


def _engines_hold(g: GpuInputs) -> str:
    """What each data-parallel engine holds: the whole model (dense), or an MoE's attention with shared experts."""
    if not g.plan.spec.is_moe:
        return "each engine holds the whole model, so memory, KV cache and the logged KV size are per engine"
    return ("each engine holds the attention and dense weights and its own KV cache, the routed experts are spread "
            "over every rank's GPUs (DP x TP, vLLM's expert-parallel group), so the KV cache and the logged KV size "
            "are per engine")


def _moe_engines_note(g: GpuInputs, chosen: Candidate) -> str:
    """An MoE's data-parallel prediction: the KV line each engine logs and the sum (dense plans: unchanged, "")."""
    if not g.plan.spec.is_moe:
        return ""
    return (f"; vLLM logs one KV line per engine: {chosen.kv_tokens:,} tokens each, "
            f"{chosen.kv_tokens * g.dp:,} in all over the {g.dp} engines")


def _record_features(g: GpuInputs, chosen: Candidate, d: Decision) -> None:
    """Emit expert parallelism, eager/compile mode, explicit KV bytes, the sliding-window note, user args."""
    spec, user = g.plan.spec, g.plan.user
    ep = expert_parallel(g, chosen.tp, chosen.pp)
    if ep.kind in ("better", "required"):
        d.set("enable-expert-parallel", True, ep.why)
    elif ep.kind == "off":
        d.note("enable-expert-parallel", ep.why)
    if spec.is_moe and g.dp > 1:
        d.warnings.append(f"MoE with data parallelism: vLLM runs the {g.dp} ranks as one group in lock step (an idle "
                          "rank runs dummy steps)")
    if g.eager:
        d.set("enforce-eager", True, "set by you: no CUDA graphs (faster start, slower decode)")
    else:
        d.note("optimization-level", "left at vLLM's default -O2 (compile + full and piecewise CUDA graphs); "
               "O3 is identical in this version")
    if "kv-cache-memory-bytes" in user:
        d.set("kv-cache-memory-bytes", user["kv-cache-memory-bytes"], "set by you: vLLM skips its utilisation budget")
    if chosen.layout.dcp > 1:
        d.note("decode-context-parallel", f"set by you: each of the {chosen.layout.dcp} DCP ranks (inside TP "
               f"{chosen.tp}) keeps 1/{chosen.layout.dcp} of a request's full-attention tokens, so a request needs "
               f"{chosen.layout.blocks_per_request} blocks per GPU instead of about {chosen.layout.dcp}x that "
               "(v1/kv_cache_interface.py:602-607 in 0.32, :643-648 in 0.33)")
    if len(chosen.layout.groups) > 1 or spec.state is not None:
        d.note("kv-cache-groups", describe_layout(spec, chosen.layout, chosen.tp, g.plan.rules.version))
    if spec.sliding_window:
        d.note("sliding-window", f"{spec.layer_kinds.count('sliding')} of {spec.num_layers} layers keep only "
               f"{spec.sliding_window} tokens: the hybrid KV manager sizes those layers by the window")
    d.keep_user_args(user)


def _record_weights(g: GpuInputs, chosen: Candidate, d: Decision) -> None:
    """One reason line per part of the fullest GPU's weights (``weights.<part>``): what TP, EP, DP and PP split."""
    ctx = g.plan
    spec, prec = ctx.spec, ctx.precision
    dp = g.dp if spec.is_moe else 1
    split = weight_split(spec, chosen.tp, chosen.pp, prec.dense_bytes, prec.quant, moe_expert_shards(chosen.tp, dp),
                         uses_expert_parallel(g, chosen.tp, chosen.pp), dp=g.dp,
                         scale=checkpoint_scale(spec, prec.dense_bytes, prec.quant, ctx.weights_total_bytes),
                         version=ctx.rules.text)
    d.reasons.update(split.reasons())


def _record_activation(g: GpuInputs, chosen: Candidate, d: Decision) -> None:
    """The profile run's activation peak per term (``activation``), and for a vision model whether vLLM profiles the
    encoder and keeps an encoder cache, or skips both on a text-only setting (``multimodal-profile``)."""
    ctx = g.plan
    spec = ctx.spec
    mm = (multimodal_profile(spec.vision, ctx.user, spec.hidden_size, chosen.max_num_batched_tokens,
                             chosen.max_num_seqs, chosen.max_model_len, ctx.precision.act_bytes, chosen.tp)
          if spec.vision is not None else None)
    dp = g.dp if spec.is_moe else 1
    terms = activation_terms(spec, chosen.tp, chosen.max_num_batched_tokens, chosen.max_num_seqs,
                             ctx.precision.act_bytes, uses_expert_parallel(g, chosen.tp, chosen.pp), dp, mm,
                             ctx.rules.version >= MODULAR_MOE_SINCE)
    d.note("activation", terms.describe())
    if mm is not None:
        d.note("multimodal-profile", mm.reason)
    elif spec.multimodal:
        d.note("multimodal-profile", fallback_reason(spec.vision, ctx.user))


def _record_observed(g: GpuInputs, chosen: Candidate, d: Decision) -> None:
    """What an identical host's vLLM logged, when preflight passed it (observed.py): one reason per component it
    replaced on the chosen layout (``observed.<component>``) and a summary (``observed``), or why it was not used."""
    obs = g.plan.observed
    if obs is None:
        return
    if chosen.observed_used:
        d.reasons.update(observed_reasons(obs, chosen.observed_used))
        return
    why = (f"not used: vLLM {obs.vllm_version} ran it, this plan is for {g.plan.rules.text}"
           if obs.vllm_version != g.plan.rules.text else
           f"not used: it ran TP {obs.tp} x PP {obs.pp} x DP {obs.dp}{' eager' if obs.eager else ''}, this plan "
           f"runs TP {chosen.tp} x PP {chosen.pp} x DP {g.dp}{' eager' if g.eager else ''} (the estimate stays)")
    d.note("observed", f"{observed_reasons(obs, {})['observed']}; {why}")


def _record_speculative(g: GpuInputs, chosen: Candidate, d: Decision) -> None:
    """Emit the user's speculative_config with what the draft costs on the chosen layout (none: nothing)."""
    sd = g.plan.speculative
    if sd is None:
        return
    spec, kv_bytes = g.plan.spec, g.plan.precision.kv_bytes
    same, extra = draft_kv(sd, spec, chosen.tp, kv_bytes)
    d.set("speculative-config", sd.config, describe(sd, spec, chosen.draft_weights, same, extra, chosen.tp, kv_bytes))


def _record_lora(g: GpuInputs, chosen: Candidate, d: Decision) -> None:
    """Emit --enable-lora with the adapter slots' bytes on the chosen layout (LoRA off: nothing)."""
    slots = g.plan.lora
    if slots is None:
        return
    per_gpu = max(lora_bytes_per_stage(g.plan.spec, slots, chosen.tp, chosen.pp))
    d.set("enable-lora", True, describe_lora(g.plan.spec, slots, per_gpu, chosen.tp))


def _apply_targets(g: GpuInputs, d: Decision) -> GpuInputs:
    """A profile with service targets chooses TP, max_num_seqs and max_num_batched_tokens (:mod:`.targets`)."""
    prof = g.plan.profile
    if not prof.has_targets:
        return g
    why_not = targets.not_applicable(g.plan, g)
    if why_not:
        d.note("targets", f"{prof.describe_targets()}: not used to choose the plan ({why_not}); the plan is "
               "the profile's without them")
        return g
    choice = targets.choose(g, candidate_layouts(g))
    if choice is None:
        d.note("targets", f"{prof.describe_targets()}: no layout holds one {prof.name} request, the plan is the "
               "profile's without them")
        return g
    d.note("targets", choice.summary)
    if not choice.met:
        d.warnings.append(f"service targets not met: {choice.summary}")
    return targets.apply(g, choice)


def plan_gpu(ctx: PlanInputs, gpu: Gpu, d: Decision) -> Plan:
    """Plan one host (or a multi-host group under ``policy.max_nodes``) of identical GPUs."""
    g = gpu_inputs(ctx, gpu, d)
    g = _apply_targets(g, d)
    warned = len(d.warnings)
    pick = pick_layout(g, candidate_layouts(g), d)
    compared_g, pick, settled = compare_moe_layouts(g, pick, d)
    if compared_g is not g:  # data parallelism won: the TP layouts' warnings no longer apply
        del d.warnings[warned:]
    g = compared_g
    pick.utilization.record(d)
    chosen, final_len, clamped = settled if settled is not None else settle_max_model_len(g, pick)
    check_eplb_layout(g, chosen, d)
    schedule(g.plan, gpu, max(chosen.kv_tokens, 1), final_len, chosen.world, _moe_dp(g)).record(d, dp=g.dp)
    _record_max_model_len(g, final_len, clamped, d)
    parallel = _record_layout(g, chosen, d)
    _record_weights(g, chosen, d)
    _record_activation(g, chosen, d)
    _record_observed(g, chosen, d)
    _record_speculative(g, chosen, d)
    _record_lora(g, chosen, d)
    _record_features(g, chosen, d)
    return assemble_plan(ctx, "cuda", d, chosen, parallel, gpu)
