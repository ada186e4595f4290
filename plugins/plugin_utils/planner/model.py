"""Read a Hugging Face ``config.json`` (as a dict) into the numbers the planner needs.

Handles dense/GQA, MoE, MLA (DeepSeek), sliding-window and hybrid layer types, vision wrappers
(``text_config``), tied embeddings, rope scaling, ``torch_dtype`` and ``quantization_config``.
Standard library only, no I/O: the caller reads the files.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, NamedTuple

from .layer_kinds import (
    QWEN3_NEXT_FAMILY,
    LayerKindError,
    StateShape,
    dtype_bytes,
    full_attention_kv,
    layer_kinds,
    state_shape,
)
from .multimodal import VisionSpec, parse_vision, qwen3_vl_tower_params
from .quant_formats import QuantFormatError, Quantization, lm_head_bytes, parse_quantization


class ModelConfigError(ValueError):
    """The model's config cannot be planned for; the message says what is wrong."""


# Architectures whose MLP is not gated (two matrices instead of three).
_NON_GATED_MLP = ("NemotronHForCausalLM", "PhiForCausalLM", "GPT2LMHeadModel", "GPTNeoXForCausalLM", "FalconForCausalLM",
                  "GPTBigCodeForCausalLM", "OPTForCausalLM", "BloomForCausalLM", "StarCoder2ForCausalLM")
# Models vLLM refuses to run in fp16 (they fall back to fp32 below sm80): config/model.py.
FP16_UNSAFE_MODEL_TYPES = ("gemma2", "gemma3", "gemma3_text", "glm4")
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                 "max_sequence_length", "max_seq_length", "seq_len", "model_max_length")


