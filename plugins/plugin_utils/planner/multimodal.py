"""The multimodal profile: the vision encoder's dummy batch and the encoder cache in vLLM's profile run (issue 26, 4).

vLLM 0.32 ``v1/worker/gpu_model_runner.py:6133-6205`` (0.33: :6072-6144, the same ``profile_run``) runs, before
the text dummy forward, the encoder on ``mm_max_items_per_batch`` items of the modality with the most tokens per
item, stores the outputs in ``encoder_cache`` (:6189-6190; 0.33 :6128-6129) and clears it only after the text
forward and the sampler (:6205; 0.33 :6144): the torch peak is the larger of the encoder's own forward and the text
forward, plus the cached encoder outputs.

The budget (``multimodal/encoder_budget.py:118-140, 142-186``, the same lines in 0.33;
``v1/core/encoder_cache_manager.py:316-365``, 0.33 :333-382): encoder budget = max(max_num_batched_tokens, tokens
per item) (``config/scheduler.py:303-304`` sets both the compute budget and the cache size to
max_num_batched_tokens; 0.33 :306-307); items per batch = max(1, min(budget // tokens per item, max_num_seqs x
items per prompt)). A modality whose ``limit_mm_per_prompt`` is 0 leaves the tower; all zero leaves no tower
modality and vLLM skips the encoder profile (:6146-6155) and the encoder cache (encoder_cache_manager.py:336-340;
0.33 :353-357). An unset modality's limit is 999 (config/multimodal.py:215).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Qwen2-VL / Qwen2.5-VL / Qwen3-VL: tokens per image = longest_edge // (patch x merge)^2 (vLLM 0.32
# model_executor/models/qwen2_vl.py:1079-1128 get_image_size_with_most_features, :1130-1139 get_max_image_tokens;
# ``mm_processor_kwargs`` max_pixels overrides size.longest_edge, :959-976). The default longest_edge comes from the
# checkpoint's preprocessor_config.json, which config.json does not carry: the figure below is the image
# processor's (published preprocessor_config.json of Qwen2.5-VL: max_pixels 12845056); pass ``max_pixels`` in
# mm_processor_kwargs for another.
QWEN_VL_DEFAULT_MAX_PIXELS = 12845056
#: Qwen3-VL's preprocessor_config.json: size.longest_edge 16777216 (patch 16).
QWEN3_VL_DEFAULT_MAX_PIXELS = 16777216
#: Gemma 3's image tokens when config.json omits mm_tokens_per_image (transformers Gemma3Config default).
GEMMA3_TOKENS_PER_IMAGE = 256
#: LLaVA-NeXT's grids when config.json names none: transformers' LlavaNextConfig default (models/llava_next/
#: configuration_llava_next.py, ``image_grid_pinpoints``), which vLLM reads through hf_config.
LLAVA_NEXT_DEFAULT_PINPOINTS = ((336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008))


@dataclass(frozen=True)
class VisionSpec:
    """The vision tower's shape, from ``vision_config`` (plus the wrapper's image-token fields)."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    patch_size: int
    image_size: int  # 0 when the tower takes any size (Qwen-VL)
    spatial_merge_size: int  # Qwen-VL's patch merger (tokens = patches / merge^2); 1 otherwise
    tokens_per_image: int  # fixed image tokens (Gemma 3 mm_tokens_per_image), 0 if computed
    pinpoints: tuple[tuple[int, int], ...]  # LLaVA-NeXT anyres grids (height, width), () otherwise
    family: str  # "qwen-vl", "qwen3-vl", "fixed", "tiles", "vit"


def parse_vision(outer: dict[str, Any]) -> VisionSpec | None:
    """The vision tower of a multimodal wrapper's config.json, or None without a ``vision_config`` object."""
    vision = outer.get("vision_config")
    if not isinstance(vision, dict):
        return None
    vh = int(vision.get("hidden_size") or vision.get("embed_dim") or 1024)
    vi = int(vision.get("intermediate_size") or 4 * vh)
    layers = int(vision.get("num_hidden_layers") or vision.get("depth") or 24)
    patch = int(vision.get("patch_size") or 14)
    image = int(vision.get("image_size") or 0)
    merge = int(vision.get("spatial_merge_size") or 1)
    model_type = str(outer.get("model_type") or "")
    # Gemma 3: transformers' Gemma3Config default mm_tokens_per_image 256 (models/gemma3/configuration_gemma3.py)
    # when the checkpoint's config.json leaves it out; vLLM reads hf_config (model_executor/models/gemma3_mm.py:709).
    fixed = int(outer.get("mm_tokens_per_image") or (GEMMA3_TOKENS_PER_IMAGE if model_type == "gemma3" else 0))
    pinpoints: tuple[tuple[int, int], ...] = ()
    if model_type.startswith("qwen3") and merge > 1:
        family = "qwen3-vl"
    elif merge > 1:
        family = "qwen-vl"
    elif fixed:
        family = "fixed"
    elif (model_type == "llava_next" or outer.get("image_grid_pinpoints")) and image:
        pins = outer.get("image_grid_pinpoints") or LLAVA_NEXT_DEFAULT_PINPOINTS
        pinpoints = tuple((int(h), int(w)) for h, w in pins)
        family = "tiles"
    else:
        family = "vit"
    return VisionSpec(hidden_size=vh, intermediate_size=vi, num_layers=layers, patch_size=patch, image_size=image,
                      spatial_merge_size=merge, tokens_per_image=fixed, pinpoints=pinpoints, family=family)


