"""Per-layer kinds and the state-layer cache shape, from every config convention vLLM reads (issue 26, item 1).

A layer is ``full`` (full attention), ``sliding`` (sliding window), ``chunked`` (chunked local attention, Llama-4),
``mamba`` (any constant-size state layer: Mamba/Mamba2 SSM, gated-delta / linear attention, short convolution) or
``mlp`` (Nemotron-H's MLP / MoE-only blocks: no mixer, nothing cached). The conventions follow ``transformers``'
config classes (5.19, as vLLM 0.32/0.33 load them) and vLLM's model files; each is cited in :data:`CONVENTIONS`.
An unknown hybrid convention is refused naming its field. Standard library only, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .rules import KNOWN_DTYPES

#: Where each convention is read (transformers config class -> the list vLLM's model file indexes per layer).
CONVENTIONS: dict[str, str] = {
    "layer_types": "per-layer strings (Qwen3-Next/3.5, Gemma-3/4, LFM2, Llama-4, GPT-OSS); vLLM models/qwen3_next.py:668",
    "layers_block_type": "per-layer strings (Jamba, Nemotron-H, Granite-4 hybrid); vLLM models/jamba.py:323",
    "hybrid_override_pattern": "Nemotron-H, one char per layer: M mamba2, * attention, - MLP, E MoE "
                               "(transformers nemotron_h _pattern_to_list; vLLM models/nemotron_h.py:598)",
    "full_attention_interval": "Qwen3-Next / Qwen3.5 without layer_types: layer i is full iff (i+1) % interval == 0 "
                               "(transformers qwen3_next configuration :130-135)",
    "attn_layer_period": "Jamba: attention iff i % attn_layer_period == attn_layer_offset (transformers jamba "
                         "configuration :99-101)",
    "full_attn_idxs": "LFM2 without layer_types: listed layers attention, the rest short conv (transformers lfm2 "
                      "configuration :82-87)",
    "no_rope_layers": "Llama-4: no_rope_layers[i] == 1 is a RoPE layer with chunked local attention of "
                      "attention_chunk_size, 0 a global NoPE layer; default every no_rope_layer_interval-th (4) "
                      "global (transformers llama4 configuration :180-200; vLLM models/llama4.py:184-262)",
    "sliding_window_pattern": "Gemma-3 without layer_types: layer i is full iff (i+1) % pattern == 0 "
                              "(transformers gemma3 configuration :109-115)",
}

#: Fields some hybrid families use that the planner does not read: refused, naming the field.
UNREAD_HYBRID_FIELDS = ("attn_layer_indices", "attention_layer_indices", "block_types", "layers_pattern",
                        "layer_pattern", "mixer_types", "linear_attn_config", "attn_type_list", "layer_group_types")

#: Qwen3-Next and its Qwen3.5/3.6 successors (text and multimodal wrappers): gated-delta layers, output-gated full
#: attention and MTP layers named ``mtp.layers.{i}`` (model.py reads this family for the last two).
QWEN3_NEXT_FAMILY = ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")

#: model_type -> the state kind every non-attention layer of that family has.
_STATE_KIND_BY_TYPE = {
    "mamba": "mamba1", "falcon_mamba": "mamba1", "jamba": "mamba1",
    "mamba2": "mamba2", "nemotron_h": "mamba2", "bamba": "mamba2", "falcon_h1": "mamba2",
    "granitemoehybrid": "mamba2", "zamba2": "mamba2",
    **dict.fromkeys(QWEN3_NEXT_FAMILY, "gated_delta"),
    "lfm2": "short_conv", "lfm2_moe": "short_conv",
}
_PURE_SSM_TYPES = ("mamba", "falcon_mamba", "mamba2")

#: Families whose decoder layer holds an attention KV page and a Mamba2 state page at once: one kind per layer cannot
#: describe them, so they are refused with the reason rather than planned as attention alone (which drops the state).
PARALLEL_HYBRIDS: dict[str, str] = {
    "falcon_h1": "Falcon-H1 runs attention and a Mamba2 mixer in parallel in every decoder layer, each with its own "
                 "cache (vLLM 0.32 models/falcon_h1.py:314-345, 0.33 :313-344)",
    "zamba2": "Zamba2's 'hybrid' layers run a shared attention block beside their Mamba2 mixer, each attention with "
              "its own KV cache (vLLM 0.32 models/zamba2.py:601, :758; 0.33 :601, :755)",
}


class LayerKindError(ValueError):
    """The config's per-layer description cannot be read; the message names the field."""