@dataclass(frozen=True)
class ModelSpec:
    """The planner's view of a model."""

    architecture: str
    model_type: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_model_len: int  # derived limit (positions x rope scaling)
    torch_dtype: str  # "bfloat16", "float16", "float32"
    layer_kinds: tuple[str, ...]  # per layer: "full", "sliding", "chunked", "mamba", "mlp" (layer_kinds.py)
    sliding_window: int = 0
    attention_chunk_size: int = 0  # Llama-4 chunked local attention (the "chunked" layers)
    # (KV heads, head dim) of the full-attention layers when they differ from the others' (Gemma-4: global_head_dim,
    # num_global_key_value_heads; layer_kinds.full_attention_kv), None when every attention layer has the same shape
    full_kv: tuple[int, int] | None = None
    # Nemotron-H: every layer is ONE block (a mixer or an MLP/MoE), not attention + MLP
    single_block_layers: bool = False
    state: StateShape | None = None  # the state layers' cache shape (layer_kinds.state_shape), None without any
    layer_convention: str = ""  # the config field the layer kinds came from
    gated_mlp: bool = True
    # MoE
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    dense_layers: int = 0  # leading dense layers of a MoE (first_k_dense_replace)
    # MLA
    mla: bool = False
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # Mamba / linear attention state per layer (bytes, checkpoint dtype), 0 if none
    mamba_state_bytes: int = 0
    multimodal: bool = False
    vision_params: int = 0  # vision tower + projector (multimodal wrappers), from vision_config
    vision: VisionSpec | None = None  # the tower's shape, for the encoder profile (multimodal.py)
    quantization: Quantization = field(default_factory=lambda: Quantization("none"))
    # Multi-token-prediction layers the checkpoint ships after its decoder layers (DeepSeek-V3 / GLM-4.5
    # ``num_nextn_predict_layers``, ``mtp_num_hidden_layers``): loaded only under speculative decoding (method mtp).
    mtp_layers: int = 0
    # Qwen3-Next / Qwen3.5 full attention gates its output: q_proj holds 2 x heads x head_dim rows (vLLM 0.32
    # models/qwen3_next.py:315-320, ``attn_output_gate`` default True; qwen3_5.py:158 uses that attention).
    attn_output_gate: bool = False
    draft_vocab_size: int = 0  # an EAGLE-3 head's own output vocabulary (``draft_vocab_size``), 0 if none

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def dtype_bytes(self) -> int:
        return 4 if self.torch_dtype == "float32" else 2

    @property
    def attention_layers(self) -> int:
        return sum(1 for k in self.layer_kinds if k not in ("mamba", "mlp"))

    def state_page_bytes(self, tp: int, num_spec: int = 0) -> int:
        """One request's state in one state layer on one GPU (MambaSpec page, before the hybrid padding)."""
        return self.state.page_bytes(tp, num_spec) if self.state is not None else self.mamba_state_bytes

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads each TP rank stores: split, or replicated when TP > KV heads (config/model.py:1670)."""
        if self.mla:
            return 1
        return max(1, self.num_kv_heads // tp)

    def kv_bytes_per_token_layer(self, tp: int, kv_dtype_bytes: int) -> int:
        """KV bytes one token takes in one attention layer on one GPU (kv_cache_interface.py)."""
        if self.mla:  # latent cache, not split by TP
            return (self.kv_lora_rank + self.qk_rope_head_dim) * kv_dtype_bytes
        return 2 * self.kv_heads_per_gpu(tp) * self.head_dim * kv_dtype_bytes

    def kind_kv_bytes_per_token(self, kind: str, tp: int, kv_dtype_bytes: int) -> int:
        """KV bytes one token takes in one layer of ``kind`` on one GPU: a full-attention layer of its own shape
        (``full_kv``, Gemma-4) or :meth:`kv_bytes_per_token_layer`."""
        if kind == "full" and self.full_kv is not None:
            heads, dim = self.full_kv
            return 2 * max(1, heads // tp) * dim * kv_dtype_bytes
        return self.kv_bytes_per_token_layer(tp, kv_dtype_bytes)

    # --- parameter counts (for weight bytes when no safetensors index is given) -----------------
    def attention_params_per_layer(self, tp: int = 1, kind: str = "") -> tuple[float, float]:
        """(split-by-TP params, replicated params) of one attention layer (of layer kind ``kind``) on one GPU.

        Gemma 4's full-attention layers use ``global_head_dim`` and ``num_global_key_value_heads`` (vLLM 0.32
        models/gemma4.py:577-590, ``per_layer_config``); with ``attention_k_eq_v`` the checkpoint ships no v_proj
        there but vLLM's QKVParallelLinear still allocates the V slot and loads K into it (gemma4.py:90-118,
        :419-425), so the GPU holds q, k, v and o as counted here.
        """
        h = self.hidden_size
        if self.mla:
            rope, nope, v = self.qk_rope_head_dim, self.qk_nope_head_dim, self.v_head_dim
            heads = self.num_heads
            q = (h * self.q_lora_rank + self.q_lora_rank * heads * (nope + rope)) if self.q_lora_rank \
                else h * heads * (nope + rope)
            kv_b = self.kv_lora_rank * heads * (nope + v)
            o = heads * v * h
            kv_a = h * (self.kv_lora_rank + rope)
            q_a = h * self.q_lora_rank if self.q_lora_rank else 0
            split = (q - q_a + kv_b + o) / tp
            return split, float(kv_a + q_a)
        head_dim, kv_heads = self.head_dim, self.kv_heads_per_gpu(tp)
        if kind == "full" and self.full_kv is not None:  # one home with the KV layout: layer_kinds.full_attention_kv
            kv_heads, head_dim = self.full_kv
            kv_heads = max(1, kv_heads // tp)
        q = h * self.num_heads * head_dim * (2 if self.attn_output_gate else 1)
        o = self.num_heads * head_dim * h
        kv = 2 * h * head_dim * kv_heads
        return (q + o) / tp + kv, 0.0

    def mlp_params_per_layer(self, layer: int, tp: int = 1, expert_shards: int | None = None) -> tuple[float, float]:
        """(expert params, dense params) of one MLP layer on one GPU (experts sharded over TP/EP).

        ``expert_shards``: the GPUs the routed experts are spread over (default ``tp``); with data parallelism vLLM
        shards them over DP x TP (:func:`moe_expert_shards`), while shared experts and the router stay per rank.
        """
        h = self.hidden_size
        mats = 3 if self.gated_mlp else 2
        if self.is_moe and layer >= self.dense_layers:
            experts = self.num_experts * mats * h * self.moe_intermediate_size
            shared = mats * h * self.shared_expert_intermediate_size
            router = h * self.num_experts
            return experts / (expert_shards or tp), shared / tp + router
        return 0.0, mats * h * self.intermediate_size / tp

    def mamba_params_per_layer(self, tp: int = 1) -> float:
        if self.state is not None and self.state.mixer_params:
            return self.state.mixer_params / tp
        return 3.0 * self.hidden_size * 2 * self.hidden_size / tp

    def embedding_params(self, tp: int = 1) -> tuple[float, float]:
        """(input embedding, lm_head) params on one GPU; both vocab-parallel."""
        emb = self.vocab_size * self.hidden_size / tp
        return emb, (0.0 if self.tie_word_embeddings else emb)


def _get(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return default


def _positive_int(cfg: dict[str, Any], key: str, *alts: str, default: int | None = None) -> int:
    value = _get(cfg, key, *alts, default=default)
    if value is None:
        raise ModelConfigError(f"config.json has no '{key}': is this a Hugging Face causal-LM config?")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) <= 0:
        raise ModelConfigError(f"config.json '{key}' must be a positive integer, not {value!r}")
    return int(value)


def derived_max_model_len(cfg: dict[str, Any]) -> int:
    """vLLM 0.32's derived maximum length (config/model.py _get_and_verify_max_len): the smallest
    positions key, capped by the tokenizer's model_max_length, times the rope factor except for rope
    types whose max_position_embeddings is already scaled (llama3, yarn, longrope, ...) and Gemma 3."""
    found = [int(cfg[k]) for k in _MAX_LEN_KEYS if isinstance(cfg.get(k), (int, float)) and cfg[k] > 0]
    derived = min(found) if found else 2048  # vLLM assumes 2048 when no key is present
    tok_max = cfg.get("tokenizer_model_max_length")
    if isinstance(tok_max, int) and 0 < tok_max < derived:
        derived = tok_max
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if isinstance(rope, dict) and "gemma3" not in str(cfg.get("model_type", "")):
        rope_type = rope.get("rope_type", rope.get("type"))
        factor = rope.get("factor")
        already_scaled = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
        if rope_type not in (None, "default", *already_scaled) and factor:
            derived = int(derived * float(factor))
    return derived


def _quantization(cfg: dict[str, Any]) -> Quantization:
    """The checkpoint's quantization (:func:`quant_formats.parse_quantization`); its errors are config errors."""
    try:
        return parse_quantization(cfg.get("quantization_config"))
    except QuantFormatError as exc:
        raise ModelConfigError(str(exc)) from None


