"""The per-GPU memory model: weights, activation peak, CUDA graphs and the KV-cache layout (vLLM's sizing)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from .hardware import CUBLAS_HANDLES_MIB, GIB, MIB, cc_tuple
from .model import ModelSpec, layer_module_bytes, mtp_bytes_per_gpu, stage_layers, weights_bytes_per_gpu
from .multimodal import MultimodalProfile
from .quant_formats import Quantization
from .rules import cudagraph_capture_sizes
from .speculative import capture_sizes

if TYPE_CHECKING:
    from .context import PlanInputs

# cuBLAS/cuBLASLt handles and workspaces: allocated after vLLM's snapshot (inside the budget) before 0.33; 0.33
# creates them before it (outside the budget, with the CUDA context and NCCL): candidate.non_torch_bytes and
# headroom.utilization read rules.cublas_outside_budget.
NON_TORCH_BASE = CUBLAS_HANDLES_MIB * MIB
NON_TORCH_MULTI_GPU = 150 * MIB  # custom all-reduce buffers and lazily grown NCCL buffers (TP/PP > 1)
CUDA_GRAPH_PER_LAYER_GRAPH = int(0.36 * MIB)  # pool memory per (layer, captured size), 0.10-0.28 logs
PROFILE_RUN_WORKSPACE = 64 * MIB  # hidden-state and attention workspaces of the profile run
# A multimodal wrapper without a vision_config (no tower shape to size the encoder profile from, multimodal.py):
# its vision encoder dummy batch and encoder cache during profiling, a flat charge.
MULTIMODAL_PROFILE_BYTES = 256 * MIB
# The release whose fused-MoE workspaces the planner reads (moe_workspace_per_row); older releases keep the
# per-slot buffer model the calibration logs (vLLM 0.10-0.28) were replayed with.
MODULAR_MOE_SINCE = (0, 32, 0)


def _gib(x: int) -> float:
    """Bytes -> GiB, 3 decimals."""
    return round(x / GIB, 3)


@dataclass(frozen=True)
class MemoryGib:
    """The per-GPU memory split in GiB, rounded to 3 places (CONTRACT 2 ``memory_gib``)."""

    total: float
    budget: float
    weights: float
    activation: float
    non_torch: float
    cuda_graph: float
    kv_cache: float
    outside_budget: float
    headroom: float

    def to_dict(self) -> dict[str, float]:
        """The CONTRACT 2 mapping (the fields, in contract order)."""
        return asdict(self)


@dataclass(slots=True)  # built in the hot loop: slots, not frozen (frozen init costs ~2x); never mutated
class Memory:
    """Per-GPU bytes (the stage that limits, under pipeline parallelism)."""

    total: int
    budget: int
    weights: int
    activation: int
    non_torch: int
    cuda_graph: int
    cuda_graph_charged: bool
    kv_cache: int
    outside_budget: int  # CUDA context + NCCL + co-located, before vLLM's snapshot

    @property
    def before_kv(self) -> int:
        """Bytes the budget must hold before any KV cache."""
        return (self.weights + self.activation + self.non_torch
                + (self.cuda_graph if self.cuda_graph_charged else 0))

    def gib(self) -> MemoryGib:
        """The split in GiB; headroom is what neither the budget nor the outside-budget items use."""
        return MemoryGib(
            total=_gib(self.total), budget=_gib(self.budget), weights=_gib(self.weights),
            activation=_gib(self.activation), non_torch=_gib(self.non_torch), cuda_graph=_gib(self.cuda_graph),
            kv_cache=_gib(max(self.kv_cache, 0)), outside_budget=_gib(self.outside_budget),
            headroom=_gib(self.total - self.budget - self.outside_budget
                          - (0 if self.cuda_graph_charged else self.cuda_graph)))


@dataclass(frozen=True)
class ActivationTerms:
    """The profile run's transient peak, per component (bytes): what each part of vLLM's dummy run holds."""

    forward: int  # the text forward at max_num_batched_tokens: hidden states, qkv, dense MLP / shared experts
    moe_workspace: int  # fused-MoE intermediate caches and the w13 workspace for this rank's tokens
    all2all: int  # the other DP ranks' gathered rows the experts also see (allgather_reducescatter backend)
    sampler: int  # fp32 logits and one working copy over min(max_num_seqs, tokens) rows x vocabulary
    workspace: int  # attention and hidden-state workspaces of the profile run
    encoder_peak: int = 0  # the vision encoder's forward over the multimodal dummy batch (before the text run)
    encoder_cache: int = 0  # the cached encoder outputs, held through the text run

    @property
    def text(self) -> int:
        """The text dummy run and sampler."""
        return self.forward + self.moe_workspace + self.all2all + self.sampler + self.workspace

    @property
    def total(self) -> int:
        """The torch peak: the encoder runs before the text forward (they never overlap); its outputs stay cached
        through the text forward (multimodal.py)."""
        return max(self.text, self.encoder_peak) + self.encoder_cache

    def describe(self) -> str:
        """One line: the terms in GiB."""
        parts = [("forward", self.forward), ("MoE workspace", self.moe_workspace), ("all-to-all", self.all2all),
                 ("sampler", self.sampler), ("workspace", self.workspace), ("encoder peak", self.encoder_peak),
                 ("encoder cache", self.encoder_cache)]
        shown = ", ".join(f"{name} {value / GIB:.2f}" for name, value in parts if value)
        return f"activation peak {self.total / GIB:.2f} GiB = {shown} GiB"


def activation_terms(spec: ModelSpec, tp: int, max_num_batched_tokens: int, max_num_seqs: int, act_bytes: int,
                     expert_parallel: bool = False, dp: int = 1,
                     mm: MultimodalProfile | None = None, modular_moe: bool = False) -> ActivationTerms:
    """Transient peak of vLLM's profile run, per component (dummy forward with max_num_batched_tokens tokens, then
    the sampler on min(max_num_seqs, tokens) rows of fp32 logits).

    The forward peak is the MLP: gate_up output (2*I/TP) plus the activation output (I/TP) for every
    token (MoE: per routed token and expert slot); hidden-state buffers add a few rows of hidden size.
    The sampler holds the fp32 logits and one working copy over the full (gathered) vocabulary
    (``_dummy_sampler_run``, 0.32 v1/worker/gpu_model_runner.py:5927, 0.33 :5866).
    ``dp``: an MoE's data-parallel ranks (1 for a dense model, whose ranks never meet). ``mm``: the multimodal
    encoder profile (:func:`.multimodal.multimodal_profile`); None on a multimodal model without a vision_config
    charges MULTIMODAL_PROFILE_BYTES. ``modular_moe`` (vLLM >= 0.32): the MoE workspace is the modular kernel's
    (:func:`moe_workspace_per_row`).
    """
    tokens = max_num_batched_tokens
    h = spec.hidden_size
    forward = 0.0
    moe = 0.0
    gathered = 0.0
    if spec.is_moe:
        # fused MoE: every token goes to top-k expert slots; with expert parallelism experts are whole
        # (not sliced by TP). Buffers: gate_up output (2N) + activation (N) per slot, the w13 workspace
        # (max(2N, hidden)) and the permute/unpermute copies of the hidden states.
        # Data parallelism: the default all2all backend (allgather_reducescatter, vLLM 0.32 config/parallel.py:219)
        # gathers every rank's hidden states and router logits before the experts ("Gather hidden_states and
        # router_logits from all dp ranks", distributed/device_communicators/all2all.py:109-121), unchunked
        # (forward_context.py:110-122): the experts see dp x tokens rows, every rank running the profile run's
        # full batch. Without expert parallelism each expert is sliced over DP x TP (fused_moe/config.py:1097-1105).
        k = max(spec.experts_per_token, 1)
        n = spec.moe_intermediate_size / (1 if expert_parallel else tp * dp)
        per_row = (moe_workspace_per_row(k, n, h) if modular_moe else k * (3 * n + max(2 * n, h) + 2 * h)) * act_bytes
        moe = tokens * per_row
        gathered = tokens * (dp - 1) * per_row
        if spec.shared_expert_intermediate_size:
            forward += tokens * 3 * spec.shared_expert_intermediate_size / tp * act_bytes
    else:
        forward += tokens * 3 * spec.intermediate_size / tp * act_bytes
    if spec.mla:
        qkv = spec.num_heads / tp * (spec.qk_nope_head_dim + spec.qk_rope_head_dim + spec.v_head_dim) \
            + spec.kv_lora_rank
    else:
        qkv = (spec.num_heads / tp + 2 * spec.kv_heads_per_gpu(tp)) * spec.head_dim
    forward += tokens * (3 * h + qkv) * act_bytes
    rows = min(max_num_seqs, tokens)
    sampler = rows * spec.vocab_size * 4 * 2
    encoder_peak = encoder_cache = 0
    if mm is not None:
        encoder_peak, encoder_cache = mm.encoder_peak, mm.encoder_cache
    elif spec.multimodal:
        encoder_cache = MULTIMODAL_PROFILE_BYTES
    return ActivationTerms(forward=int(forward), moe_workspace=int(moe), all2all=int(gathered), sampler=int(sampler),
                           workspace=PROFILE_RUN_WORKSPACE, encoder_peak=encoder_peak, encoder_cache=encoder_cache)


def moe_workspace_per_row(k: int, n: float, h: int) -> float:
    """Elements per token row of the fused-MoE workspaces in vLLM 0.32/0.33: TritonExperts.workspace_shapes
    (0.32 fused_moe/experts/triton_moe.py:226-241, 0.33 :240-255) asks (M, topk, max(N/2, K)) and (M, topk, max(N, K))
    with N = 2n (gate_up), K = h; the first shares its storage with the (M, K) output (modular_kernel.py:1114-1122,
    0.33 :1180-1188), unchunked (M_chunk = M_full, :1287-1298). Plus the row's gathered hidden state and its output."""
    return k * (max(n, h) + max(2 * n, h)) + 2 * h