@dataclass(frozen=True)
class MultimodalProfile:
    """What the encoder adds to vLLM's profile run on one GPU."""

    tokens_per_item: int  # decoder tokens one image becomes
    patches_per_item: int  # encoder sequence one image is
    items_per_batch: int
    encoder_budget: int  # tokens (0: text-only)
    encoder_peak: int  # bytes: the encoder's forward over the dummy batch
    encoder_cache: int  # bytes: the cached outputs, held through the text forward
    reason: str

    @property
    def enabled(self) -> bool:
        return self.encoder_budget > 0


def qwen3_vl_tower_params(vision: dict[str, Any]) -> int:
    """Parameters of vLLM's ``Qwen3_VisionTransformer``, the tower of Qwen3-VL, Qwen3-VL-MoE, Qwen3.5 and Qwen3.6
    (vLLM 0.32 and 0.33 models/qwen3_vl.py: built by :2011, qwen3_5.py:514 / :737 and qwen3_vl_moe.py's subclass):

    - ``patch_embed``: a Conv3d of ``in_channels x temporal_patch_size x patch_size^2`` into ``hidden_size``, with
      bias (:392-398); ``pos_embed``: ``num_position_embeddings x hidden_size`` (:617);
    - ``depth`` blocks (:664): two LayerNorms, attention ``qkv`` (3h x h + bias) and ``proj`` (h x h + bias)
      (qwen2_5_vl.py ``Qwen2_5_VisionAttention``), an MLP ``linear_fc1`` / ``linear_fc2`` over ``intermediate_size``
      with biases (:478-484);
    - the ``merger`` (:635) and one more per ``deepstack_visual_indexes`` entry (:644): ``spatial_merge_size^2``
      patches concatenated (:522, 4h), a LayerNorm (of h, or of 4h after the shuffle for the deepstack ones),
      ``linear_fc1`` 4h x 4h and ``linear_fc2`` 4h x ``out_hidden_size``, with biases.
    """
    h = int(vision["hidden_size"])
    inter = int(vision["intermediate_size"])
    merged = h * int(vision.get("spatial_merge_size") or 2) ** 2
    out = int(vision["out_hidden_size"])
    patch = int(vision.get("patch_size") or 16)
    patch_embed = int(vision.get("in_channels") or 3) * int(vision.get("temporal_patch_size") or 2) * patch * patch * h
    embeddings = patch_embed + h + int(vision.get("num_position_embeddings") or 0) * h
    block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * inter + inter) + (inter * h + h)

    def merger(norm: int) -> int:
        return 2 * norm + merged * merged + merged + merged * out + out

    deepstack = len(vision.get("deepstack_visual_indexes") or ())
    return embeddings + int(vision["depth"]) * block + merger(h) + deepstack * merger(merged)


def _modalities(vision: VisionSpec) -> tuple[str, ...]:
    """The modalities the tower takes: the Qwen-VL families take video too."""
    return ("image", "video") if vision.family in ("qwen-vl", "qwen3-vl") else ("image",)


def _image_limit(vision: VisionSpec, user: dict[str, Any]) -> int:
    """The image limit vLLM applies (0.32 config/multimodal.py:699-707: 0 under ``language_model_only``, an unset
    modality 999): 0 when every modality the tower takes is 0 (text-only); -1 when images are off but another
    modality (video) is on."""
    if user.get("language-model-only"):
        return 0
    limits = user.get("limit-mm-per-prompt")
    limits = limits if isinstance(limits, dict) else {}
    values = {k: int((v.get("count", 0) if isinstance(v, dict) else v) or 0) for k, v in limits.items()}
    if all(values.get(m, 999) == 0 for m in _modalities(vision)):
        return 0
    image = values.get("image", 999)
    return image if image > 0 else -1


def fallback_reason(vision: VisionSpec | None, user: dict[str, Any]) -> str:
    """Why a vision model's encoder profile is the flat MULTIMODAL_PROFILE_BYTES (memory.py)."""
    if vision is not None and _image_limit(vision, user) == -1:
        return ("limit_mm_per_prompt turns images off but keeps another modality: vLLM profiles that one (video can be "
                "far larger, up to max_model_len); not modelled, a flat 256 MiB")
    return "no rule for this vision tower's image size: a flat 256 MiB for the encoder profile and encoder cache"


def _max_pixels(user: dict[str, Any], default: int) -> int:
    kwargs = user.get("mm-processor-kwargs")
    if isinstance(kwargs, dict):
        value = kwargs.get("max_pixels") or (kwargs.get("size") or {}).get("longest_edge")
        if value:
            return int(value)
    return default