def _kind_of(value: Any, field: str, index: int) -> str:
    k = str(value).lower()
    if k in ("full_attention", "attention", "full", "global", "*", "global_attention"):
        return "full"
    if "sliding" in k or k in ("local", "local_attention"):
        return "sliding"
    if k in ("chunked_attention", "chunked", "local_chunked"):
        return "chunked"
    if k in ("mlp", "moe", "-", "e"):
        return "mlp"
    if k == "m" or any(t in k for t in ("mamba", "linear", "ssm", "conv", "gated_delta")):
        return "mamba"
    raise LayerKindError(f"config.json '{field}'[{index}] = {value!r} is not a layer kind vLLM 0.32/0.33 builds "
                         "(full/sliding/chunked attention, mamba, linear attention, conv, mlp, moe)")


def _from_list(cfg: dict[str, Any], field: str, n_layers: int) -> tuple[str, ...] | None:
    raw = cfg.get(field)
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) != n_layers:
        size = len(raw) if isinstance(raw, list) else type(raw).__name__
        raise LayerKindError(f"config.json '{field}' must list one kind per layer ({n_layers}), not {size}")
    return tuple(_kind_of(v, field, i) for i, v in enumerate(raw))


def _nemotron_pattern(cfg: dict[str, Any], n_layers: int) -> tuple[str, ...]:
    pattern = str(cfg["hybrid_override_pattern"])
    if len(pattern) != n_layers:
        raise LayerKindError(f"config.json 'hybrid_override_pattern' has {len(pattern)} entries but "
                             f"num_hidden_layers is {n_layers}: vLLM builds one layer per character")
    table = {"M": "mamba", "*": "full", "-": "mlp", "E": "mlp"}
    bad = sorted({c for c in pattern if c not in table})
    if bad:
        raise LayerKindError(f"config.json 'hybrid_override_pattern' has {bad}: vLLM 0.32/0.33 know M (mamba2), * "
                             "(attention), - (MLP) and E (MoE) (models/nemotron_h.py:598)")
    return tuple(table[c] for c in pattern)


def layer_kinds(cfg: dict[str, Any], n_layers: int) -> tuple[tuple[str, ...], str]:
    """(kind per layer, the convention it came from) for the text model's config ``cfg``.

    :raises LayerKindError: a per-layer field of the wrong length or value, or a hybrid field the planner does not read.
    """
    model_type = str(cfg.get("model_type", ""))
    if model_type in PARALLEL_HYBRIDS:
        raise LayerKindError(f"model_type '{model_type}' is not planned: {PARALLEL_HYBRIDS[model_type]}; the planner "
                             "keeps one kind per layer (attention or state), so it would size the KV cache without the "
                             "state pages")
    for field in ("layer_types", "layers_block_type"):
        kinds = _from_list(cfg, field, n_layers)
        if kinds is not None:
            return kinds, field
    if cfg.get("hybrid_override_pattern") is not None:
        return _nemotron_pattern(cfg, n_layers), "hybrid_override_pattern"
    if isinstance(cfg.get("full_attention_interval"), int) and cfg["full_attention_interval"] > 0:
        step = int(cfg["full_attention_interval"])
        return tuple("full" if (i + 1) % step == 0 else "mamba" for i in range(n_layers)), "full_attention_interval"
    if model_type == "jamba" or "attn_layer_period" in cfg:
        period, offset = int(cfg.get("attn_layer_period", 8)), int(cfg.get("attn_layer_offset", 4))
        if not 0 <= offset < period:
            raise LayerKindError(f"config.json 'attn_layer_offset' {offset} must be smaller than 'attn_layer_period' "
                                 f"{period}")
        return tuple("full" if i % period == offset else "mamba" for i in range(n_layers)), "attn_layer_period"
    if model_type in ("lfm2", "lfm2_moe") or "full_attn_idxs" in cfg:
        idxs = cfg.get("full_attn_idxs")
        full = set(idxs) if isinstance(idxs, list) else set(range(n_layers))
        return tuple("full" if i in full else "mamba" for i in range(n_layers)), "full_attn_idxs"
    if cfg.get("attention_chunk_size") and model_type.startswith("llama4"):
        raw = cfg.get("no_rope_layers")
        interval = int(cfg.get("no_rope_layer_interval") or 4)
        flags = raw if isinstance(raw, list) and raw else [int((i + 1) % interval != 0) for i in range(n_layers)]
        if len(flags) != n_layers:
            raise LayerKindError(f"config.json 'no_rope_layers' must list one flag per layer ({n_layers})")
        return tuple("chunked" if f else "full" for f in flags), "no_rope_layers"
    if model_type in _PURE_SSM_TYPES:
        return ("mamba",) * n_layers, "model_type"
    unread = [f for f in UNREAD_HYBRID_FIELDS if cfg.get(f) is not None]
    if unread:
        raise LayerKindError(f"config.json '{unread[0]}' describes a hybrid layer layout the planner does not read "
                             f"(it reads {', '.join(CONVENTIONS)}): give 'layer_types' with one kind per layer")
    return (), ""