def activation_bytes(spec: ModelSpec, tp: int, max_num_batched_tokens: int, max_num_seqs: int,
                     act_bytes: int, expert_parallel: bool = False, dp: int = 1,
                     mm: MultimodalProfile | None = None, modular_moe: bool = False) -> int:
    """The profile run's transient peak in bytes (:func:`activation_terms`)."""
    return activation_terms(spec, tp, max_num_batched_tokens, max_num_seqs, act_bytes, expert_parallel, dp, mm,
                            modular_moe).total


@lru_cache(maxsize=1024)
def _capture_size_count(max_num_seqs: int, cc: str, query_len: int = 1, max_num_batched_tokens: int = 0) -> int:
    """How many batch sizes vLLM captures CUDA graphs for (cached: every layout re-asks). With draft tokens
    (``query_len`` > 1) the uniform decode sizes join the grid (:func:`.speculative.capture_sizes`)."""
    blackwell = cc_tuple(cc)[0] == 10
    if query_len > 1:
        return len(capture_sizes(max_num_seqs, query_len, max_num_batched_tokens, blackwell))
    return len(cudagraph_capture_sizes(max_num_seqs, blackwell=blackwell))


def cuda_graph_bytes(spec: ModelSpec, layers_on_gpu: int, max_num_seqs: int, cc: str, query_len: int = 1,
                     max_num_batched_tokens: int = 0) -> int:
    """CUDA-graph pool estimate: captured sizes x layers on this GPU (piecewise graphs split at every
    attention layer); MoE layers keep roughly twice the buffers. ``query_len``: 1 + the draft tokens per step."""
    sizes = _capture_size_count(max_num_seqs, cc, query_len, max_num_batched_tokens)
    factor = 2 if spec.is_moe else 1
    return sizes * layers_on_gpu * CUDA_GRAPH_PER_LAYER_GRAPH * factor