def _layer_kinds(cfg: dict[str, Any], n_layers: int) -> tuple[tuple[str, ...], int, str]:
    """(kind per layer, sliding window, the convention read): :func:`layer_kinds.layer_kinds` for every per-layer
    convention vLLM reads, else one sliding window for all layers (Mistral-style) or all full attention."""
    window = int(cfg.get("sliding_window") or 0)
    try:
        kinds, convention = layer_kinds(cfg, n_layers)
    except LayerKindError as exc:
        raise ModelConfigError(str(exc)) from None
    if kinds:
        if "sliding" in kinds and not window:
            raise ModelConfigError("config.json has sliding-attention layers but no 'sliding_window'")
        return kinds, (window if "sliding" in kinds else 0), convention
    pattern = cfg.get("sliding_window_pattern")
    if window and isinstance(pattern, int) and pattern > 1:  # Gemma 3: every Nth layer is global
        kinds = tuple("full" if (i + 1) % pattern == 0 else "sliding" for i in range(n_layers))
        return kinds, window, "sliding_window_pattern"
    if window and cfg.get("use_sliding_window", True) and cfg.get("model_type") not in ("qwen2", "qwen3"):
        return ("sliding",) * n_layers, window, "sliding_window"
    return ("full",) * n_layers, 0, ""