def full_attention_kv(cfg: dict[str, Any], kv_heads: int, head_dim: int) -> tuple[int, int] | None:
    """(KV heads, head dim) of the full-attention layers where they differ from the sliding layers', else ``None``.

    Gemma-4: transformers' ``Gemma4TextConfig`` gives every ``full_attention`` layer ``head_dim = global_head_dim``
    (default 512) and, when ``attention_k_eq_v``, ``num_key_value_heads = num_global_key_value_heads``
    (transformers 5.19 models/gemma4/configuration_gemma4.py:210-223, its ``per_layer_config``); vLLM builds each layer
    from that per-layer config (models/gemma4.py:578-580 in 0.32 and 0.33), so a full layer's page differs from a
    sliding layer's. K and V still take one slot each (k_eq_v layers load K into both, 0.32 :420-422).
    """
    if not str(cfg.get("model_type", "")).startswith("gemma4"):
        return None
    dim = int(cfg.get("global_head_dim") or 512)
    heads = kv_heads
    if cfg.get("attention_k_eq_v") and cfg.get("num_global_key_value_heads"):
        heads = int(cfg["num_global_key_value_heads"])
    return None if (heads, dim) == (kv_heads, head_dim) else (heads, dim)


@dataclass(frozen=True)
class StateShape:
    """The cache of one state layer (vLLM ``MambaStateShapeCalculator``, model_executor/layers/mamba/mamba_utils.py).

    ``conv_dim`` x ``conv_len`` conv state (split by TP on ``conv_dim``) and ``heads`` x ``head_elems`` temporal
    state (split by TP on ``heads``); ``extra_groups`` for Mamba2's group extension when n_groups % TP != 0.
    """

    kind: str  # mamba1, mamba2, gated_delta, short_conv, linear_attention
    conv_dim: int
    conv_len: int
    heads: int
    head_elems: int
    conv_bytes: int  # dtype bytes of the conv state (mamba_cache_dtype, 'auto': the model dtype)
    ssm_bytes: int  # dtype bytes of the temporal state (mamba_ssm_cache_dtype / the config's own field)
    n_groups: int = 0
    group_state: int = 0  # Mamba2: the conv dim counts 2 x n_groups x state_size
    mixer_params: int = 0  # parameters of one state layer's mixer (in/out projections, conv, norms)
    ssm_from_config: bool = False  # the temporal-state dtype is the config's own (not the conv state's)

    def page_bytes(self, tp: int, num_spec: int = 0) -> int:
        """Bytes one request's state takes in one layer on one GPU (MambaSpec.page_size_bytes, unpadded); the conv
        state keeps ``num_spec`` more positions under speculative decoding (mamba_utils.py ``num_spec``)."""
        conv_dim = self.conv_dim
        if self.kind == "mamba2" and self.n_groups % tp:
            conv_dim += 2 * (tp - self.n_groups) * self.group_state  # extra_groups_for_head_shards (n_groups 1)
        conv = conv_dim // tp * (self.conv_len + num_spec) * self.conv_bytes
        ssm = self.heads // tp * self.head_elems * self.ssm_bytes
        return conv + ssm

    def describe(self, tp: int, num_spec: int = 0) -> str:
        return (f"{self.kind} state: conv {self.conv_dim // tp}x{self.conv_len + num_spec} x {self.conv_bytes} B + "
                f"{self.heads // tp}x{self.head_elems} x {self.ssm_bytes} B = {self.page_bytes(tp, num_spec):,} B "
                "per layer")


def dtype_bytes(value: Any, default: int = 0) -> int:
    """Bytes of a state dtype named as vLLM / the config name it (``rules.KNOWN_DTYPES``); ``default`` for 'auto'."""
    name = KNOWN_DTYPES.get(str(value).replace("torch.", "").lower(), "") if value else ""
    return {"float32": 4, "float16": 2, "bfloat16": 2}.get(name, 0) or default


