"""vLLM's load-time shape rules, checked before launch: what vLLM refuses when it builds each layer's TP/EP shard.

vLLM checks these while it creates the model's weights on every rank, minutes into a start (after the image pull
and the checkpoint download); the planner checks them on the layout it plans or the user pins, and names the
layouts that pass. Each rule cites the vLLM source of the target release (``releases/v0_32.py`` and ``v0_33.py``,
keys ``shape:*``; ``tests/unit/planner/test_rules_golden.py`` checks the lines against the source on disk) and its
message is vLLM's own, filled with the shard's numbers.

The rules:

- ``heads_divide_tp``: the attention heads divide by TP (``config/model.py`` verify_with_parallel_config);
- ``kv_heads_replicate``: TP above the KV-head count replicates them, so TP must be a multiple of it
  (``layers/linear.py`` QKVParallelLinear, ``divide(tp_size, total_num_kv_heads)``; MLA has one latent, exempt);
- ``fp8_block_linear``: a block-FP8 checkpoint's TP-split linear layers keep whole blocks: a column-parallel output
  shard divides by ``block_n``, a row-parallel input shard by ``block_k`` (``fp8_utils.validate_fp8_block_shape``);
- ``fp8_block_moe``: a block-FP8 MoE's expert shard (``moe_intermediate_size`` / the MoE TP group, DP x TP without
  expert parallelism, 1 with it) divides by ``block_n`` (and ``block_k``), **unless vLLM refines the block scales**:
  0.32 and 0.33 (``fused_moe/oracle/fp8.py`` refine_fp8_moe_block_shape) load such a shard with finer blocks of
  ``gcd(block_n, block_k, shard, hidden_size)`` when that is at least 32 (Triton kernels only); only a shard whose
  gcd is below 32 reaches ``validate_fp8_block_shape_moe`` and stops the start;
- ``group_divides_partition``: a group-quantized (GPTQ, AWQ, compressed-tensors wNa16) row-parallel layer's input
  shard holds whole quantization groups (``distributed/utils.py`` verify_group_size_divides_partition; AWQ falls
  back from Marlin to its own kernels, ``auto_awq.py``, which raise "The input size is not aligned"). Marlin's
  thread tiles (64 / 128) are padded at weight preparation in 0.32 and 0.33 (``marlin_utils.py``
  ``allow_tile_padding``), so they refuse nothing; a group-quantized MoE whose shard Marlin cannot take falls back
  to the MoE WNA16 kernels (``auto_gptq.py``), also no refusal.

Not mirrored (no refusal found in 0.32/0.33 source for the planned layouts): MLA/DSA head padding (the FlashMLA
sparse kernels pad the per-rank heads at run time, not at load).

:func:`shape_violations` is the one entry point; :func:`expert_parallel_required` answers "does plain TP break a
rule that expert parallelism avoids" for the EP decision. Standard library only, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .model import ModelSpec
from .quant_formats import Quantization
from .releases import RELEASES, Release, Source, parse_version, up_to

#: The smallest refined block vLLM's FP8 MoE loader accepts (fused_moe/oracle/fp8.py refine_fp8_moe_block_shape).
FP8_MOE_MIN_REFINED_BLOCK = 32
#: Block shape of a block-FP8 checkpoint that does not state one (compressed-tensors block schemes: 128 x 128).
DEFAULT_FP8_BLOCK = (128, 128)
#: Group-quantized methods whose row-parallel shards must hold whole groups.
GROUP_METHODS = ("gptq", "awq", "compressed-tensors", "auto-round")


@dataclass(frozen=True)
class Violation:
    """One load-time shape rule a layout breaks.

    ``rule``: the rule's key (``fp8_block_moe``, ...); ``layer``: which weight; ``message``: vLLM's own words with the
    shard's numbers; ``source``: the vLLM ``file:line`` of the target release; ``expert_parallel_avoids``: True when
    ``--enable-expert-parallel`` (whole experts per GPU) makes the layout pass.
    """

    rule: str
    layer: str
    message: str
    source: str
    expert_parallel_avoids: bool = False

    def __str__(self) -> str:
        return f"{self.message} ({self.layer}; vLLM {self.source})"


Version = str | tuple[int, int, int]  # "0.32.0" or (0, 32, 0)


def _release(version: Version) -> Release:
    """The block whose rules apply to ``version``: the newest verified release at or below it, else the oldest."""
    try:
        older = up_to(version if isinstance(version, tuple) else parse_version(version))
    except ValueError:
        older = ()
    return older[-1] if older else RELEASES[0]


def _src(release: Release, key: str) -> str:
    source: Source | None = release.sources.get(f"shape:{key}")
    return source.ref if source is not None else f"(not cited for {release.version})"


def _fp8_block(quant: Quantization) -> tuple[int, int] | None:
    if not quant.block_fp8:
        return None
    if len(quant.weight_block) == 2:
        return quant.weight_block[0], quant.weight_block[1]
    return DEFAULT_FP8_BLOCK


def _group(quant: Quantization) -> int:
    if quant.method not in GROUP_METHODS or quant.group_size <= 0 or quant.block_fp8:
        return 0
    if quant.method == "compressed-tensors" and quant.weight_bits > 8:
        return 0
    return quant.group_size


@dataclass(frozen=True)
class _Linear:
    """A TP-split linear layer: its full and per-rank sizes (vLLM's names)."""

    name: str
    parallel: str  # "column" or "row"
    input_size: int
    output_size: int
    input_per_partition: int
    output_partitions: tuple[int, ...]


def _linears(spec: ModelSpec, tp: int) -> list[_Linear]:
    """The TP-split linear layers of one decoder layer (attention, dense or shared-expert MLP) at ``tp``."""
    h = spec.hidden_size
    out: list[_Linear] = []
    if spec.mla:
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        v = spec.v_head_dim or spec.qk_nope_head_dim
        heads = spec.num_heads
        q_in = spec.q_lora_rank or h
        out.append(_Linear("q_b_proj" if spec.q_lora_rank else "q_proj", "column", q_in, heads * qk, q_in,
                           (heads * qk // tp,)))
        kv_out = heads * (spec.qk_nope_head_dim + v)
        out.append(_Linear("kv_b_proj", "column", spec.kv_lora_rank, kv_out, spec.kv_lora_rank, (kv_out // tp,)))
        out.append(_Linear("o_proj", "row", heads * v, h, heads * v // tp, (h,)))
    else:
        hd, heads, kv = spec.head_dim, spec.num_heads, spec.num_kv_heads
        kv_rank = max(1, kv // tp)
        out.append(_Linear("qkv_proj", "column", h, (heads + 2 * kv) * hd, h,
                           (heads // tp * hd, kv_rank * hd, kv_rank * hd)))
        out.append(_Linear("o_proj", "row", heads * hd, h, heads * hd // tp, (h,)))
    mlps = []
    if not spec.is_moe or spec.dense_layers:
        mlps.append(("mlp", spec.intermediate_size))
    if spec.is_moe and spec.shared_expert_intermediate_size:
        mlps.append(("shared_expert", spec.shared_expert_intermediate_size))
    for name, inter in mlps:
        if inter <= 0:
            continue
        parts = (inter // tp, inter // tp) if spec.gated_mlp else (inter // tp,)
        out.append(_Linear(f"{name}.gate_up_proj", "column", h, inter * len(parts), h, parts))
        out.append(_Linear(f"{name}.down_proj", "row", inter, h, inter // tp, (h,)))
    return out


def _heads(spec: ModelSpec, tp: int, rel: Release) -> list[Violation]:
    found = []
    if spec.num_heads % tp:
        found.append(Violation("heads_divide_tp", "attention", f"Total number of attention heads ({spec.num_heads}) "
                               f"must be divisible by tensor parallel size ({tp}).", _src(rel, "heads_divide_tp")))
    if not spec.mla and tp >= spec.num_kv_heads and tp % spec.num_kv_heads:
        found.append(Violation("kv_heads_replicate", "qkv_proj", f"{tp} is not divisible by {spec.num_kv_heads} "
                               f"(--tensor-parallel-size {tp} is above the model's {spec.num_kv_heads} KV heads and "
                               "vLLM replicates them evenly only at a multiple)", _src(rel, "kv_heads_replicate")))
    return found


def _fp8_linear(layer: _Linear, tp: int, block: tuple[int, int], rel: Release) -> Violation | None:
    """validate_fp8_block_shape, line for line: row-parallel input shard by block_k; TP-split or merged outputs by
    block_n (a merged layer that is not TP-split may leave its last part unaligned)."""
    block_n, block_k = block
    src = _src(rel, "fp8_block_linear")
    if (tp > 1 and layer.input_size // layer.input_per_partition == tp and layer.input_per_partition % block_k):
        return Violation("fp8_block_linear", layer.name, f"Weight input_size_per_partition = "
                         f"{layer.input_per_partition} is not divisible by weight quantization block_k = {block_k}.",
                         src)
    tp_split = tp > 1 and layer.output_size // sum(layer.output_partitions) == tp
    merged = len(layer.output_partitions) > 1
    if tp_split or merged:
        sizes = layer.output_partitions if tp_split or not merged else layer.output_partitions[:-1]
        for size in sizes:
            if size % block_n:
                return Violation("fp8_block_linear", layer.name, f"Weight output_partition_size = {size} is not "
                                 f"divisible by weight quantization block_n = {block_n}.", src)
    return None


def fp8_moe_refined_block(spec: ModelSpec, quant: Quantization, moe_tp: int) -> int | None:
    """The refined block vLLM loads a block-FP8 MoE shard with (``refine_fp8_moe_block_shape``), or None when the
    checkpoint's blocks fit the shard (or it is not block-FP8) or no refinement of at least 32 exists."""
    block = _fp8_block(quant)
    if block is None or not spec.is_moe:
        return None
    block_n, block_k = block
    ispp = spec.moe_intermediate_size // moe_tp
    if ispp % block_n == 0 and (moe_tp == 1 or ispp % block_k == 0):
        return None
    refine = math.gcd(block_n, block_k, ispp, spec.hidden_size)
    return refine if refine >= FP8_MOE_MIN_REFINED_BLOCK else None


def _fp8_moe(spec: ModelSpec, quant: Quantization, tp: int, ep: bool, dp: int, rel: Release) -> Violation | None:
    block = _fp8_block(quant)
    if block is None or not spec.is_moe or spec.moe_intermediate_size <= 0:
        return None
    moe_tp = 1 if ep else tp * dp  # without EP vLLM slices every expert over the DP x TP group (fused_moe/config.py)
    block_n, block_k = block
    ispp = spec.moe_intermediate_size // moe_tp
    if ispp % block_n == 0 and (moe_tp == 1 or ispp % block_k == 0):
        return None
    if fp8_moe_refined_block(spec, quant, moe_tp) is not None:
        return None  # vLLM refines the scales to the shard (oracle/fp8.py): loads, on the Triton kernels
    src = f"{_src(rel, 'fp8_block_moe')} via {_src(rel, 'fp8_moe_refine')}"
    if ispp % block_n:
        words = (f"The output_size of gate's and up's weight = {ispp} is not divisible by weight quantization "
                 f"block_n = {block_n}.")
    else:
        words = f"The input_size of down's weight = {ispp} is not divisible by weight quantization block_k = {block_k}."
    return Violation("fp8_block_moe", "routed experts (w13/w2)", words, src, expert_parallel_avoids=not ep)


def _group_rule(layer: _Linear, group: int, quant: Quantization, rel: Release) -> Violation | None:
    if layer.parallel != "row" or group >= layer.input_size or layer.input_per_partition % group == 0:
        return None
    if quant.method == "awq":
        return Violation("group_divides_partition", layer.name, "The input size is not aligned with the quantized "
                         "weight shape. This can be caused by too large tensor parallel size.",
                         f"{_src(rel, 'awq_group_aligned')} via {_src(rel, 'marlin_group_straddle')}")
    return Violation("group_divides_partition", layer.name, f"Weight input_size_per_partition="
                     f"{layer.input_per_partition} is not divisible by group_size={group}. This happens when "
                     "tensor_parallel_size splits the layer input into shards that are not a whole number of quant "
                     "groups. Consider reducing tensor_parallel_size.",
                     f"{_src(rel, 'group_divides_partition')} via {_src(rel, 'marlin_group_straddle')}")


def shape_violations(spec: ModelSpec, quant: Quantization | None = None, tp: int = 1, ep: bool = False, dp: int = 1,
                     version: Version = "0.33.0") -> list[Violation]:
    """Every load-time shape rule the layout breaks (empty: vLLM builds every shard).

    ``spec``: the model (:func:`.model.parse_config`); ``quant``: its quantization (default ``spec.quantization``);
    ``tp``: tensor-parallel size; ``ep``: ``--enable-expert-parallel``; ``dp``: data-parallel size (an MoE without EP
    slices its experts over DP x TP); ``version``: the target vLLM (rules of the newest verified release at or below).
    """
    q = spec.quantization if quant is None else quant
    rel = _release(version)
    found = _heads(spec, tp, rel)
    if found:
        return found  # vLLM stops at the config check; the per-layer sizes are not whole numbers
    block, group = _fp8_block(q), _group(q)
    for layer in _linears(spec, tp):
        if block is not None:
            hit = _fp8_linear(layer, tp, block, rel)
            if hit is not None:
                found.append(hit)
        if group:
            hit = _group_rule(layer, group, q, rel)
            if hit is not None:
                found.append(hit)
    moe = _fp8_moe(spec, q, tp, ep, dp, rel)
    if moe is not None:
        found.append(moe)
    return found


def expert_parallel_required(spec: ModelSpec, quant: Quantization | None, tp: int, dp: int,
                             version: Version) -> str | None:
    """vLLM's words when plain TP (EP off) breaks a rule at this layout that ``--enable-expert-parallel`` avoids,
    else None (the EP decision's hook: EP "required")."""
    if not spec.is_moe:
        return None
    plain = [v for v in shape_violations(spec, quant, tp, False, dp, version) if v.expert_parallel_avoids]
    if not plain or shape_violations(spec, quant, tp, True, dp, version):
        return None
    return str(plain[0])


def working_layouts(spec: ModelSpec, quant: Quantization | None, max_tp: int, ep: bool | None, dp: int,
                    version: Version) -> list[str]:
    """The layouts that pass every rule, as the inventory spells them (``enable_expert_parallel: true``,
    ``tensor_parallel_size 4``): expert parallelism at the same TP first (when not pinned off), then the TP sizes up
    to ``max_tp`` that pass with the EP setting given (None: either)."""
    return _fixes(spec, quant, max_tp, ep, dp, version, None)


def _fixes(spec: ModelSpec, quant: Quantization | None, max_tp: int, ep: bool | None, dp: int, version: Version,
           at_tp: int | None) -> list[str]:
    fixes: list[str] = []
    ep_may_fix = at_tp is not None and spec.is_moe and ep is not True
    if ep_may_fix and not shape_violations(spec, quant, at_tp or 1, True, dp, version):
        fixes.append("enable_expert_parallel: true")
    for tp in (1, 2, 4, 8, 16, 32, 64):
        if tp > max_tp or tp == at_tp:
            continue
        settings = (False, True) if ep is None else (ep,)
        if any(not shape_violations(spec, quant, tp, e, dp, version) for e in settings):
            fixes.append(f"tensor_parallel_size {tp}")
    return fixes


def refusal(spec: ModelSpec, quant: Quantization | None, tp: int, ep: bool, dp: int, version: Version,
            max_tp: int) -> str | None:
    """The preflight message for a pinned layout that breaks a rule (None: it passes): vLLM's words, where they come
    from, and the layouts that work."""
    found = shape_violations(spec, quant, tp, ep, dp, version)
    if not found:
        return None
    layout = f"--tensor-parallel-size {tp}" + (" with --enable-expert-parallel" if ep else
                                               " without expert parallelism" if spec.is_moe else "")
    # Other TP sizes keep the EP setting of the refused layout (EP on is offered first, as its own fix).
    fixes = _fixes(spec, quant, max_tp, ep, dp, version, tp)
    fix = " or ".join(fixes) if fixes else "no layout of this host passes; use a checkpoint of another format"
    return (f"{layout} breaks vLLM {_release(version).version}'s load-time shape rule: vLLM stops with "
            f"\"{found[0].message}\" ({found[0].layer}; {found[0].source}); layouts that work: {fix}")
