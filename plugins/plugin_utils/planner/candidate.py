"""One candidate GPU layout (TP x PP) evaluated against the memory model: blocks, tokens, concurrency."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .context import GpuInputs, PlanInputs
from .errors import PlanError
from .hardware import CUDA_CONTEXT_MIB, MIB
from .lora import lora_bytes_per_stage
from .memory import (
    MODULAR_MOE_SINCE,
    NON_TORCH_BASE,
    NON_TORCH_MULTI_GPU,
    KvLayout,
    LayerCounts,
    Memory,
    activation_bytes,
    checkpoint_estimate,
    cuda_graph_bytes,
    eplb_bytes_per_stage,
    kv_layout,
    prefix_caching,
    stage_kind_counts,
    state_blocks_per_request,
    weights_per_stage,
)
from .model import ModelSpec, moe_expert_shards, stage_layers
from .multimodal import multimodal_profile
from .observed import COMPONENTS
from .rules import VersionRules
from .scheduler import Schedule
from .shape_rules import expert_parallel_required
from .speculative import check_draft_tp, draft_kv, draft_weight_bytes


@dataclass(slots=True)  # built in the hot loop: slots, not frozen (frozen init costs ~2x); never mutated
class Candidate:
    """A layout with its scheduler values and what the KV pool of its limiting GPU holds."""

    tp: int
    pp: int
    memory: Memory
    num_blocks: int
    layout: KvLayout
    kv_tokens: int
    concurrency: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    fits_one_request: bool
    layer_counts: LayerCounts = ()  # layer kinds on the limiting GPU
    in_flight: int = 0
    draft_kv_per_token: int = 0  # KV bytes per token of draft layers with another page (speculative.draft_kv)
    draft_weights: int = 0  # the draft's weight bytes on a last-stage GPU (speculative decoding), in ``memory``
    # component -> (estimate, value used) in bytes on the limiting GPU, when an observation sized it (observed.py)
    observed_used: dict[str, tuple[int, int]] | None = None

    @property
    def world(self) -> int:
        """GPUs one instance of this layout uses."""
        return self.tp * self.pp

    def longest_fitting_len(self, spec: ModelSpec, kv_dtype_bytes: int, upper: int) -> int:
        """Largest max_model_len whose one request fits this KV pool (vLLM binary-searches the same)."""
        low, high = 0, upper
        while low < high:
            mid = (low + high + 1) // 2
            need = kv_layout(spec, self.layer_counts, self.tp, kv_dtype_bytes, self.layout.block_size, mid,
                             self.in_flight, self.draft_kv_per_token, self.layout.state_blocks,
                             self.layout.num_spec, self.layout.dcp).needed_bytes_per_request
            if need <= max(self.memory.kv_cache, 0):
                low = mid
            else:
                high = mid - 1
        return low


def non_torch_bytes(rules: VersionRules, world: int) -> int:
    """Memory allocated outside torch after vLLM's snapshot (charged to the budget).

    The cuBLAS handles (NON_TORCH_BASE) count here until 0.32; 0.33 creates them before the snapshot
    (gpu_worker.py:519-529), so they move to the outside-budget headroom (headroom.utilization).
    """
    non_torch = (0 if rules.cublas_outside_budget else NON_TORCH_BASE) + (NON_TORCH_MULTI_GPU if world > 1 else 0)
    if rules.version < (0, 7, 0):
        non_torch += CUDA_CONTEXT_MIB * MIB  # 0.6.x measured non-torch memory from before the CUDA context
    return non_torch


def decode_context_parallel(ctx: PlanInputs, tp: int) -> int:
    """The user's ``decode_context_parallel_size`` (1 when unset), checked as vLLM checks it: DCP reuses the TP ranks,
    so TP must be a multiple of it (config/parallel.py:590-596 in 0.32, :594-600 in 0.33); only full-attention
    layers are planned sharded (the KV of sliding, chunked and state layers under DCP is not modelled: refused)."""
    dcp = int(ctx.user.get("decode-context-parallel-size") or 1)
    if dcp <= 1:
        return 1
    if tp % dcp:
        raise PlanError(f"--decode-context-parallel-size {dcp} needs --tensor-parallel-size divisible by it (vLLM: "
                        f"'tp_size={tp} must be divisible by dcp_size={dcp}'): set --tensor-parallel-size to a "
                        f"multiple of {dcp}")
    if any(k not in ("full", "mlp") for k in ctx.spec.layer_kinds):
        raise PlanError("--decode-context-parallel-size on a model with sliding-window, chunked or state layers is "
                        "not planned: leave it unset")
    return dcp


#: Where vLLM's own recipes (vllm-project/recipes @ 8959cf64189c71d36e11c6a30335f923f261b1f7) run an MoE that fits
#: its GPUs as plain TP, without --enable-expert-parallel; and where they pair data parallelism with EP.
RECIPES_PLAIN_TP = ("OpenAI/GPT-OSS.md:46-47 (gpt-oss-120b --tensor-parallel-size 2/4), GLM/GLM.md:43-44 (GLM-4.5-Air-FP8 "
                    "TP 8), Qwen/Qwen3-Next.md:25-26 (TP 4), Llama/Llama4-Scout.md:110-112")
RECIPES_DP_EP = "DeepSeek/DeepSeek-V3.md:70-73 (--data-parallel-size 8 --enable-expert-parallel)"


@dataclass(frozen=True)
class ExpertParallel:
    """Whether an MoE layout runs with ``--enable-expert-parallel``, and the true reason: set by you, required (a
    vLLM shape rule makes plain TP impossible), better (data parallelism: DP-attention with EP), or off (plain TP)."""

    on: bool
    kind: str  # "none" (not an MoE / one GPU), "pinned", "required", "better", "off"
    why: str


def expert_parallel(g: GpuInputs, tp: int, pp: int) -> ExpertParallel:
    """The EP decision for an MoE layout of TP x PP (x the inputs' DP), by rule.

    - pinned: the user's ``enable_expert_parallel`` always wins (vLLM then applies its shape rules to it);
    - required by EPLB: ``--enable-eplb`` runs only with EP;
    - better: data parallelism (DP > 1): each rank keeps its attention and KV cache, whole experts are sharded over
      DP x TP GPUs (``fused_moe/expert_map_manager.py`` ``determine_expert_map``) as vLLM's recipes run it;
    - required: plain TP breaks a vLLM load-time shape rule that EP avoids (``shape_rules.expert_parallel_required``);
    - off: plain TP, what vLLM's recipes run for MoE models that fit their GPUs (:data:`RECIPES_PLAIN_TP`).

    vLLM 0.32 uses EP only when DP x PCP x TP > 1 (``model_executor/layers/fused_moe/config.py:1189-1192``).
    """
    ctx = g.plan
    spec = ctx.spec
    if not spec.is_moe:
        return ExpertParallel(False, "none", "")
    if "enable-expert-parallel" in ctx.user:
        return ExpertParallel(bool(ctx.user["enable-expert-parallel"]), "pinned", "set by you")
    if tp * pp * g.dp <= 1:
        return ExpertParallel(False, "none", "one GPU holds every expert: nothing to shard")
    if g.eplb:
        return ExpertParallel(True, "required", (
            "required: --enable-eplb needs expert parallelism (vLLM: 'enable_expert_parallel must be True to use "
            "EPLB', config/parallel.py:565-566)"))
    if g.dp > 1:
        how = f"picked by the layout comparison ({g.dp_picked})" if g.dp_picked else "data parallelism set by you"
        return ExpertParallel(True, "better", (
            f"better: DP-attention with EP, {how}: each of the {g.dp} ranks keeps its attention and KV cache, the "
            f"{spec.num_experts} experts are sharded whole over DP x TP = {g.dp * tp * pp} GPUs (vLLM's "
            f"expert-parallel group) as vLLM's recipes run data parallelism ({RECIPES_DP_EP})"))
    words = expert_parallel_required(spec, ctx.precision.quant, tp, g.dp, ctx.rules.text)
    if words:
        return ExpertParallel(True, "required", f"required: plain TP {tp} breaks vLLM's shape rule: {words}")
    return ExpertParallel(False, "off", (
        f"off: plain TP {tp} slices each of the {spec.num_experts} experts over the {tp * pp} GPUs, what vLLM's "
        f"recipes run for MoE models that fit their GPUs ({RECIPES_PLAIN_TP}); pin enable_expert_parallel: true "
        "for whole experts per GPU"))


def uses_expert_parallel(g: GpuInputs, tp: int, pp: int) -> bool:
    """Whether an MoE layout runs with ``--enable-expert-parallel`` (:func:`expert_parallel`)."""
    return expert_parallel(g, tp, pp).on


def evaluate(g: GpuInputs, *, tp: int, pp: int, util: float, outside: int, max_model_len: int,
             sched: Schedule) -> Candidate:
    """Size every pipeline stage under the budget ``util`` and keep the stage with the fewest KV blocks."""
    ctx = g.plan
    spec, rules, prec = ctx.spec, ctx.rules, ctx.precision
    seqs, tokens = sched.max_num_seqs, sched.max_num_batched_tokens
    total = g.gpu.memory_mib * MIB
    budget = math.ceil(total * util)
    # An MoE's data-parallel ranks share their experts (spread over DP x TP GPUs) and exchange tokens every layer;
    # a dense model's ranks are independent engines, each exactly this TP x PP plan (v1/engine/core.py:1473-1482).
    dp = g.dp if spec.is_moe else 1
    weights = weights_per_stage(spec, tp, pp, prec.dense_bytes, prec.quant, ctx.weights_total_bytes,
                                moe_expert_shards(tp, dp))
    if g.eplb:  # redundant experts and the migration buffers, loaded before the profile: weights to the budget
        extra = eplb_bytes_per_stage(spec, tp, pp, prec.dense_bytes, prec.quant, ctx.weights_total_bytes,
                                     moe_expert_shards(tp, g.dp), g.redundant_experts, g.eplb_buffers)
        weights = [w + e for w, e in zip(weights, extra, strict=True)]
    if ctx.lora is not None:  # adapter slots, allocated at load: weights to the budget
        weights = [w + a for w, a in zip(weights, lora_bytes_per_stage(spec, ctx.lora, tp, pp), strict=True)]
    stage_counts = list(stage_kind_counts(spec.layer_kinds, pp))
    draft_w, draft_extra, draft_layers, query_len = _speculative(g, tp, pp, weights, stage_counts)
    non_torch = non_torch_bytes(rules, tp * pp * dp)
    obs = ctx.observed
    offsets: dict[str, int] = {}
    if obs is not None and obs.applies(rules.text, tp, pp, g.dp, g.eager):
        offsets = {c: off for c in COMPONENTS if (off := obs.offset(c)) is not None}
    est_weights, est_non_torch = list(weights), non_torch
    weights = [max(0, w + offsets.get("weights", 0)) for w in weights]
    non_torch = max(0, non_torch + offsets.get("non_torch", 0))
    in_flight = (2 if pp == 1 else pp) * tokens  # async scheduling (PP 1) keeps two batches in flight
    state_blocks = state_blocks_per_request(spec, prefix_caching(ctx))
    # Under speculative decoding each state layer keeps k more conv positions and k more blocks
    # (layers/mamba/abstract.py:65-84: num_speculative_blocks = num_speculative_tokens).
    num_spec = ctx.speculative.num_tokens if ctx.speculative is not None and spec.state is not None else 0
    dcp = decode_context_parallel(ctx, tp)
    expert_parallel = uses_expert_parallel(g, tp, pp)
    charged = rules.cudagraph_charged_to_budget
    num_blocks_min: int | None = None
    limiting_estimates: dict[str, int] = {}
    limiting: tuple[Memory, KvLayout, LayerCounts] | None = None
    limiting_last = False
    mm = (multimodal_profile(spec.vision, ctx.user, spec.hidden_size, tokens, seqs, max_model_len, prec.act_bytes, tp)
          if spec.vision is not None else None)
    for s, count in enumerate(stage_layers(spec.num_layers, pp)):
        kinds = stage_counts[s]
        act = activation_bytes(spec, tp, tokens, seqs if s == pp - 1 else 1, prec.act_bytes, expert_parallel, dp,
                               mm, rules.version >= MODULAR_MOE_SINCE)
        last = s == pp - 1
        cg = 0 if g.eager else cuda_graph_bytes(spec, count + (draft_layers if last else 0), seqs,
                                                g.gpu.compute_capability, query_len, tokens)
        stage_estimates = {"weights": est_weights[s], "non_torch": est_non_torch, "activation": act, "cuda_graph": cg}
        act = max(0, act + offsets.get("activation", 0))
        cg = max(0, cg + offsets.get("cuda_graph", 0)) if not g.eager else 0
        kv = budget - weights[s] - act - non_torch - (cg if charged else 0)
        layout = kv_layout(spec, kinds, tp, prec.kv_bytes, g.block_size, max_model_len, in_flight,
                           draft_extra if last else 0, state_blocks, num_spec, dcp)
        blocks = max(kv, 0) // layout.bytes_per_block
        if num_blocks_min is None or blocks < num_blocks_min:
            num_blocks_min = blocks
            limiting_last = last
            limiting_estimates = stage_estimates
            limiting = (Memory(total=total, budget=budget, weights=weights[s], activation=act, non_torch=non_torch,
                               cuda_graph=cg, cuda_graph_charged=charged, kv_cache=kv, outside_budget=outside),
                        layout, kinds)
    if limiting is None or num_blocks_min is None:
        raise AssertionError("no pipeline stage was evaluated")
    mem, layout, kinds = limiting
    values = {"weights": mem.weights, "activation": mem.activation, "non_torch": mem.non_torch,
              "cuda_graph": mem.cuda_graph}
    used = {c: (limiting_estimates[c], values[c]) for c in offsets} if offsets else None
    concurrency = num_blocks_min / layout.blocks_per_request if layout.blocks_per_request else 0.0
    kv_tokens = int(concurrency * max_model_len)
    if rules.engine == "v0":  # V0 logged "# GPU blocks: N"; capacity is blocks x block size
        kv_tokens = num_blocks_min * layout.block_size
    fits = mem.kv_cache > 0 and layout.needed_bytes_per_request <= mem.kv_cache
    return Candidate(tp=tp, pp=pp, memory=mem, num_blocks=num_blocks_min, layout=layout, kv_tokens=kv_tokens,
                     concurrency=concurrency, max_model_len=max_model_len, max_num_seqs=seqs,
                     max_num_batched_tokens=tokens, fits_one_request=fits, layer_counts=kinds, in_flight=in_flight,
                     draft_kv_per_token=draft_extra if limiting_last else 0, draft_weights=draft_w,
                     observed_used=used)


def _speculative(g: GpuInputs, tp: int, pp: int, weights: list[int],
                 stage_counts: list[LayerCounts]) -> tuple[int, int, int, int]:
    """Add the draft (speculative decoding) to the last pipeline stage: its weights (scaled like the target's when
    they are the checkpoint's own MTP layers) into ``weights``, its same-page KV layers into the stage's "full"
    count. Returns (draft weight bytes, KV bytes per token of other-page draft layers, draft layers, query length).
    """
    ctx = g.plan
    sd = ctx.speculative
    if sd is None:
        return 0, 0, 0, 1
    problem = check_draft_tp(sd, tp)
    if problem:
        raise PlanError(problem)
    spec, prec = ctx.spec, ctx.precision
    dp = g.dp if spec.is_moe else 1
    draft_w = draft_weight_bytes(sd, spec, tp, pp, prec.dense_bytes, prec.quant, moe_expert_shards(tp, dp))
    if sd.method == "mtp" and ctx.weights_total_bytes:
        draft_w = int(draft_w * ctx.weights_total_bytes / checkpoint_estimate(spec, prec.dense_bytes, prec.quant))
    weights[-1] += draft_w
    same, extra = draft_kv(sd, spec, tp, prec.kv_bytes)
    if same:
        counts = dict(stage_counts[-1])
        counts["full"] = counts.get("full", 0) + same
        stage_counts[-1] = tuple(counts.items())
    return draft_w, extra, sd.kv_layers, sd.query_len
