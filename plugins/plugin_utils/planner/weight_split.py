"""Weights per GPU by layout: which tensors split under TP, which under EP, which stay whole on every rank.

The same arithmetic as :func:`.model.weights_bytes_per_gpu` (which the memory plan uses), broken down by part for
the pipeline stage that holds the most, each part with its one-line reason and the vLLM source it mirrors:

- attention (q/k/v/o) and dense MLPs are column/row-parallel over TP (``model_executor/layers/linear.py``
  ``ColumnParallelLinear`` / ``RowParallelLinear``); KV heads are replicated when TP exceeds them; an MLA model's
  latent down-projections (``q_a_proj``, ``kv_a_proj_with_mqa``) are ``ReplicatedLinear``
  (``models/deepseek_v2.py``). Under data parallelism each rank holds its own copy at its TP (DP-attention).
- routed experts spread over the expert-parallel group, DP x TP GPUs (:func:`.model.moe_expert_shards`): whole
  experts per GPU with ``--enable-expert-parallel`` (``fused_moe/expert_map_manager.py`` ``determine_expert_map``),
  each expert sliced over the same GPUs without it.
- shared experts are a TP-split MLP on every rank (``models/deepseek_v2.py``: ``disable_tp=is_sequence_parallel``),
  routers (``GateLinear``) and norms are whole on every GPU, the embedding and lm_head are vocab-parallel over TP
  (``layers/vocab_parallel_embedding.py``), the vision tower sits on the first stage.
- pipeline stages split the layers as ``distributed/utils.py`` ``get_pp_indices`` does (:func:`.model.stage_layers`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .hardware import GIB
from .model import ModelSpec, stage_layers, stage_parts
from .quant_formats import Quantization, lm_head_bytes
from .releases import Source
from .rules import VERIFIED

#: The facts each part's reason cites (keys of a release's ``sources``), by part.
_CITES = {
    "attention": "tp_column_parallel", "dense_mlp": "tp_row_parallel", "routed_experts": "ep_expert_map",
    "shared_experts": "shared_experts_tp", "routers": "router_replicated", "embedding": "vocab_parallel",
    "lm_head": "vocab_parallel", "stages": "pp_layer_split",
}


@dataclass(frozen=True)
class WeightPart:
    """One part of the weights on the fullest GPU: its bytes and why it is split (or not) the way it is."""

    name: str
    bytes: int
    reason: str


@dataclass(frozen=True)
class WeightSplit:
    """The weights on the fullest GPU of a layout, by part, and the pipeline stage that holds them."""

    stage: int
    first_layer: int
    last_layer: int  # inclusive
    stage_layers: tuple[int, ...]  # layers per stage (get_pp_indices)
    parts: tuple[WeightPart, ...]

    @property
    def total(self) -> int:
        """The fullest GPU's weight bytes (the sum of the parts)."""
        return sum(p.bytes for p in self.parts)

    def reasons(self) -> dict[str, str]:
        """``weights.<part>`` -> ``<GiB> GiB per GPU: <reason>``, one line each (the plan's reasons)."""
        out = {f"weights.{p.name}": f"{p.bytes / GIB:.2f} GiB per GPU: {p.reason}" for p in self.parts
               if p.bytes >= GIB // 200}  # parts that round to 0.00 GiB (norms) say nothing
        if len(self.stage_layers) > 1:
            out["weights.stages"] = (
                f"pipeline stages hold {list(self.stage_layers)} layers; stage {self.stage} (layers "
                f"{self.first_layer}-{self.last_layer}) holds the most weights and sizes the GPU")
        return out


def _cite(version: str, part: str) -> str:
    """``vllm/...py:N`` of the fact behind ``part`` in ``version``'s source (0.32's for releases not verified)."""
    sources: dict[str, Source] = VERIFIED.get(version) or VERIFIED["0.32.0"]
    src = sources.get(_CITES[part])
    return f" ({src.ref})" if src else ""


def weight_split(spec: ModelSpec, tp: int, pp: int, dense_bytes: int, quant: Quantization, expert_shards: int,
                 expert_parallel: bool, dp: int = 1, scale: float | None = None,
                 version: str = "0.32.0") -> WeightSplit:
    """The weights on the fullest GPU of TP x PP (x DP for an MoE's experts), by part, each with its reason.

    ``expert_shards``: the GPUs routed experts are spread over (DP x TP); ``scale``: the factor to the checkpoint's
    real size (``memory.checkpoint_scale``) when known, applied to every part alike.
    """
    q = quant or spec.quantization
    counts = stage_layers(spec.num_layers, pp)
    best: tuple[float, int, dict[str, float]] | None = None
    for s, parts in enumerate(stage_parts(spec, tp, pp, dense_bytes, q, expert_shards)):
        total = sum(parts.values())
        if best is None or total > best[0]:
            best = (total, s, parts)
    if best is None:
        raise AssertionError("no pipeline stage")
    _total, stage, parts = best
    factor = scale or 1.0
    first = sum(counts[:stage])
    reasons = _reasons(spec, tp, dp, expert_shards, expert_parallel, counts[stage], first, version, scale)
    head_rate = lm_head_bytes(q, dense_bytes)
    if spec.embedding_params(tp)[1] and head_rate != dense_bytes:
        reasons["lm_head"] += (f"; quantized by the checkpoint's {q.method} description, {8 * head_rate:.3g} "
                               f"bits/weight (quant_formats.lm_head_bytes)")
    return WeightSplit(stage=stage, first_layer=first, last_layer=first + counts[stage] - 1,
                       stage_layers=tuple(counts),
                       parts=tuple(WeightPart(name, int(value * factor), reasons[name])
                                   for name, value in parts.items() if value))


def _reasons(spec: ModelSpec, tp: int, dp: int, shards: int, ep: bool, layers: int, first: int, version: str,
             scale: float | None) -> dict[str, str]:
    """One line per part: how vLLM lays it out at this layout."""
    moe_layers = sum(1 for layer in range(first, first + layers) if spec.is_moe and layer >= spec.dense_layers)
    over_tp = f"over TP {tp}" if tp > 1 else "nowhere (TP 1: whole on the GPU)"
    rank_copy = f"; a copy on each of the {dp} data-parallel ranks" if dp > 1 else ""
    per_rank = over_tp + (f", a copy on each of the {dp} data-parallel ranks (DP-attention)" if dp > 1 else "")
    if spec.mla:
        attention = (f"{layers} MLA layers: q/kv_b/o projections split {per_rank}, the latent down-projections "
                     f"(q_a, kv_a) replicated on every GPU")
    elif tp > spec.num_kv_heads:
        attention = (f"{layers} attention layers: q/o split {per_rank}, the {spec.num_kv_heads} KV heads replicated "
                     f"(TP {tp} > KV heads: one KV head per GPU)")
    else:
        attention = f"{layers} attention layers: q/k/v/o split {per_rank}"
    mixers = sum(1 for layer in range(first, first + layers) if spec.layer_kinds[layer] == "mamba")
    if mixers:
        attention += f" ({mixers} of them linear-attention / Mamba mixers, split the same way)"
    attention += _cite(version, "attention")
    if ep:
        base, rem = divmod(spec.num_experts, shards)
        held = f"{base} whole experts per GPU" if not rem else (
            f"{base} or {base + 1} whole experts per GPU (the first {rem} ranks hold one more; the plan counts the "
            f"average {spec.num_experts / shards:.2f})")
        experts = (f"{spec.num_experts} experts x {moe_layers} MoE layers over the expert-parallel group of "
                   f"{shards} GPUs (DP {dp} x TP {tp}): {held}")
    else:
        experts = (f"{spec.num_experts} experts x {moe_layers} MoE layers, each sliced over {shards} GPUs "
                   f"(DP {dp} x TP {tp}, expert parallelism off)")
    out = {
        "attention": attention,
        "dense_mlp": (f"{layers - moe_layers} dense MLP layers split {over_tp}{rank_copy}"
                      + _cite(version, "dense_mlp")),
        "routed_experts": experts + _cite(version, "routed_experts"),
        "shared_experts": (f"shared experts of {moe_layers} MoE layers split {over_tp}{rank_copy}"
                           + _cite(version, "shared_experts")),
        "routers": (f"{moe_layers} routers ({spec.hidden_size} x {spec.num_experts}, checkpoint dtype) whole on "
                    f"every GPU" + _cite(version, "routers")),
        "norms": "layer norms, whole on every GPU",
        "embedding": (f"vocab-parallel embedding ({spec.vocab_size} x {spec.hidden_size}) split {over_tp}"
                      f"{rank_copy}; first pipeline stage" + _cite(version, "embedding")),
        "lm_head": (f"vocab-parallel lm_head split {over_tp}{rank_copy}; last pipeline stage"
                    + _cite(version, "lm_head")),
        "vision": f"vision tower and projector split {over_tp}{rank_copy}; first pipeline stage",
    }
    if scale and not math.isclose(scale, 1.0, rel_tol=1e-3):
        out = {k: f"{v}; scaled x{scale:.3f} to the checkpoint's total_size" for k, v in out.items()}
    return out