def weights_per_stage(spec: ModelSpec, tp: int, pp: int, dense_bytes: int, quant: Quantization,
                      weights_total_bytes: int | None, expert_shards: int | None = None) -> list[int]:
    """Weight bytes per GPU of each pipeline stage, scaled to the checkpoint's real size when known
    (``expert_shards``: the GPUs routed experts are spread over, default ``tp``)."""
    per_stage = list(weights_bytes_per_gpu(spec, tp, pp, dense_bytes, quant, expert_shards))
    scale = checkpoint_scale(spec, dense_bytes, quant, weights_total_bytes)
    return per_stage if scale is None else [int(w * scale) for w in per_stage]


def checkpoint_scale(spec: ModelSpec, dense_bytes: int, quant: Quantization,
                     weights_total_bytes: int | None) -> float | None:
    """The factor from the architecture's weight bytes to the checkpoint's real size (safetensors index
    total_size), or None when that size is unknown."""
    if not weights_total_bytes:
        return None
    arch_total = checkpoint_estimate(spec, dense_bytes, quant)
    return weights_total_bytes / arch_total if arch_total > 0 else None


def checkpoint_estimate(spec: ModelSpec, dense_bytes: int, quant: Quantization) -> int:
    """The bytes the checkpoint's files hold by the config: every layer, embeddings, and the MTP layers it ships
    (they are in ``total_size`` whether or not speculative decoding loads them)."""
    layers = sum(weights_bytes_per_gpu(spec, 1, 1, dense_bytes, quant))
    return layers + mtp_bytes_per_gpu(spec, 1, 1, dense_bytes, quant)