def _unwrap(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """(outer config, text-model config, multimodal): vision wrappers (LLaVA, Gemma 3, Qwen-VL, ...) keep the
    text model under ``text_config``; the outer quantization, dtype, tying and tokenizer limit apply to it."""
    if not isinstance(config, dict) or not config:
        raise ModelConfigError("config.json is empty or not a JSON object")
    cfg = config
    multimodal = False
    if isinstance(config.get("text_config"), dict):
        cfg = {**config["text_config"]}
        for key in ("quantization_config", "torch_dtype", "tie_word_embeddings", "tokenizer_model_max_length"):
            if key not in cfg and key in config:
                cfg[key] = config[key]
        multimodal = True
    if "vision_config" in config:
        multimodal = True
    return config, cfg, multimodal


def _identity(outer: dict[str, Any], cfg: dict[str, Any]) -> tuple[str, str]:
    """(architecture, model_type)."""
    archs = outer.get("architectures") or [""]
    architecture = str(archs[0]) if isinstance(archs, list) and archs else ""
    return architecture, str(cfg.get("model_type", outer.get("model_type", "")))


class _Shape(NamedTuple):
    """The transformer's dimensions."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int


def _shape(cfg: dict[str, Any]) -> _Shape:
    """Layers, widths, heads (GQA checked), vocabulary and MLP size."""
    n_layers = _positive_int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _positive_int(cfg, "hidden_size", "n_embd", "d_model")
    heads = _positive_int(cfg, "num_attention_heads", "n_head")
    kv_heads = int(_get(cfg, "num_key_value_heads", "num_kv_heads", default=heads) or heads)
    if kv_heads <= 0 or heads % kv_heads:
        raise ModelConfigError(f"config.json: num_attention_heads {heads} is not a multiple of "
                               f"num_key_value_heads {kv_heads}")
    head_dim = int(_get(cfg, "head_dim", default=0) or hidden // heads)
    vocab = _positive_int(cfg, "vocab_size", "padded_vocab_size")
    intermediate = int(_get(cfg, "intermediate_size", "n_inner", "ffn_dim", default=4 * hidden) or 4 * hidden)
    return _Shape(n_layers, hidden, heads, kv_heads, head_dim, vocab, intermediate)


def _torch_dtype(cfg: dict[str, Any], outer: dict[str, Any]) -> str:
    """The checkpoint dtype as ``bfloat16``, ``float16`` or ``float32`` (anything unknown reads as bfloat16)."""
    dtype = str(_get(cfg, "torch_dtype", "dtype", default=outer.get("torch_dtype", "bfloat16"))).replace("torch.", "")
    if dtype not in ("bfloat16", "float16", "float32"):
        dtype = "bfloat16" if dtype in ("bf16", "auto") else ("float16" if dtype in ("fp16", "half") else "bfloat16")
    return dtype


class _Moe(NamedTuple):
    num_experts: int
    experts_per_token: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    dense_layers: int


def _moe(cfg: dict[str, Any], intermediate: int) -> _Moe:
    """Routed experts, top-k, expert and shared-expert MLP sizes, leading dense layers (all 0 when dense)."""
    num_experts = int(_get(cfg, "num_experts", "n_routed_experts", "num_local_experts", default=0) or 0)
    experts_per_tok = int(_get(cfg, "num_experts_per_tok", "moe_topk", "top_k", "top_k_experts", default=0) or 0)
    moe_inter = int(_get(cfg, "moe_intermediate_size", default=0) or (intermediate if num_experts else 0))
    shared_inter = int(_get(cfg, "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
                            default=0) or 0)
    if not shared_inter and cfg.get("n_shared_experts"):
        shared_inter = int(cfg["n_shared_experts"]) * moe_inter
    if not shared_inter and num_experts and cfg.get("enable_moe_block"):
        # Gemma 4 MoE: every layer keeps its dense MLP (intermediate_size) beside the router and the experts
        # (vLLM 0.32 models/gemma4.py:609-614 ``self.mlp``, :630-653 ``self.router`` / ``self.experts``): always active,
        # it weighs like a shared expert.
        shared_inter = intermediate
    dense_layers = int(_get(cfg, "first_k_dense_replace", default=0) or 0)
    return _Moe(num_experts, experts_per_tok, moe_inter, shared_inter, dense_layers)


def _mamba_state_bytes(cfg: dict[str, Any], kinds: tuple[str, ...], hidden: int) -> int:
    """Bytes of one Mamba / linear-attention layer's state (conv + SSM, 2-byte dtype); 0 without such layers."""
    if "mamba" not in kinds:
        return 0
    d_state = int(_get(cfg, "mamba_d_state", "state_size", "linear_key_head_dim", default=128) or 128)
    expand = int(_get(cfg, "mamba_expand", "expand", default=2) or 2)
    d_conv = int(_get(cfg, "mamba_d_conv", "conv_kernel", "linear_conv_kernel_dim", default=4) or 4)
    d_inner = expand * hidden
    return (d_inner * d_state + (d_inner + 2 * d_state) * (d_conv - 1)) * 2


def _vision_params(outer: dict[str, Any], hidden: int) -> int:
    """Vision tower + projector parameters of a multimodal wrapper (0 without a ``vision_config`` object)."""
    vision = outer.get("vision_config")
    if not isinstance(vision, dict):
        return 0
    spec = parse_vision(outer)
    if spec is not None and spec.family == "qwen3-vl" and "out_hidden_size" in vision and "depth" in vision:
        return qwen3_vl_tower_params(vision)  # counted module by module from vLLM's tower
    # Kimi-K2.5's MoonViT names them vt_*; vLLM aliases them to hidden_size / num_hidden_layers / intermediate_size
    # (rule weights:kimi_vit_vt_aliases, 0.32/0.33 transformers_utils/configs/kimi_k3.py:79-83) and builds the encoder
    # from those (models/kimi_k25_vit.py:742-748).
    vh = int(vision.get("hidden_size") or vision.get("vt_hidden_size") or 1024)
    vl = int(vision.get("num_hidden_layers") or vision.get("vt_num_hidden_layers") or vision.get("depth") or 24)
    vi = int(vision.get("intermediate_size") or vision.get("vt_intermediate_size") or 4 * vh)
    # ViT blocks (4h^2 attention + 2*h*I MLP) plus a two-layer projector into the text model.
    return vl * (4 * vh * vh + 2 * vh * vi) + vh * hidden + hidden * hidden


def parse_model_config(config: dict[str, Any]) -> ModelSpec:
    """Turn a Hugging Face config dict into a :class:`ModelSpec`; raise ModelConfigError if it cannot.

    The steps run in this order (the first bad field is the one reported): wrapper, dimensions, dtype,
    layer kinds, MoE, MLA rank, Mamba state, vision tower, length limit, MLA dims, quantization.
    """
    outer, cfg, multimodal = _unwrap(config)
    architecture, model_type = _identity(outer, cfg)
    shape = _shape(cfg)
    dtype = _torch_dtype(cfg, outer)
    tie = bool(_get(cfg, "tie_word_embeddings", default=outer.get("tie_word_embeddings", False)))
    kinds, window, convention = _layer_kinds(cfg, shape.num_layers)
    moe = _moe(cfg, shape.intermediate_size)
    kv_lora = int(cfg.get("kv_lora_rank") or 0)
    state = state_shape(cfg, 4 if dtype == "float32" else 2) if "mamba" in kinds else None
    mamba_state = state.page_bytes(1) if state is not None else _mamba_state_bytes(cfg, kinds, shape.hidden_size)
    vision_params = _vision_params(outer, shape.hidden_size)
    return ModelSpec(
        architecture=architecture,
        model_type=model_type,
        num_layers=shape.num_layers,
        hidden_size=shape.hidden_size,
        num_heads=shape.num_heads,
        num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        intermediate_size=shape.intermediate_size,
        vocab_size=shape.vocab_size,
        tie_word_embeddings=tie,
        max_model_len=derived_max_model_len(cfg),
        torch_dtype=dtype,
        layer_kinds=kinds,
        sliding_window=window,
        full_kv=full_attention_kv(cfg, shape.num_kv_heads, shape.head_dim) if "full" in kinds else None,
        attention_chunk_size=int(cfg.get("attention_chunk_size") or 0) if "chunked" in kinds else 0,
        single_block_layers="mlp" in kinds,
        state=state,
        layer_convention=convention,
        gated_mlp=architecture not in _NON_GATED_MLP,
        num_experts=moe.num_experts,
        experts_per_token=moe.experts_per_token,
        moe_intermediate_size=moe.moe_intermediate_size,
        shared_expert_intermediate_size=moe.shared_expert_intermediate_size,
        dense_layers=moe.dense_layers,
        mla=kv_lora > 0,
        kv_lora_rank=kv_lora,
        q_lora_rank=int(cfg.get("q_lora_rank") or 0),
        qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0),
        qk_nope_head_dim=int(cfg.get("qk_nope_head_dim") or 0),
        v_head_dim=int(cfg.get("v_head_dim") or 0),
        mamba_state_bytes=mamba_state,
        multimodal=multimodal,
        vision_params=vision_params,
        vision=parse_vision(outer) if multimodal else None,
        quantization=_quantization(outer if "quantization_config" in outer else cfg),
        mtp_layers=int(_get(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0) or 0),
        attn_output_gate=model_type in _OUTPUT_GATED and bool(cfg.get("attn_output_gate", True)),
        draft_vocab_size=int(cfg.get("draft_vocab_size") or 0),
    )


