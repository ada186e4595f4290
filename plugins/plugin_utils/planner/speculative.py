"""Speculative decoding in the plan: the draft's weights, its KV layers in the shared pool, its tokens per step.

The user pins ``speculative_config`` (a dict, as vLLM takes it); EAGLE / EAGLE-3 heads and separate draft models also
need the draft's ``config.json`` (``vllm_fleet_draft_model``), parsed like the target's. What vLLM 0.32 does, and the
planner mirrors (:data:`.rules.VERIFIED` ``spec:*`` cites each line per release):

* the method: ``model`` "ngram" or none means ngram; a model without a method is a draft model; the per-model MTP
  names (``deepseek_mtp``, ``glm4_moe_mtp``, ``qwen3_next_mtp``, ...) are "deprecated and replaced with mtp"
  (``config/speculative.py``);
* ``num_speculative_tokens`` defaults to the draft's ``n_predict`` (MTP: ``num_nextn_predict_layers``), above it it
  must be a multiple of it (MTP layers are reused); ngram and the other model-free methods need it given;
* ``draft_tensor_parallel_size`` is 1 or the target's TP (default: the target's); a separate draft model must use
  the target's TP (``v1/spec_decode/draft_model.py`` ``_raise_if_draft_tp_mismatch``); a draft model's vocabulary
  must equal the target's unless ``use_heterogeneous_vocab``;
* the draft runs on the last pipeline stage (``v1/worker/gpu_model_runner.py``: "we put the entire draft model on the
  last PP rank"); its attention layers are the layers the target lacks (``llm_base_proposer.py`` ``load_model``:
  "Find draft layers (attention layers added by draft model)") and get KV cache in the same pool
  (``get_kv_cache_spec`` walks every attention layer); full-attention layers of different widths form one group
  (``v1/core/kv_cache_utils.py`` ``UniformTypeKVCacheSpecs``: "Put all layers into one group");
* a decode step of every sequence is ``max_num_seqs x (1 + num_speculative_tokens)`` tokens
  (``config/vllm.py`` ``uniform_decode_query_len``), which sizes the CUDA-graph captures; model-based drafts reserve
  ``num_speculative_tokens`` KV slots past each request (``num_lookahead_tokens``).

Standard library only, no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import PlanError
from .model import ModelConfigError, ModelSpec, mtp_bytes_per_gpu, weights_bytes_per_gpu
from .quant_formats import Quantization

#: Methods that load no weights (the drafts come from the prompt or a suffix tree).
MODEL_FREE = ("ngram", "ngram_gpu", "suffix")
#: Methods whose draft is a model: the target's own MTP layers, an EAGLE head, a separate model.
MODEL_BASED = ("mtp", "eagle", "eagle3", "draft_model")
PLANNED = MODEL_FREE + MODEL_BASED
#: EAGLE-3 feeds the draft three of the target's hidden states (``eagle_aux_hidden_state_layer_ids`` default,
#: ``model_executor/models/llama_eagle3.py`` ``fc``: ``target_hidden_size * num_aux_hidden_states``).
EAGLE3_AUX_HIDDEN_STATES = 3


@dataclass(frozen=True)
class SpecDecode:
    """The resolved speculative decoding: method, draft tokens per step, the draft (when a model) and its TP."""

    method: str
    num_tokens: int  # num_speculative_tokens
    config: dict[str, Any]  # the user's speculative_config as vLLM will read it
    draft: ModelSpec | None = None  # EAGLE / EAGLE-3 / draft model: the draft's config
    draft_tp: int | None = None  # draft_tensor_parallel_size when the user set it
    mtp_layers: int = 0

    @property
    def model_based(self) -> bool:
        return self.method in MODEL_BASED

    @property
    def query_len(self) -> int:
        """Tokens one decoding sequence puts in a step: the sampled one plus the drafts (uniform_decode_query_len)."""
        return 1 + self.num_tokens

    @property
    def lookahead(self) -> int:
        """KV slots reserved past each request (``num_lookahead_tokens``: EAGLE-family and draft models)."""
        return self.num_tokens if self.model_based else 0

    def tp_for(self, tp: int) -> int:
        """The draft's tensor-parallel size under a target TP."""
        return self.draft_tp or tp

    @property
    def kv_layers(self) -> int:
        """Attention layers the draft adds to the KV pool."""
        if self.method == "mtp":
            return self.mtp_layers
        return self.draft.attention_layers if self.draft is not None else 0