def eplb_bytes_per_stage(spec: ModelSpec, tp: int, pp: int, dense_bytes: int, quant: Quantization,
                         weights_total_bytes: int | None, expert_shards: int, redundant: int, buffers: int) -> list[int]:
    """What EPLB adds to each pipeline stage's GPU before vLLM's memory profile, on top of :func:`weights_per_stage`.

    vLLM 0.32 places ``num_experts + num_redundant_experts`` physical experts evenly over the expert-parallel group
    (``model_executor/layers/fused_moe/layer.py:72-85, 248-268``: ``global_num_experts``, an even split required), so
    each of the ``expert_shards`` GPUs holds ``redundant / expert_shards`` more experts in every MoE layer. Loading
    the model (``v1/worker/gpu_model_runner.py:5046-5107``, before the profile) builds the EPLB state, which allocates
    ``expert_buffer``, a copy of one MoE layer's local expert weights (``distributed/eplb/eplb_state.py:492``); the
    profile run then reserves the communicator's buffers with another such copy unless the communicator is NIXL
    (``distributed/eplb/rebalance_execute.py:704-718``). ``buffers`` is how many copies: 2, or 1 with NIXL.
    Scaled to the checkpoint's real size like the weights.
    """
    q = quant or spec.quantization
    # The routed experts' own bytes per parameter (a per-module scheme may leave them unquantized).
    expert_rate = layer_module_bytes(spec, q, spec.dense_layers, "full", float(dense_bytes))[2]
    per_expert = 3 * spec.hidden_size * spec.moe_intermediate_size * expert_rate
    local_physical = (spec.num_experts + redundant) / expert_shards
    scale = checkpoint_scale(spec, dense_bytes, quant, weights_total_bytes) or 1.0
    result: list[int] = []
    start = 0
    for count in stage_layers(spec.num_layers, pp):
        moe_layers = sum(1 for layer in range(start, start + count) if spec.is_moe and layer >= spec.dense_layers)
        extra = moe_layers * redundant / expert_shards * per_expert
        if moe_layers:
            extra += buffers * local_physical * per_expert
        result.append(int(extra * scale))
        start += count
    return result


# --- The KV-cache layout ------------------------------------------------------------------------

LayerCounts = tuple[tuple[str, int], ...]  # ((layer kind, count), ...) in first-seen order


@dataclass(slots=True)  # built in the hot loop: slots, not frozen (frozen init costs ~2x); never mutated
class KvLayout:
    """How vLLM groups layers into KV-cache groups and sizes one block (kv_cache_utils.py)."""

    bytes_per_block: int
    blocks_per_request: int
    needed_bytes_per_request: int
    block_size: int
    state_blocks: int = 1  # blocks one request holds in each state (mamba) group: 1, or 2 (+1) under prefix caching
    groups: tuple[tuple[str, int, int], ...] = ()  # (kind, groups of that kind, blocks per request in each)
    group_size: int = 0  # layers per group (hybrid); 0 for one uniform group
    num_spec: int = 0  # speculative tokens the state layers keep room for
    dcp: int = 1  # decode context parallel ranks the full-attention tokens are sharded over
    raised_blocks: tuple[tuple[str, int], ...] = ()  # (kind, block tokens) of kinds whose block vLLM raised to unify pages


def prefix_caching(ctx: PlanInputs) -> bool:
    """Whether vLLM runs with prefix caching: the user's ``enable_prefix_caching``, else the release default."""
    value = ctx.user.get("enable-prefix-caching")
    return bool(ctx.rules.prefix_caching_default if value is None else value)