def with_user_state_dtypes(spec: ModelSpec, user: dict[str, Any]) -> ModelSpec:
    """The spec with the user's ``--mamba-cache-dtype`` (conv state) / ``--mamba-ssm-cache-dtype`` (temporal state):
    set by the user, they win over the config's own (model_executor/models/config.py:724-732, 864-873)."""
    if spec.state is None:
        return spec
    conv = dtype_bytes(user.get("mamba-cache-dtype"))
    ssm = dtype_bytes(user.get("mamba-ssm-cache-dtype"))
    if not conv and not ssm:
        return spec
    # 'auto' temporal state: the config's own dtype, else the conv state's (layers/mamba/mamba_utils.py:98-110)
    inherited = conv if conv and not spec.state.ssm_from_config else spec.state.ssm_bytes
    state = replace(spec.state, conv_bytes=conv or spec.state.conv_bytes, ssm_bytes=ssm or inherited)
    return replace(spec, state=state, mamba_state_bytes=state.page_bytes(1))


def moe_expert_shards(tp: int, dp: int) -> int:
    """The GPUs an MoE layer's routed experts are spread over: DP x TP, with or without expert parallelism.

    vLLM 0.32 ``model_executor/layers/fused_moe/config.py:1097-1105`` (``flatten_tp_across_dp_and_pcp``: "There are
    actually dp_size * pcp_size * tp_size devices ... shard across all devices"), then ``:1218-1221``: with
    ``--enable-expert-parallel`` ``ep_size`` is that flattened size (whole experts per GPU), without it each expert is
    sliced over the same DP x TP GPUs. The EP group is formed the same way (``distributed/parallel_state.py:2289-2300``,
    ranks reshaped into groups of ``data_parallel_size * prefill_context_model_parallel_size *
    tensor_model_parallel_size``). ``dp`` counts data-parallel ranks over every host of the group; PCP is not planned.
    """
    return tp * dp