def _as_dict(value: Any, key: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise PlanError(f"--{key} {value!r} is not JSON: give speculative_config as a dict "
                            "(e.g. {method: mtp, num_speculative_tokens: 1})") from None
    if not isinstance(value, dict):
        raise PlanError(f"--{key} must be a dict (e.g. {{method: ngram, num_speculative_tokens: 3}}), got {value!r}")
    return dict(value)


def _method(conf: dict[str, Any]) -> str:
    """vLLM's method inference (``config/speculative.py`` ``__post_init__``)."""
    method = conf.get("method")
    model = conf.get("model")
    if method is None:
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    method = str(method)
    if method == "[ngram]":
        method = "ngram"
    if method.endswith("_mtp"):  # deepseek_mtp, glm4_moe_mtp, qwen3_next_mtp, ...: "deprecated and replaced with mtp"
        method = "mtp"
    if method not in PLANNED:
        raise PlanError(f"speculative_config method {method!r} is not planned here (its draft's memory is not "
                        f"modelled): use one of {', '.join(PLANNED)}")
    return method


def _num_tokens(conf: dict[str, Any], method: str, n_predict: int | None) -> int:
    """``num_speculative_tokens``: given, else the draft's n_predict; refused as vLLM refuses it."""
    value = conf.get("num_speculative_tokens")
    if value is None:
        if n_predict:
            return n_predict
        raise PlanError(f"speculative_config method {method} needs num_speculative_tokens (vLLM: 'num_speculative_"
                        "tokens must be provided with speculative model unless the draft model config contains an "
                        "n_predict parameter'): set it, e.g. 3")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PlanError(f"speculative_config num_speculative_tokens must be a whole number above 0, not {value!r}")
    if n_predict and value > n_predict and value % n_predict:
        raise PlanError(f"speculative_config num_speculative_tokens {value} is above the draft's {n_predict} "
                        f"prediction layers and not a multiple of {n_predict} (vLLM reuses the layers): use "
                        f"{n_predict} or a multiple of it")
    return value


def _draft_spec(draft_config: dict[str, Any] | None, method: str, parse: Any) -> ModelSpec:
    if not draft_config:
        raise PlanError(f"speculative_config method {method} loads a draft model whose size the planner needs: give "
                        "the draft's config.json as vllm_fleet_draft_model (a dict or the draft's model directory)")
    try:
        draft: ModelSpec = parse(draft_config)
    except ModelConfigError as exc:
        raise PlanError(f"draft model config: {exc}") from None
    if any(k != "full" for k in draft.layer_kinds):
        raise PlanError("the draft model has sliding-window or Mamba layers, whose KV cache is not planned with a "
                        "target's: use a draft of full-attention layers")
    return draft


def resolve_speculative(spec: ModelSpec, user: dict[str, Any], draft_config: dict[str, Any] | None,
                        parse: Any) -> SpecDecode | None:
    """The user's speculative_config (and ``--spec-method`` / ``--spec-model`` / ``--spec-tokens``), checked.

    ``parse`` turns the draft's config dict into a :class:`ModelSpec` (``model.parse_model_config``).
    """
    conf: dict[str, Any] = {}
    if "speculative-config" in user:
        conf = _as_dict(user["speculative-config"], "speculative-config")
    for short, key in (("spec-method", "method"), ("spec-model", "model"), ("spec-tokens", "num_speculative_tokens")):
        if short in user:
            conf.setdefault(key, user[short])
    if not conf:
        if draft_config:
            raise PlanError("vllm_fleet_draft_model is given but no speculative_config uses it: pin "
                            "speculative_config (e.g. {method: eagle3, model: <draft>, num_speculative_tokens: 3}) "
                            "or drop vllm_fleet_draft_model")
        return None
    if "tensor_parallel_size" in conf:
        raise PlanError("speculative_config tensor_parallel_size is not a valid key (vLLM refuses it): use "
                        "draft_tensor_parallel_size")
    method = _method(conf)
    draft_tp = conf.get("draft_tensor_parallel_size")
    if draft_tp is not None and (isinstance(draft_tp, bool) or not isinstance(draft_tp, int) or draft_tp < 1):
        raise PlanError(f"speculative_config draft_tensor_parallel_size must be a whole number >= 1, not {draft_tp!r}")
    if method in MODEL_FREE:
        if draft_config:
            raise PlanError(f"speculative_config method {method} uses no draft model: drop vllm_fleet_draft_model")
        return SpecDecode(method=method, num_tokens=_num_tokens(conf, method, None), config=conf)
    if method == "mtp":
        if not spec.mtp_layers:
            raise PlanError("speculative_config method mtp needs the checkpoint's MTP layers, and its config.json "
                            "has none (num_nextn_predict_layers / mtp_num_hidden_layers): use ngram, or an EAGLE head "
                            "or draft model")
        return SpecDecode(method=method, num_tokens=_num_tokens(conf, method, spec.mtp_layers), config=conf,
                          draft_tp=draft_tp, mtp_layers=spec.mtp_layers)
    draft = _draft_spec(draft_config, method, parse)
    if method == "draft_model" and not conf.get("use_heterogeneous_vocab") and draft.vocab_size != spec.vocab_size:
        raise PlanError(f"the draft model's vocab_size {draft.vocab_size} differs from the target's "
                        f"{spec.vocab_size} (vLLM refuses: 'Target and draft model should have the same vocabulary "
                        "size'): use a draft with the target's tokenizer, or set use_heterogeneous_vocab: true")
    n_predict = draft_config.get("n_predict") if draft_config else None
    tokens = _num_tokens(conf, method, n_predict if isinstance(n_predict, int) and n_predict > 0 else None)
    return SpecDecode(method=method, num_tokens=tokens, config=conf, draft=draft, draft_tp=draft_tp)


def check_draft_tp(sd: SpecDecode, tp: int) -> str:
    """'' when the draft runs at this target TP, else why not (one line that says what to change)."""
    dtp = sd.tp_for(tp)
    if sd.draft_tp is not None and sd.draft_tp not in (1, tp):
        return (f"speculative_config draft_tensor_parallel_size {sd.draft_tp} is neither 1 nor the target's "
                f"tensor_parallel_size {tp} (vLLM refuses any other): set it to 1 or {tp}, or leave it out")
    if sd.method == "draft_model" and dtp != tp:
        return (f"a separate draft model must run at the target's tensor_parallel_size {tp}, not {dtp} (vLLM 'Currently, "
                "'draft_tensor_parallel_size' and 'tensor_parallel_size' must be the same'): leave "
                "draft_tensor_parallel_size out")
    draft = sd.draft
    if draft is not None and draft.num_heads % dtp:
        return (f"the draft's {draft.num_heads} attention heads do not split over draft TP {dtp}: set "
                "draft_tensor_parallel_size: 1 or use a TP that divides them")
    return ""


def draft_weight_bytes(sd: SpecDecode, spec: ModelSpec, tp: int, pp: int, dense_bytes: int, quant: Quantization,
                       expert_shards: int | None) -> int:
    """The draft's weight bytes on one GPU of the last pipeline stage (before any checkpoint scaling)."""
    if sd.method == "mtp":
        return mtp_bytes_per_gpu(spec, tp, pp, dense_bytes, quant, expert_shards)
    draft = sd.draft
    if draft is None:
        return 0
    dtp = sd.tp_for(tp)
    if sd.method == "draft_model":  # its own embedding and lm_head (draft_model.py: "Draft models don't share")
        return sum(weights_bytes_per_gpu(draft, dtp, 1, dense_bytes, draft.quantization))
    return _eagle_head_bytes(sd, draft, spec, dtp, pp, dense_bytes)


def _eagle_head_bytes(sd: SpecDecode, draft: ModelSpec, spec: ModelSpec, dtp: int, pp: int, dense_bytes: int) -> int:
    """An EAGLE / EAGLE-3 head: its decoder layers (EAGLE-3's first takes 2 x hidden into QKV,
    ``llama_eagle3.py`` ``qkv_input_size``), the ``fc`` that folds the target's hidden states in (replicated), and an
    lm_head over ``draft_vocab_size`` where it has one; the embedding is the target's when the widths match
    (``_maybe_share_embeddings``) and pipeline parallelism is off."""
    h, hd = draft.hidden_size, draft.head_dim
    lin = draft.quantization.linear_bytes_per_param(dense_bytes)
    kv_heads = draft.kv_heads_per_gpu(dtp)
    total = 0.0
    for layer in range(draft.num_layers):
        qkv_in = 2 * h if sd.method == "eagle3" and layer == 0 else h
        attn = qkv_in * draft.num_heads * hd / dtp + 2 * qkv_in * kv_heads * hd + draft.num_heads * hd * h / dtp
        mlp = 3 * h * draft.intermediate_size / dtp
        total += (attn + mlp) * lin + 2 * h * dense_bytes
    folded = EAGLE3_AUX_HIDDEN_STATES * spec.hidden_size if sd.method == "eagle3" else 2 * h
    total += folded * h * dense_bytes
    if draft.draft_vocab_size and draft.draft_vocab_size != spec.vocab_size:
        total += draft.draft_vocab_size * h / dtp * dense_bytes
    if h != spec.hidden_size or pp > 1:
        total += draft.vocab_size * h / dtp * dense_bytes
    return int(total)


def draft_kv(sd: SpecDecode, spec: ModelSpec, tp: int, kv_bytes: int) -> tuple[int, int]:
    """(draft layers with the target's page, KV bytes per token of draft layers with another page) on one GPU.

    MTP layers are the target's attention; an EAGLE head or draft model whose per-token KV differs joins the target's
    one full-attention group (page sizes add up). A hybrid target with such a draft is refused (groups must share a
    page size, which vLLM reaches by padding the planner does not model).
    """
    if sd.method == "mtp":
        return sd.mtp_layers, 0
    draft = sd.draft
    if draft is None:
        return 0, 0
    per_token = draft.kv_bytes_per_token_layer(sd.tp_for(tp), kv_bytes)
    if per_token == spec.kv_bytes_per_token_layer(tp, kv_bytes) and draft.mla == spec.mla:
        return draft.attention_layers, 0
    if any(k != "full" for k in spec.layer_kinds):
        raise PlanError("a draft whose KV cache per token differs from this hybrid (sliding-window / Mamba) target's "
                        "is not planned: use the checkpoint's MTP layers or ngram")
    return 0, per_token * draft.attention_layers


def capture_sizes(max_num_seqs: int, query_len: int, max_num_batched_tokens: int, blackwell: bool) -> list[int]:
    """vLLM 0.32's default CUDA-graph capture sizes with draft tokens (``config/vllm.py`` ``_set_cudagraph_sizes``):
    the token grid up to ``min(max_num_seqs x query_len x 2, 512 | 1024)`` and ``max_num_batched_tokens``, plus every
    uniform decode size (request count x query_len) within both."""
    default_max = 1024 if blackwell else 512
    largest = min(max_num_seqs * query_len * 2, default_max)
    uniform: list[int] = []
    if query_len > 1:
        reqs = min(max_num_seqs, default_max)
        counts = [n for n in (1, 2, 4) if n <= reqs] + list(range(8, min(reqs + 1, 256), 8))
        counts += list(range(256, reqs + 1, 16))
        uniform = [n * query_len for n in sorted({*counts, reqs}) if n * query_len <= largest]
    elif max_num_seqs <= largest:
        uniform = [max_num_seqs]
    tokens = max_num_batched_tokens
    largest = min(tokens, largest)
    sizes = [s for s in (1, 2, 4) if s <= largest]
    if largest >= 8:
        sizes += list(range(8, min(largest + 1, 256), 8))
    if largest >= 256:
        sizes += list(range(256, largest + 1, 16))
    if tokens <= largest and tokens not in sizes:
        sizes.append(tokens)
    sizes += [s for s in uniform if s <= tokens]
    return sorted(set(sizes))


def describe(sd: SpecDecode, spec: ModelSpec, weights: int, kv_same: int, kv_extra_per_token: int, tp: int,
             kv_bytes: int) -> str:
    """The reason line of ``speculative-config``."""
    gib = weights / 1024**3
    if not sd.model_based:
        return (f"set by you: {sd.method} drafts {sd.num_tokens} tokens from the prompt (no weights, no KV layers); "
                f"a decode step is {sd.query_len} tokens per sequence")
    target_page = spec.kv_bytes_per_token_layer(tp, kv_bytes) * spec.attention_layers
    draft_kv_token = kv_same * spec.kv_bytes_per_token_layer(tp, kv_bytes) + kv_extra_per_token
    share = f"+{draft_kv_token / target_page:.1%}" if target_page else "n/a"
    what = {"mtp": f"the checkpoint's {sd.mtp_layers} MTP layer(s)", "eagle": "the EAGLE head",
            "eagle3": "the EAGLE-3 head", "draft_model": "the draft model"}[sd.method]
    return (f"set by you: {what} on the last pipeline stage, {gib:.2f} GiB of weights per GPU (draft TP "
            f"{sd.tp_for(tp)}); {sd.kv_layers} draft attention layer(s) share the KV pool ({share} KV bytes per "
            f"token); {sd.num_tokens} draft tokens: a decode step is {sd.query_len} tokens per sequence and "
            f"{sd.lookahead} KV slots are reserved past each request")