def state_blocks_per_request(spec: ModelSpec, prefix_caching: bool) -> int:
    """Blocks one request holds in a state group (MambaSpec.max_memory_usage_bytes, v1/kv_cache_interface.py:1076-1082
    in 0.32, :1135-1141 in 0.33): 1 with mamba_cache_mode 'none'; prefix caching (on by default) switches a hybrid to
    'align' (model_executor/models/config.py:684-690) = 2 + a prefill checkpoint block for Mamba2 mixers
    (layers/mamba/mamba_mixer2.py:1098-1108). Speculative blocks are not counted."""
    if not prefix_caching:
        return 1
    return 3 if spec.state is not None and spec.state.kind == "mamba2" else 2


def kind_counts(layer_kinds: tuple[str, ...] | list[str]) -> LayerCounts:
    """Layer kinds that hold a cache -> ((kind, count), ...) in first-seen order (``mlp`` blocks hold none)."""
    counts: dict[str, int] = {}
    for kind in layer_kinds:
        if kind != "mlp":
            counts[kind] = counts.get(kind, 0) + 1
    return tuple(counts.items())


@lru_cache(maxsize=1024)
def stage_kind_counts(layer_kinds: tuple[str, ...], pp: int) -> tuple[LayerCounts, ...]:
    """The layer-kind counts of each pipeline stage (vLLM's even layer split)."""
    result = []
    start = 0
    for count in stage_layers(len(layer_kinds), pp):
        result.append(kind_counts(layer_kinds[start:start + count]))
        start += count
    return tuple(result)


#: Where vLLM builds the hybrid KV-cache layout, per release (issue 26, item 2).
HYBRID_LAYOUT_SOURCES: dict[str, str] = {
    "0.32": "block size platforms/interface.py:1086-1104, groups v1/core/kv_cache_utils.py:1362-1502, state blocks "
            "v1/kv_cache_interface.py:1076-1082, tokens kv_cache_utils.py:1195-1227,2303-2311",
    "0.33": "block size platforms/interface.py:1098-1116, groups v1/core/kv_cache_planning.py:416-540, state blocks "
            "v1/kv_cache_interface.py:1135-1141, tokens kv_cache_utils.py:1061-1128",
}


def describe_layout(spec: ModelSpec, layout: KvLayout, tp: int, version: tuple[int, ...]) -> str:
    """One line: the KV-cache groups, their blocks per request, the block size and the vLLM lines it follows."""
    parts = ", ".join(f"{kind} {n} group{'s' if n > 1 else ''} x {blocks} block{'s' if blocks > 1 else ''}"
                      for kind, n, blocks in layout.groups)
    line = f"{parts} per request; {layout.group_size or 'all'} layers per group, block {layout.block_size} tokens"
    for kind, block in layout.raised_blocks:
        line += f" ({kind} layers {block}: their smaller page raised to the largest)"
    if spec.state is not None and "mamba" in {k for k, _n, _b in layout.groups}:
        mode = "align (prefix caching)" if layout.state_blocks > 1 else "none"
        attention = any(kind != "mamba" for kind, _n, _b in layout.groups)  # a pure-Mamba model has no page to match
        line += (f"; {spec.state.describe(tp, layout.num_spec)}{', padded to the attention page' if attention else ''}"
                 f"; mamba_cache_mode {mode}")
        if layout.num_spec:
            line += f" + {layout.num_spec} speculative blocks"
    key = "0.33" if version >= (0, 33, 0) else "0.32"
    return f"{line} (vLLM {key}: {HYBRID_LAYOUT_SOURCES[key]})"