@lru_cache(maxsize=4096)
def weights_bytes_per_gpu(spec: ModelSpec, tp: int, pp: int, dense_bytes: int,
                          quant: Quantization | None = None, expert_shards: int | None = None) -> tuple[int, ...]:
    """Weight bytes on one GPU of each pipeline stage (max is what matters).

    Linear layers use the quantization's bytes per parameter; embeddings and lm_head stay in the
    checkpoint dtype; MLA latent projections and routers are replicated across TP ranks. Layers of the
    same kind weigh the same, so each kind is computed once and multiplied by its count per stage.
    ``expert_shards``: the GPUs routed experts are spread over (default ``tp``; DP x TP under data parallelism,
    :func:`moe_expert_shards`); everything else is split by ``tp`` and whole on every data-parallel rank.
    """
    return tuple(int(sum(parts.values())) for parts in stage_parts(spec, tp, pp, dense_bytes, quant, expert_shards))


def stage_parts(spec: ModelSpec, tp: int, pp: int, dense_bytes: int, quant: Quantization | None = None,
                expert_shards: int | None = None) -> tuple[dict[str, float], ...]:
    """Weight bytes on one GPU of each pipeline stage, by part (:func:`layer_parts` summed over the stage's layers,
    then :func:`edge_parts`): what :func:`weights_bytes_per_gpu` totals and ``weight_split`` explains. Layers of the
    same kind and rates weigh the same, so each is computed once."""
    q = quant or spec.quantization
    cache: dict[tuple[str, bool, tuple[float, ...]], dict[str, float]] = {}
    per_layer: list[dict[str, float]] = []
    for layer, kind in enumerate(spec.layer_kinds):
        moe_layer = spec.is_moe and layer >= spec.dense_layers
        rates = layer_module_bytes(spec, q, layer, kind, float(dense_bytes))
        key = (kind, moe_layer, rates)
        if key not in cache:
            cache[key] = layer_parts(spec, tp, kind, layer, moe_layer, rates, dense_bytes, expert_shards)
        per_layer.append(cache[key])
    counts = stage_layers(spec.num_layers, pp)
    stages: list[dict[str, float]] = []
    start = 0
    for s, count in enumerate(counts):
        parts: dict[str, float] = {}
        for one_layer in per_layer[start:start + count]:
            for name, value in one_layer.items():
                parts[name] = parts.get(name, 0.0) + value
        parts.update(edge_parts(spec, tp, pp, s, len(counts), dense_bytes, q))
        stages.append(parts)
        start += count
    return tuple(stages)


def edge_parts(spec: ModelSpec, tp: int, pp: int, stage: int, stages: int, dense_bytes: int,
               q: Quantization) -> dict[str, float]:
    """Weight bytes outside the decoder layers on one GPU of pipeline stage ``stage``: the embedding and vision tower
    (first stage, checkpoint dtype) and the lm_head (last stage; under PP a tied model's last stage holds its own
    copy of the embedding). An untied lm_head takes the bytes its format gives it (:func:`lm_head_bytes`)."""
    emb, head = spec.embedding_params(tp)
    parts = {"embedding": 0.0, "vision": 0.0, "lm_head": 0.0}
    if stage == 0:
        parts["embedding"] = emb * dense_bytes
        parts["vision"] = spec.vision_params / tp * dense_bytes
    if stage == stages - 1:
        parts["lm_head"] = head * lm_head_bytes(q, dense_bytes) if head else (emb * dense_bytes if pp > 1 else 0.0)
    return parts


