"""LoRA adapter slots: what vLLM preallocates at load for ``--enable-lora`` (before its memory profile).

vLLM 0.32 (:data:`.rules.VERIFIED` ``lora:*``): every LoRA-wrapped linear layer allocates, for each of ``max_loras``
slots, ``lora_a`` (rank x input) and ``lora_b`` (output x rank) per packed slice in ``lora_dtype`` (``auto``: the
model dtype), ``lora/layers/base_linear.py`` / ``column_parallel_linear.py`` ``create_lora_weights``. Column-parallel
layers (QKV, gate/up) keep the whole input and their output shard (``fully_sharded_loras`` also splits A's rank);
row-parallel ones (o_proj, down_proj) their input shard (``input_size_per_partition``) and the whole output
(fully sharded: its shard). ``max_lora_rank`` must be one of ``MaxLoRARanks``.

Counted here: the attention and dense / shared-expert MLP projections of every decoder layer. Not counted: the
routed experts' adapters (``lora/layers/fused_moe.py``), embedding and lm_head adapters, Punica's metadata buffers;
the plan says so for an MoE. Standard library only, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import PlanError
from .model import ModelSpec, stage_layers
from .rules import KNOWN_DTYPES

#: vLLM 0.32/0.33 ``config/lora.py`` ``MaxLoRARanks``.
ALLOWED_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: The projections LoRA wraps in a decoder layer (what ``lora_target_modules`` may name; packed names too).
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_PACKED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


@dataclass(frozen=True)
class LoraSlots:
    """The adapter slots vLLM preallocates."""

    max_loras: int
    rank: int
    dtype_bytes: int
    targets: frozenset[str]
    fully_sharded: bool


def _int(user: dict[str, Any], key: str, default: int) -> int:
    value = user.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"--{key} must be a whole number >= 1, not {value!r}")
    return value


def resolve_lora(user: dict[str, Any], act_bytes: int) -> LoraSlots | None:
    """``--enable-lora`` and its sizes, checked as vLLM checks them; None when LoRA is off."""
    if not user.get("enable-lora"):
        for key in ("max-loras", "max-lora-rank", "lora-target-modules", "fully-sharded-loras"):
            if key in user:
                raise PlanError(f"--{key} has no effect without --enable-lora: set enable_lora: true or drop it")
        return None
    rank = _int(user, "max-lora-rank", 16)
    if rank not in ALLOWED_RANKS:
        raise PlanError(f"--max-lora-rank {rank} is not a rank vLLM allocates: use one of "
                        f"{', '.join(map(str, ALLOWED_RANKS))} (the next above your adapters' rank)")
    dtype = KNOWN_DTYPES.get(str(user.get("lora-dtype", "auto")).replace("torch.", ""), "")
    if not dtype:
        raise PlanError(f"--lora-dtype {user['lora-dtype']} is not one of auto, bfloat16, float16, float32")
    raw = user.get("lora-target-modules")
    if raw is None:
        targets = frozenset(TARGETS)
    else:
        names = [raw] if isinstance(raw, str) else list(raw)
        expanded: set[str] = set()
        for name in names:
            short = str(name).rsplit(".", 1)[-1]
            if short in _PACKED:
                expanded.update(_PACKED[short])
            elif short in TARGETS:
                expanded.add(short)
            else:
                raise PlanError(f"--lora-target-modules {name!r} is not a projection the planner sizes: use "
                                f"{', '.join(TARGETS)} (or qkv_proj, gate_up_proj)")
        targets = frozenset(expanded)
    return LoraSlots(max_loras=_int(user, "max-loras", 1), rank=rank,
                     dtype_bytes=act_bytes if dtype == "auto" else (4 if dtype == "float32" else 2), targets=targets,
                     fully_sharded=bool(user.get("fully-sharded-loras", False)))


def _column(slots: LoraSlots, tp: int, inputs: int, outputs: list[int]) -> float:
    """A column-parallel layer's A and B over its packed slices (elements per slot)."""
    rank_a = slots.rank / tp if slots.fully_sharded else slots.rank
    return sum(rank_a * inputs + out * slots.rank for out in outputs)


def _row(slots: LoraSlots, tp: int, inputs: int, outputs: int) -> float:
    return slots.rank * inputs / tp + (outputs / tp if slots.fully_sharded else outputs) * slots.rank


def layer_lora_bytes(spec: ModelSpec, slots: LoraSlots, tp: int, layer: int) -> float:
    """Adapter bytes of one decoder layer on one GPU (all ``max_loras`` slots)."""
    h, t = spec.hidden_size, slots.targets
    elems = 0.0
    if not spec.mla and spec.layer_kinds[layer] in ("full", "sliding", "chunked"):
        q_out = spec.num_heads * spec.head_dim
        kv_out = spec.kv_heads_per_gpu(tp) * spec.head_dim
        qkv = [o for name, o in (("q_proj", q_out // tp), ("k_proj", kv_out), ("v_proj", kv_out)) if name in t]
        if qkv:
            elems += _column(slots, tp, h, qkv)
        if "o_proj" in t:
            elems += _row(slots, tp, q_out, h)
    moe_layer = spec.is_moe and layer >= spec.dense_layers
    inter = spec.shared_expert_intermediate_size if moe_layer else spec.intermediate_size
    if inter and not (spec.single_block_layers and spec.layer_kinds[layer] != "mlp"):  # Nemotron-H: MLP blocks only
        mlp = [inter // tp for name in ("gate_proj", "up_proj") if name in t and spec.gated_mlp]
        if mlp:
            elems += _column(slots, tp, h, mlp)
        if "down_proj" in t:
            elems += _row(slots, tp, inter, h)
    return elems * slots.max_loras * slots.dtype_bytes


def lora_bytes_per_stage(spec: ModelSpec, slots: LoraSlots, tp: int, pp: int) -> list[int]:
    """Adapter bytes on one GPU of each pipeline stage."""
    result: list[int] = []
    start = 0
    for count in stage_layers(spec.num_layers, pp):
        result.append(int(sum(layer_lora_bytes(spec, slots, tp, i) for i in range(start, start + count))))
        start += count
    return result


def describe(spec: ModelSpec, slots: LoraSlots, per_gpu: int, tp: int) -> str:
    """The reason line of ``enable-lora``."""
    skipped = "; MoE routed experts' adapters are not counted" if spec.is_moe else ""
    skipped += "; MLA attention adapters are not counted" if spec.mla else ""
    return (f"set by you: {slots.max_loras} adapter slot(s) of rank {slots.rank} preallocated on "
            f"{', '.join(sorted(slots.targets))} in every layer ({slots.dtype_bytes}-byte LoRA dtype"
            f"{', fully sharded' if slots.fully_sharded else ''}): {per_gpu / 1024**3:.2f} GiB per GPU at TP {tp}, "
            f"counted with the weights before the KV cache{skipped}")