def kv_layout(spec: ModelSpec, layer_counts: LayerCounts, tp: int, kv_dtype_bytes: int,
              block_size: int, max_model_len: int, in_flight_tokens: int, extra_bytes_per_token: int = 0,
              state_blocks: int = 1, num_spec: int = 0, dcp: int = 1) -> KvLayout:
    """Bytes per block and blocks one max-length request needs, for the layers on one GPU.

    Uniform models form one group (bytes_per_block = sum of layer pages). Hybrid models bucket layers by
    type; the group size is the smallest bucket (or the largest if < 1.5x the smallest), buckets split
    into groups of that size; bytes_per_block = group_size x page (kv_cache_utils.py:1362-1551).
    With state layers the attention block grows until one attention page holds a state page
    (platforms/interface.py:1057-1104 in 0.32: 16 x cdiv(state page, 16 x attention bytes per token)) and the state
    page is padded to it; a state group holds ``state_blocks`` blocks per request (:func:`state_blocks_per_request`),
    plus ``num_spec`` speculative blocks, and its conv state ``num_spec`` more positions (layers/mamba/abstract.py:65-84).
    Chunked local layers hold cdiv(min(chunk + in flight, len), block) blocks (kv_cache_interface.py:810-837).
    Decode context parallelism (``dcp`` > 1) shards a full-attention request's tokens over the DCP ranks: each holds
    cdiv(cdiv(len, dcp), block) blocks (FullAttentionSpec.max_memory_usage_bytes, kv_cache_interface.py:602-607).
    ``extra_bytes_per_token``: a draft's full-attention layers of another width, in the one group of an all-full
    target (UniformTypeKVCacheSpecs: page sizes add up, :func:`.speculative.draft_kv`).
    """
    counts = dict(layer_counts)
    per_token = spec.kv_bytes_per_token_layer(tp, kv_dtype_bytes)
    if "mamba" in counts and len(counts) > 1:
        # Hybrid alignment: the attention block grows until one page holds the state page.
        block_size = max(block_size, 16 * math.ceil(spec.state_page_bytes(tp, num_spec) / (16 * per_token)))
    held = state_blocks + num_spec  # blocks a request holds in each state group
    attn_page = per_token * block_size
    kind_block = {kind: block_size for kind in counts}
    if spec.full_kv is not None and "mamba" not in counts:
        # Attention layers of different page sizes (Gemma-4's full layers): unify_kv_cache_spec_page_size raises the
        # block of a smaller page by the integer ratio to the largest page, else pads it (0.32
        # v1/core/kv_cache_utils.py:1292-1354, 0.33 v1/core/kv_cache_planning.py:346-408).
        pages = {kind: spec.kind_kv_bytes_per_token(kind, tp, kv_dtype_bytes) * block_size for kind in counts}
        attn_page = max(pages.values())
        kind_block = {kind: block_size * (attn_page // page) if attn_page % page == 0 else block_size
                      for kind, page in pages.items()}
    sw_tokens = min(spec.sliding_window - 1 + in_flight_tokens, max_model_len) if spec.sliding_window else 0
    chunk_tokens = min(spec.attention_chunk_size + in_flight_tokens, max_model_len)
    per_kind_blocks = {"full": math.ceil(math.ceil(max_model_len / dcp) / kind_block.get("full", block_size)),
                       "sliding": math.ceil(sw_tokens / kind_block.get("sliding", block_size)) + 1
                       if spec.sliding_window else 0,
                       "chunked": math.ceil(chunk_tokens / kind_block.get("chunked", block_size)), "mamba": held}
    if len(counts) == 1:
        kind = next(iter(counts))
        n = counts[kind]
        if kind == "mamba":
            page = spec.state_page_bytes(tp, num_spec)
            return KvLayout(bytes_per_block=n * page, blocks_per_request=held,
                            needed_bytes_per_request=n * page * held, block_size=block_size,
                            state_blocks=state_blocks, groups=((kind, 1, held),), num_spec=num_spec, dcp=dcp)
        blocks = per_kind_blocks[kind]
        page_sum = n * spec.kind_kv_bytes_per_token(kind, tp, kv_dtype_bytes) * block_size \
            + extra_bytes_per_token * block_size
        return KvLayout(bytes_per_block=page_sum, blocks_per_request=blocks,
                        needed_bytes_per_request=page_sum * blocks, block_size=block_size,
                        state_blocks=state_blocks, groups=((kind, 1, blocks),), num_spec=num_spec, dcp=dcp)
    smallest, largest = min(counts.values()), max(counts.values())
    group_size = largest if largest < 1.5 * smallest else smallest
    # Each group draws its blocks from the shared pool, padding included
    # (kv_cache_utils.py _max_memory_usage_bytes_from_groups).
    groups = tuple((kind, math.ceil(n / group_size), per_kind_blocks[kind]) for kind, n in counts.items())
    blocks_per_request = sum(n_groups * blocks for _kind, n_groups, blocks in groups)
    bytes_per_block = group_size * attn_page
    raised = tuple((kind, block) for kind, block in kind_block.items() if block != block_size)
    return KvLayout(bytes_per_block=bytes_per_block, blocks_per_request=blocks_per_request,
                    needed_bytes_per_request=bytes_per_block * blocks_per_request, block_size=block_size,
                    state_blocks=state_blocks, groups=groups, group_size=group_size, num_spec=num_spec, dcp=dcp,
                    raised_blocks=raised)