def mtp_bytes_per_gpu(spec: ModelSpec, tp: int, pp: int, dense_bytes: int, quant: Quantization | None = None,
                      expert_shards: int | None = None) -> int:
    """Weight bytes of the checkpoint's MTP layers on the GPU that holds them (the last pipeline stage).

    vLLM 0.32 ``model_executor/models/deepseek_mtp.py:85-110``: each MTP layer is ``enorm``, ``hnorm``, an
    ``eh_proj`` ``nn.Linear(2 * hidden, hidden)`` (replicated, unquantized), a shared-head norm and one decoder layer
    shaped like the target's last (``model.layers.{num_hidden_layers + i}``, MoE where the target is); its embedding
    and lm_head are the target's (``v1/spec_decode/llm_base_proposer.py`` ``_maybe_share_embeddings`` /
    ``_maybe_share_lm_head``: "Detected MTP model"), except that under pipeline parallelism the embedding is loaded
    separately ("The draft model's vocab embedding will be loaded separately").
    """
    if not spec.mtp_layers:
        return 0
    q = quant or spec.quantization
    h = spec.hidden_size
    total = 0.0
    for i in range(spec.mtp_layers):
        layer = spec.num_layers + i
        moe_layer = spec.is_moe and layer >= spec.dense_layers
        rates = layer_module_bytes(spec, q, layer, "full", float(dense_bytes))
        total += _layer_bytes(spec, tp, "full", layer, moe_layer, rates, dense_bytes, expert_shards)
        total += (2 * h * h + 3 * h) * dense_bytes
    if pp > 1:
        total += spec.vocab_size * h / tp * dense_bytes
    return int(total)


#: The checkpoint / vLLM names a module goes by (per layer ``{p}``), matched against a quantization's skip list and
#: per-module table: what the planner calls attention, dense MLP, routed experts, shared experts and Mamba mixers.
_MODULE_NAMES: dict[str, tuple[str, ...]] = {
    "attention": ("{p}.self_attn.q_proj", "{p}.self_attn.o_proj", "{p}.self_attn.qkv_proj",
                  "{p}.self_attn.q_a_proj", "{p}.self_attn.kv_b_proj", "{p}.mixer.q_proj", "{p}.mixer.o_proj"),
    "mamba": ("{p}.linear_attn.in_proj_qkv", "{p}.linear_attn.out_proj", "{p}.linear_attn.in_proj_qkvz",
              "{p}.mixer.in_proj", "{p}.mixer.out_proj"),
    "dense_mlp": ("{p}.mlp.gate_proj", "{p}.mlp.down_proj", "{p}.mlp.gate_up_proj", "{p}.mixer.up_proj",
                  "{p}.mixer.down_proj"),
    "experts": ("{p}.mlp.experts.0.gate_proj", "{p}.mlp.experts.0.down_proj", "{p}.mlp.experts",
                "{p}.block_sparse_moe.experts.0.w1", "{p}.mlp.experts.gate_up_proj", "{p}.mixer.experts.0.up_proj",
                "{p}.mixer.experts"),
    "shared": ("{p}.mlp.shared_experts.gate_proj", "{p}.mlp.shared_expert.gate_proj", "{p}.mlp.shared_experts",
               "{p}.mlp.shared_expert", "{p}.mixer.shared_experts.up_proj", "{p}.mixer.shared_experts"),
}
#: Module names that differ by model type. Gemma 4's routed experts are ``layers.N.experts`` beside its dense
#: ``layers.N.mlp`` (vLLM 0.32 models/gemma4.py:609-614, :646-653), so a ModelOpt ``layers.N.mlp*`` exclusion keeps
#: the dense MLP unquantized, not the experts.
_MODULE_NAMES_BY_TYPE: dict[str, dict[str, tuple[str, ...]]] = {
    model_type: {"experts": ("{p}.experts",), "shared": ("{p}.mlp.gate_proj", "{p}.mlp.down_proj")}
    for model_type in ("gemma4", "gemma4_text")
}
#: Checkpoints whose decoder layers live under another prefix (vLLM's model file names them so): Nemotron-H's
#: ``backbone.layers.{i}.mixer.*`` (models/nemotron_h.py:588-616), the names its ModelOpt exclude_modules use.
_LAYER_PREFIX = {"nemotron_h": "backbone.layers.{layer}"}
#: Model types whose full attention is vLLM's Qwen3NextAttention (output gate; ModelSpec.attn_output_gate).
_OUTPUT_GATED = frozenset(QWEN3_NEXT_FAMILY)
#: MTP layers vLLM builds under their own prefix (not ``model.layers.{num_hidden_layers + i}``): Qwen3-Next and
#: Qwen3.5/3.6 name them ``mtp.layers.{i}`` (vLLM 0.32 models/qwen3_5_mtp.py:122, :234; qwen3_next_mtp.py:93, :195),
#: the names their checkpoints' ``ignore`` / ``exclude_modules`` (``re:^mtp.*``, ``mtp*``) use.
_MTP_PREFIX = dict.fromkeys(_OUTPUT_GATED, "mtp.layers.{index}")