def _anyres_tokens(vision: VisionSpec, per_tile: int) -> tuple[int, int, str]:
    """LLaVA-NeXT: the grid pinpoint with the most features (vLLM 0.32 model_executor/models/llava_next.py:179-195):
    base image (per_tile) + unpadded grid (side x gh x side x gw, no padding at the pinpoint's own aspect ratio) +
    one newline per grid row (:108-143, 146-176); the tower sees the base image and every grid tile, CLS included."""
    side = vision.image_size // vision.patch_size
    best = (0, 0, (0, 0))
    for h, w in vision.pinpoints:
        gh, gw = max(h // vision.image_size, 1), max(w // vision.image_size, 1)
        tokens = per_tile + side * gh * side * gw + side * gh
        if tokens > best[0]:
            best = (tokens, (1 + gh * gw) * (per_tile + 1), (h, w))
    tokens, patches, (h, w) = best
    return tokens, patches, f"anyres {h}x{w}: base {per_tile} + grid and newlines"


def tokens_per_item(vision: VisionSpec, user: dict[str, Any]) -> tuple[int, int, str]:
    """(decoder tokens, encoder patches, how) of the image with the most features vLLM profiles."""
    if vision.family in ("qwen-vl", "qwen3-vl"):
        default = QWEN3_VL_DEFAULT_MAX_PIXELS if vision.family == "qwen3-vl" else QWEN_VL_DEFAULT_MAX_PIXELS
        pixels = _max_pixels(user, default)
        unit = vision.patch_size * vision.spatial_merge_size
        tokens = pixels // (unit * unit)
        return tokens, tokens * vision.spatial_merge_size ** 2, f"max_pixels {pixels} // {unit}^2"
    per_tile = (vision.image_size // vision.patch_size) ** 2 if vision.image_size else 576
    if vision.family == "fixed":  # without image_size the tower's sequence is unknown: at least the image tokens
        patches = per_tile if vision.image_size else vision.tokens_per_image
        return vision.tokens_per_image, patches, f"mm_tokens_per_image {vision.tokens_per_image}"
    if vision.family == "tiles":
        return _anyres_tokens(vision, per_tile)
    return per_tile, per_tile + 1, f"({vision.image_size} / {vision.patch_size})^2 patches"


def multimodal_profile(vision: VisionSpec | None, user: dict[str, Any], text_hidden: int, max_num_batched_tokens: int,
                       max_num_seqs: int, max_model_len: int, act_bytes: int, tp: int = 1) -> MultimodalProfile | None:
    """The encoder's dummy batch and encoder cache in vLLM's profile run; None for a text-only model. A text-only
    setting (``limit_mm_per_prompt`` all zero) gives a profile with budget 0: vLLM skips both."""
    if vision is None:
        return None
    if vision.family == "vit" and not vision.image_size:
        return None  # no rule for this tower's image size: memory.MULTIMODAL_PROFILE_BYTES, flat
    limit = _image_limit(vision, user)
    if limit == -1:
        return None  # video / audio only: their profile is not modelled (fallback_reason)
    if limit == 0:
        return MultimodalProfile(0, 0, 0, 0, 0, 0, "text-only (limit_mm_per_prompt all zero or language_model_only): "
                                 "vLLM skips the encoder profile "
                                 "and the encoder cache (0.32 gpu_model_runner.py:6146-6155, "
                                 "encoder_cache_manager.py:336-340)")
    tokens, patches, how = tokens_per_item(vision, user)
    budget = max(max_num_batched_tokens, tokens)
    per_prompt = max(1, min(limit, max_model_len // max(tokens, 1)))
    items = max(1, min(budget // max(tokens, 1), max_num_seqs * per_prompt))
    # The encoder's transient per patch: one block's qkv (3h) and MLP (fc1 + activation: 2I), column-parallel over
    # TP unless mm_encoder_tp_mode is "data" (0.32 model_executor/models/qwen3_vl.py:407-435, disable_tp), plus the
    # attention output and residual (2h, whole), in the tower's dtype over every patch (flash attention: no s^2).
    vh, vi = vision.hidden_size, vision.intermediate_size
    shards = 1 if user.get("mm-encoder-tp-mode") == "data" else max(tp, 1)
    encoder_peak = int(items * patches * ((3 * vh + 2 * vi) / shards + 2 * vh) * act_bytes)
    encoder_cache = items * tokens * text_hidden * act_bytes
    reason = (f"encoder profile: {items} image{'s' if items > 1 else ''} x {tokens} tokens ({how}; {patches} patches), "
              f"encoder budget {budget} tokens = max(max_num_batched_tokens, tokens per item); peak "
              f"{encoder_peak / 2**30:.2f} GiB, encoder cache {encoder_cache / 2**30:.2f} GiB held through the text "
              "forward (0.32 gpu_model_runner.py:6133-6205, multimodal/encoder_budget.py:142-186)")
    return MultimodalProfile(tokens, patches, items, budget, encoder_peak, encoder_cache, reason)
