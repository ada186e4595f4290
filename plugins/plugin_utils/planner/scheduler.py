"""The scheduler limits: max_num_seqs and max_num_batched_tokens from the profile and the KV capacity."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .context import PlanInputs
from .decision import Decision
from .errors import PlanError
from .inputs import Gpu
from .rules import SchedulerDefaults, scheduler_defaults

# vLLM's defaults depend only on the GPU, world size and mode, and every layout re-asks: cache them.
_defaults = lru_cache(maxsize=256)(scheduler_defaults)
UNBOUNDED_KV_TOKENS = 10**9  # a first KV estimate so large that only the profile caps max_num_seqs
CUDA_GRAPH_SIZE_STEP = 8  # max_num_seqs >= 16 is rounded down to a multiple of this (a captured size)
# The smallest step the planner divides an MoE's data-parallel step down to (vLLM's own default on the small tier,
# rules.scheduler_defaults): below it a long prompt takes many steps to prefill.
MOE_DP_MIN_BATCHED_TOKENS = 2048


@dataclass(slots=True)  # built in the hot loop: slots, not frozen (frozen init costs ~2x); never mutated
class Schedule:
    """max_num_seqs and max_num_batched_tokens, each with its reason."""

    max_num_seqs: int
    max_num_batched_tokens: int
    seqs_reason: str
    tokens_reason: str

    def record(self, d: Decision, dp: int = 1) -> None:
        """Emit both engine args (``dp``: the data-parallel engines that each apply them)."""
        # Each data-parallel rank is its own engine with its own scheduler (vLLM 0.32 v1/engine/core.py:1473-1482),
        # so both limits apply per rank ("max_num_seqs, which applies per data-parallel rank", config/scheduler.py:99)
        # and vLLM's own defaults come from TP x PP alone (engine/arg_utils.py:3103).
        note = f"; per data-parallel rank (each of the {dp} engines schedules its own)" if dp > 1 else ""
        d.set("max-num-seqs", self.max_num_seqs, self.seqs_reason + note)
        d.set("max-num-batched-tokens", self.max_num_batched_tokens, self.tokens_reason + note)


def _max_num_seqs(ctx: PlanInputs, defaults: SchedulerDefaults, kv_tokens_estimate: int) -> tuple[int, str]:
    """The user's value, else as many requests as the KV cache holds, capped by the profile's goal."""
    if "max-num-seqs" in ctx.user:
        return int(ctx.user["max-num-seqs"]), "set by you"
    prof = ctx.profile
    per_request = prof.request_tokens
    fit = max(1, kv_tokens_estimate // per_request)
    cap = min(prof.max_num_seqs_cap, defaults.max_num_seqs * (2 if prof.goal == "throughput" else 1))
    seqs = max(1, min(fit, cap))
    if seqs >= 16:
        seqs -= seqs % CUDA_GRAPH_SIZE_STEP  # align with CUDA-graph capture sizes
    return seqs, (f"{prof.name}: KV holds ~{fit} requests of {per_request} tokens; capped at {cap} "
                  f"({'latency' if prof.goal == 'latency' else prof.goal} profile, vLLM {ctx.rules.series} default "
                  f"{defaults.max_num_seqs} for this GPU{_tier_note(defaults)})")


def _tier_note(defaults: SchedulerDefaults) -> str:
    """``; small tier: vLLM keeps cc 12.1 on it`` when vLLM keeps a large GPU on the small tier (GB10, 0.33)."""
    return f"; {defaults.tier}" if defaults.tier.startswith("small") else ""


def _max_num_batched_tokens(ctx: PlanInputs, defaults: SchedulerDefaults, gpu: Gpu | None, seqs: int,
                            max_model_len: int, moe_dp: int = 1) -> tuple[int, str]:
    """The user's value, else a step size for the profile's goal (vLLM's default on CPU)."""
    sd = ctx.speculative
    if "max-num-batched-tokens" in ctx.user:
        tokens = int(ctx.user["max-num-batched-tokens"])
        if sd is not None and tokens < seqs * sd.query_len and ctx.lora is not None:
            raise PlanError(f"--max-num-batched-tokens {tokens} is below max_num_seqs {seqs} x (1 + {sd.num_tokens} "
                            f"draft tokens) = {seqs * sd.query_len}, which vLLM refuses with LoRA ('Consider "
                            "increasing max_num_batched_tokens or decreasing num_speculative_tokens'): raise it to "
                            f"{seqs * sd.query_len} or leave it to the planner")
        if sd is not None and tokens < seqs * sd.query_len:
            return tokens, (f"set by you; below max_num_seqs {seqs} x (1 + {sd.num_tokens} draft tokens) = "
                            f"{seqs * sd.query_len}: a decode step of every sequence does not fit one batch")
        return tokens, "set by you"
    prof = ctx.profile
    if prof.goal == "latency":
        tokens = max(2048, min(8192, defaults.max_num_batched_tokens))
        reason = (f"{prof.name}: {tokens}-token prefill chunks keep decode steps short "
                  f"(p99 target {prof.p99_latency_ms} ms) with chunked prefill on; vLLM {ctx.rules.series} default "
                  f"{defaults.max_num_batched_tokens} for this GPU{_tier_note(defaults)}")
    elif prof.goal == "throughput":
        tokens = max(8192, defaults.max_num_batched_tokens * 2)
        reason = f"{prof.name}: large steps ({tokens} tokens) raise throughput; latency target is loose"
    else:
        tokens = max(8192, defaults.max_num_batched_tokens)
        reason = f"{prof.name}: {tokens}-token chunks prefill {prof.prompt_tokens}-token prompts in few steps"
    if gpu is None:
        tokens = defaults.max_num_batched_tokens
        reason = f"vLLM's CPU default ({tokens} = 2048 x world size)"
    elif moe_dp > 1:
        tokens, reason = _moe_dp_step(tokens, reason, moe_dp)
    tokens = min(tokens, seqs * max_model_len)
    if sd is not None and tokens < seqs * sd.query_len:
        tokens = seqs * sd.query_len
        reason += (f"; raised to max_num_seqs {seqs} x (1 + {sd.num_tokens} draft tokens) = {tokens} so one decode "
                   "step of every sequence fits a batch (vLLM's uniform_decode_query_len)")
    return tokens, reason


def _moe_dp_step(tokens: int, reason: str, dp: int) -> tuple[int, str]:
    """An MoE's data-parallel step: the profile's step divided by DP (not below MOE_DP_MIN_BATCHED_TOKENS).

    vLLM 0.32's default all2all backend (``allgather_reducescatter``, ``config/parallel.py:219``) gathers every DP
    rank's hidden states and router logits before the experts (``distributed/device_communicators/all2all.py:
    109-124``), and the fused-MoE workspaces are sized for the whole gathered batch, unchunked
    (``model_executor/layers/fused_moe/modular_kernel.py:1274-1298``: ``M_chunk = M_full``): each rank's experts
    see DP x max_num_batched_tokens rows. Dividing the step by DP keeps that batch at one engine's size.
    """
    step = max(MOE_DP_MIN_BATCHED_TOKENS, tokens // dp)
    if step >= tokens:
        return tokens, reason
    return step, (f"{reason}; divided by the {dp} data-parallel ranks ({tokens} / {dp}, at least "
                  f"{MOE_DP_MIN_BATCHED_TOKENS}): vLLM's allgather all2all gathers every rank's tokens before the "
                  f"experts, so each rank's experts see {dp} x {step} = {dp * step} rows")


def schedule(ctx: PlanInputs, gpu: Gpu | None, kv_tokens_estimate: int, max_model_len: int,
             world: int, moe_dp: int = 1) -> Schedule:
    """max_num_seqs and max_num_batched_tokens from the profile and the predicted KV capacity (``moe_dp``: an MoE's
    data-parallel ranks, whose experts see every rank's tokens; 1 otherwise)."""
    if ctx.targeted is not None:  # chosen for the profile's service targets (targets.choose), pins included
        seqs, tokens, seqs_reason, tokens_reason = ctx.targeted
        return Schedule(max_num_seqs=seqs, max_num_batched_tokens=tokens, seqs_reason=seqs_reason,
                        tokens_reason=tokens_reason)
    defaults = _defaults(gpu.name if gpu else None, gpu.memory_mib / 1024 if gpu else None,
                         world if gpu is None else 1, ctx.policy.offline,
                         gpu.compute_capability if gpu else None, ctx.rules.small_tier_capabilities)
    seqs, seqs_reason = _max_num_seqs(ctx, defaults, kv_tokens_estimate)
    tokens, tokens_reason = _max_num_batched_tokens(ctx, defaults, gpu, seqs, max_model_len, moe_dp)
    return Schedule(max_num_seqs=seqs, max_num_batched_tokens=tokens, seqs_reason=seqs_reason,
                    tokens_reason=tokens_reason)