@lru_cache(maxsize=65536)
def layer_module_bytes(spec: ModelSpec, q: Quantization, layer: int, kind: str,
                       dense_bytes: float) -> tuple[float, float, float, float]:
    """Bytes per parameter of one layer's (attention or mixer, dense MLP, routed experts, shared experts).

    A module the checkpoint leaves unquantized keeps ``dense_bytes``; MXFP4 (gpt-oss) quantizes only the experts.
    """
    prefix = f"model.language_model.layers.{layer}" if spec.multimodal else f"model.layers.{layer}"
    if spec.model_type in _LAYER_PREFIX:
        prefix = _LAYER_PREFIX[spec.model_type].format(layer=layer)
    if layer >= spec.num_layers and spec.model_type in _MTP_PREFIX:
        prefix = _MTP_PREFIX[spec.model_type].format(index=layer - spec.num_layers)

    def rate(group: str) -> float:
        patterns = _MODULE_NAMES_BY_TYPE.get(spec.model_type, {}).get(group, _MODULE_NAMES[group])
        names = tuple(n.format(p=prefix) for n in patterns)
        if q.experts_only and group != "experts":
            return float(dense_bytes)
        return q.module_bytes(names, dense_bytes)

    mixer = rate("mamba" if kind == "mamba" else "attention")
    return (mixer, rate("dense_mlp"), rate("experts"), rate("shared"))


def layer_parts(spec: ModelSpec, tp: int, kind: str, layer: int, moe_layer: bool,
                rates: tuple[float, float, float, float], dense_bytes: int,
                expert_shards: int | None) -> dict[str, float]:
    """One layer's weight bytes on one GPU by part: attention (or Mamba / gated-delta mixer), dense MLP, routed
    experts, shared experts, router and norms (``rates``: :func:`layer_module_bytes`).

    The router stays in the checkpoint dtype (vLLM builds MoE gates without a quant_config). A Nemotron-H block is
    a mixer or an MLP / MoE, not both, with one norm.
    """
    mixer_b, dense_b, experts_b, shared_b = rates
    parts = {"attention": 0.0, "dense_mlp": 0.0, "routed_experts": 0.0, "shared_experts": 0.0, "routers": 0.0,
             "norms": 0.0}
    if kind == "mamba":
        parts["attention"] = spec.mamba_params_per_layer(tp) * mixer_b
    elif kind != "mlp":  # a Nemotron-H MLP / MoE block has no mixer
        split, repl = spec.attention_params_per_layer(tp, kind)
        parts["attention"] = (split + repl) * mixer_b
    if spec.single_block_layers and kind != "mlp":  # Nemotron-H mixer block: no MLP
        parts["norms"] = spec.hidden_size * dense_bytes
        return parts
    experts, dense = spec.mlp_params_per_layer(layer, tp, expert_shards)
    if moe_layer:
        router = spec.hidden_size * spec.num_experts
        parts["routed_experts"] = experts * experts_b
        parts["shared_experts"] = (dense - router) * shared_b
        parts["routers"] = router * dense_bytes
    else:
        parts["dense_mlp"] = dense * dense_b
    parts["norms"] = 2 * spec.hidden_size * dense_bytes
    return parts


def _layer_bytes(spec: ModelSpec, tp: int, kind: str, layer: int, moe_layer: bool,
                 rates: tuple[float, float, float, float], dense_bytes: int, expert_shards: int | None) -> float:
    """One layer's weight bytes on one GPU (:func:`layer_parts`, summed)."""
    return sum(layer_parts(spec, tp, kind, layer, moe_layer, rates, dense_bytes, expert_shards).values())


def stage_layers(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage as vLLM splits them (``distributed/utils.py`` ``get_pp_indices``, 0.32 :126-170,
    0.33 :198-242): an even split, the remainder one layer each to the stages before the last, from the
    second-to-last backwards (the last stage holds the final norm and lm_head, the first the embedding)."""
    base, rem = divmod(num_layers, pp)
    counts = [base] * pp
    for i in range(2, rem + 2):
        counts[-i] += 1
    return counts