def state_shape(cfg: dict[str, Any], model_dtype_bytes: int, mamba_cache_dtype: str = "auto",
                mamba_ssm_cache_dtype: str = "auto") -> StateShape | None:
    """The state layer's cache shape from the config fields vLLM's model file reads (``None``: not recognised).

    The temporal-state dtype is the user's ``mamba_ssm_cache_dtype``, else the config's own (Nemotron-H
    ``mamba_ssm_cache_dtype``, models/config.py:717-732; Qwen3.5 ``mamba_ssm_dtype``, :856-866), else the conv dtype.
    """
    model_type = str(cfg.get("model_type", ""))
    kind = _STATE_KIND_BY_TYPE.get(model_type)
    if kind is None:
        if cfg.get("linear_num_value_heads"):
            kind = "gated_delta"
        elif cfg.get("mamba_num_heads") or cfg.get("mamba_n_heads"):
            kind = "mamba2"
        elif cfg.get("conv_L_cache"):
            kind = "short_conv"
        else:
            return None
    conv_b = dtype_bytes(mamba_cache_dtype, model_dtype_bytes)
    own = cfg.get("mamba_ssm_cache_dtype") or cfg.get("mamba_ssm_dtype")
    ssm_b = dtype_bytes(mamba_ssm_cache_dtype, 0) or dtype_bytes(own, 0) or conv_b
    own_ssm = bool(dtype_bytes(own, 0))
    h = int(cfg.get("hidden_size") or 0)
    if kind == "gated_delta":  # models/qwen3_next.py get_mamba_state_shape_from_config -> gated_delta_net_state_shape
        nk, nv = int(cfg["linear_num_key_heads"]), int(cfg["linear_num_value_heads"])
        dk, dv = int(cfg["linear_key_head_dim"]), int(cfg["linear_value_head_dim"])
        k = int(cfg.get("linear_conv_kernel_dim") or 4)
        conv_dim = dk * nk * 2 + dv * nv
        params = h * (2 * nk * dk + 2 * nv * dv) + h * 2 * nv + conv_dim * k + nv * dv * h + 2 * nv
        return StateShape(kind, conv_dim, k - 1, nv, dv * dk, conv_b, ssm_b, mixer_params=params,
                          ssm_from_config=own_ssm)
    if kind == "mamba2":  # models/nemotron_h.py:798-812 -> mamba2_state_shape
        heads = int(cfg.get("mamba_num_heads") or cfg.get("mamba_n_heads") or 0)
        hd = int(cfg.get("mamba_head_dim") or cfg.get("mamba_d_head") or 0)
        if not heads or not hd:
            expand = int(cfg.get("mamba_expand") or cfg.get("expand") or 2)
            hd = hd or 64
            heads = heads or expand * h // hd
        groups = int(cfg.get("n_groups") or cfg.get("mamba_n_groups") or 1)
        state = int(cfg.get("ssm_state_size") or cfg.get("mamba_d_state") or cfg.get("state_size") or 128)
        k = int(cfg.get("conv_kernel") or cfg.get("mamba_d_conv") or 4)
        inter = heads * hd
        conv_dim = inter + 2 * groups * state
        params = h * (2 * inter + 2 * groups * state + heads) + conv_dim * k + inter * h + inter + 3 * heads
        return StateShape(kind, conv_dim, k - 1, heads, hd * state, conv_b, ssm_b, groups, state, params, own_ssm)
    if kind == "mamba1":  # mamba1_state_shape: conv (I, K-1), ssm (I, N)
        own = cfg.get("intermediate_size") if model_type in ("mamba", "falcon_mamba") else None
        inter = int(own or 0) or int(cfg.get("mamba_expand") or cfg.get("expand") or 2) * h
        state = int(cfg.get("mamba_d_state") or cfg.get("state_size") or 16)
        k = int(cfg.get("mamba_d_conv") or cfg.get("conv_kernel") or 4)
        rank = int(cfg.get("mamba_dt_rank") or cfg.get("time_step_rank") or -(-h // 16))
        params = h * 2 * inter + inter * k + inter * (rank + 2 * state) + rank * inter + inter * state + inter * h
        return StateShape(kind, inter, k - 1, inter, state, conv_b, ssm_b, mixer_params=params,
                          ssm_from_config=own_ssm)
    # short_conv (LFM2): conv state (hidden, L_cache - 1), no temporal state (short_conv_state_shape)
    k = int(cfg.get("conv_L_cache") or 3)
    return StateShape(kind, h, k - 1, 0, 0, conv_b, ssm_b, mixer_params=h * 3 * h + h * k + h * h)
