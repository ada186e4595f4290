"""Weight bytes from what a checkpoint says about its quantization: method, bits, scales, groups, skipped modules.

Reads ``quantization_config`` (config.json) or the legacy ModelOpt ``hf_quant_config.json`` layout
(``{"producer": {"name": "modelopt"}, "quantization": {...}}``; :mod:`model_files` puts its content where vLLM
does, as the config's ``quantization_config`` when config.json has none). Each format's bytes per weight count
the packed values and the scales stored with them; modules the checkpoint leaves unquantized (``ignore``,
``exclude_modules``, ``modules_to_not_convert``) keep the checkpoint dtype, matched the way vLLM matches them.
The vLLM source each rule mirrors is in :data:`rules.VERIFIED` (keys ``quant:*``). Standard library only, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatch
from functools import lru_cache
from typing import Any


class QuantFormatError(ValueError):
    """The checkpoint's quantization cannot be sized; the message says what to do."""


#: Bytes of one quantized weight, scales included, per format (the reason line quotes the formula).
NVFP4_BYTES = 0.5 + 1 / 16  # e2m1 values + one FP8 (e4m3) scale per 16 = 4.5 bits (per-tensor global scale aside)
MXFP4_BYTES = 0.5 + 1 / 32  # e2m1 values + one e8m0 scale per 32 = 4.25 bits
MXFP8_BYTES = 1.0 + 1 / 32  # e4m3 values + one e8m0 scale per 32
FP8_BLOCK = 128  # DeepSeek-style block FP8: one fp32 scale per 128 x 128 block


def fp8_block_bytes(block: tuple[int, int] = (FP8_BLOCK, FP8_BLOCK)) -> float:
    return 1.0 + 4 / (block[0] * block[1])


def int_group_bytes(bits: float, group_size: int, zero_point: bool = True, scale_bytes: int = 2) -> float:
    """Packed ``bits``-bit integers + one fp16 scale (and one packed zero point) per ``group_size`` weights;
    per-channel (``group_size`` <= 0) scales are one per output row, negligible against the weights."""
    if group_size <= 0:
        return bits / 8
    return bits / 8 + (scale_bytes + (bits / 8 if zero_point else 0.0)) / group_size


#: Bytes per weight of a per-module rule that leaves the module unquantized (it keeps the checkpoint dtype).
UNQUANTIZED = -1.0
#: One per-module rule: (how vLLM matches it, the checkpoint's pattern, bytes per weight or UNQUANTIZED).
ModuleRule = tuple[str, str, float]
#: vLLM's module classes for what the planner sizes: routed experts are one ``RoutedExperts`` layer, to which
#: compressed-tensors copies a ``Linear`` target's scheme (compressed_tensors.py ``_add_fused_moe_to_target_scheme_map``);
#: the rest are ``*Linear`` layers.
_EXPERT_CLASSES = ("RoutedExperts", "Linear")
_LINEAR_CLASSES = ("QKVParallelLinear", "MergedColumnParallelLinear", "RowParallelLinear", "ColumnParallelLinear",
                   "ReplicatedLinear")
_REGEX_CHARS = frozenset("*+?^$()[]{}|\\")


@dataclass(frozen=True)
class Quantization:
    """How the checkpoint's linear weights are stored.

    ``bytes_per_weight`` (0: derived from ``method``/``weight_bits``, for the online ``--quantization`` the user
    sets) counts the scales; ``ignore`` holds the checkpoint's unquantized-module patterns; ``layer_bytes`` the
    per-module bytes of a ModelOpt MIXED_PRECISION checkpoint (modules it does not list stay unquantized);
    ``module_rules`` the per-module schemes of compressed-tensors ``config_groups``, Quark ``layer_quant_config`` and
    AutoRound ``extra_config`` / ``block_name_to_quantize``, tried in vLLM's order (:func:`_rule_matches`).
    """

    method: str  # "none", "awq", "gptq", "fp8", "compressed-tensors", "mxfp4", "modelopt", "modelopt_fp4", ...
    weight_bits: float = 16.0
    group_size: int = 0
    scheme: str = ""  # compressed-tensors scheme (w8a8-fp8, wna16, nvfp4, ...) / ModelOpt quant_algo
    block_fp8: bool = False
    weight_block: tuple[int, ...] = ()  # fp8 ``weight_block_size`` [block_n, block_k] (planner/shape_rules.py)
    experts_only: bool = False  # e.g. gpt-oss MXFP4 quantizes only the MoE experts
    bytes_per_weight: float = 0.0
    ignore: tuple[str, ...] = ()
    layer_bytes: tuple[tuple[str, float], ...] = ()
    module_rules: tuple[ModuleRule, ...] = ()
    unmatched_unquantized: bool = False  # a module no ``module_rules`` entry matches keeps the checkpoint dtype
    lm_head_quantized: bool = False  # AWQ / GPTQ ``"lm_head": true``: the output projection is quantized too
    bitless_keys: tuple[str, ...] = ()  # AutoRound ``extra_config`` keys without ``bits`` (default bits, lm_head 16)
    source: str = "config.json quantization_config"
    why: str = ""  # one line: the format, its bits per weight and where they come from

    def linear_bytes_per_param(self, dense_bytes: float) -> float:
        """Bytes one quantized linear-layer parameter takes in memory, scales and zero points included."""
        if self.method == "none":
            return dense_bytes
        if self.bytes_per_weight:
            return self.bytes_per_weight
        bits = self.weight_bits
        if self.method in ("awq", "gptq", "compressed-tensors") and bits <= 4 and self.group_size:
            return int_group_bytes(bits, self.group_size)
        if self.method == "mxfp4":
            return MXFP4_BYTES
        if bits == 8:
            return fp8_block_bytes() if self.block_fp8 else 1.0
        return bits / 8

    def module_bytes(self, names: tuple[str, ...], dense_bytes: float) -> float:
        """Bytes per parameter of one module known by ``names`` (its checkpoint and vLLM spellings)."""
        return _module_bytes(self, names, float(dense_bytes))


def _matches(name: str, pattern: str) -> bool:
    """vLLM's skip matching: ``re:`` regexes (compressed-tensors ``ignore``, utils/match), exact names, substrings and
    wildcards (ModelOpt ``is_layer_excluded``), and a ``language_model.`` prefix dropped."""
    if pattern.startswith("re:"):
        return re.match(pattern[3:], name) is not None
    bare = name.removeprefix("model.language_model.").removeprefix("language_model.model.")
    for candidate in (name, bare, "model." + bare):
        if candidate == pattern or pattern in candidate or fnmatch(candidate, pattern):
            return True
    return False


def _regex_search(pattern: str, name: str) -> bool:
    try:
        return re.search(pattern, name) is not None
    except re.error:
        return False


def _rule_matches(kind: str, pattern: str, names: tuple[str, ...]) -> bool:
    """Whether one per-module rule covers a module known by ``names``, matched the way vLLM matches that format:

    ``ct-name`` a compressed-tensors target that is a layer name or ``re:`` regex (first pass), ``ct-class`` one that
    names a module class, contained in it (second pass; compressed_tensors/utils.py ``find_matched_target``);
    ``quark`` a ``layer_quant_config`` key: fnmatch when it has a ``*``, else the layer name inside the key
    (quark.py ``get_layer_quant_config_from_name``); ``inc-key`` an AutoRound ``extra_config`` key, exact or a suffix
    after a dot; ``inc-regex`` one with regex characters, searched; ``prefix`` a ``block_name_to_quantize`` entry
    (inc/config_parser.py ``_resolve_raw``).
    """
    if kind == "ct-name":
        return any(n == pattern or (pattern.startswith("re:") and re.match(pattern[3:], n) is not None)
                   for n in names)
    if kind == "ct-class":
        classes = _EXPERT_CLASSES if any(".experts" in n for n in names) else _LINEAR_CLASSES
        return any(pattern.lower() in c.lower() for c in classes)
    if kind == "quark":
        return any(fnmatch(n, pattern) if "*" in pattern else n in pattern for n in names)
    if kind == "inc-key":
        return any(n == pattern or n.endswith("." + pattern) for n in names)
    if kind == "inc-regex":
        return any(_regex_search(pattern, n) for n in names)
    if kind == "prefix":
        return any(n.startswith(pattern) for n in names)
    raise ValueError(f"unknown module rule kind {kind}")


@lru_cache(maxsize=65536)
def _module_bytes(q: Quantization, names: tuple[str, ...], dense_bytes: float) -> float:
    if q.method == "none":
        return dense_bytes
    if q.ignore and any(_matches(n, p) for n in names for p in q.ignore):
        return dense_bytes
    if q.layer_bytes:
        for name in names:
            bare = name.removeprefix("model.language_model.").removeprefix("language_model.model.")
            for key, value in q.layer_bytes:
                kbare = key.removeprefix("model.language_model.").removeprefix("language_model.model.")
                if kbare == bare or bare.startswith(kbare + ".") or "model." + bare == kbare:
                    return value
        return dense_bytes  # MIXED_PRECISION: a module it does not list is not quantized
    for kind, pattern, value in q.module_rules:
        if _rule_matches(kind, pattern, names):
            return dense_bytes if value == UNQUANTIZED else value
    if q.unmatched_unquantized:
        return dense_bytes
    return q.linear_bytes_per_param(dense_bytes)


def lm_head_bytes(q: Quantization, dense_bytes: float) -> float:
    """Bytes per parameter of an untied output projection (vLLM's ``ParallelLMHead``), quantized only where the
    checkpoint's format quantizes it in vLLM:

    - ModelOpt: unless ``exclude_modules`` names it; mixed precision: when ``quantized_layers`` lists it;
    - AWQ / GPTQ: only with ``"lm_head": true`` (auto_awq.py:245, auto_gptq.py:198; quant:awq_lm_head_flag,
      quant:gptq_lm_head_flag);
    - compressed-tensors: when a target names it (exact or ``re:``) and ``ignore`` does not; a class target such as
      ``Linear`` does not reach it (compressed_tensors.py:186, quant:ct_lm_head);
    - AutoRound (``inc``): when ``extra_config`` names it with ``bits`` below 16, or ``block_name_to_quantize``
      does; otherwise unquantized (inc/config_parser.py:171, quant:inc_lm_head);
    - FP8, MXFP4, Quark: never (they build linear layers and experts only; fp8.py:180, quant:fp8_linear_only).
    """
    names = ("lm_head",)
    # every ModelOpt method (modelopt, modelopt_fp4, modelopt_mxfp8, modelopt_mixed) builds ParallelLMHead with its
    # scheme unless its lists keep it out (vLLM 0.32 modelopt.py:250, 0.33 :254, rule quant:modelopt_lm_head; mixed
    # precision when quantized_layers names lm_head, 0.32 :1799-1800, 0.33 :1830-1831, quant:modelopt_mixed_lm_head)
    if q.method.startswith("modelopt") or (q.method in ("awq", "gptq") and q.lm_head_quantized):
        return q.module_bytes(names, dense_bytes)
    if q.method in ("compressed-tensors", "auto-round"):
        if q.ignore and any(_matches(n, p) for n in names for p in q.ignore):
            return dense_bytes
        kinds = ("ct-name",) if q.method == "compressed-tensors" else ("inc-key", "inc-regex", "prefix")
        for kind, pattern, value in q.module_rules:
            if kind in kinds and _rule_matches(kind, pattern, names):
                # inc reads an entry without "bits" for the head as 16 bits (config_parser.py get_config, quantized
                # False: the head is not quantized by default)
                bitless = kind != "prefix" and pattern in q.bitless_keys
                return dense_bytes if value == UNQUANTIZED or bitless else value
    return dense_bytes


# --- Parsing ---------------------------------------------------------------------------------------------------

#: quant_method values the planner sizes (vLLM's names; ``auto-round`` is vLLM's ``inc``).
KNOWN_METHODS = ("awq", "gptq", "auto-round", "fp8", "compressed-tensors", "modelopt", "modelopt_fp4",
                 "modelopt_mxfp8", "modelopt_mixed", "mxfp4", "quark", "bitsandbytes", "gguf")

#: ModelOpt quant_algo -> (vLLM method, bytes per weight, reason). vLLM 0.32 ``modelopt.py`` LINEAR_ALGOS.
_MODELOPT_ALGOS: dict[str, tuple[str, float, str]] = {
    "FP8": ("modelopt", 1.0, "FP8 e4m3, one per-tensor scale: 8 bits/weight"),
    "FP8_PER_CHANNEL_PER_TOKEN": ("modelopt", 1.0, "FP8 e4m3, one scale per output channel: 8 bits/weight"),
    "FP8_PB_WO": ("modelopt", fp8_block_bytes(), "FP8 e4m3 + one fp32 scale per 128x128 block: 8.002 bits/weight"),
    "NVFP4": ("modelopt_fp4", NVFP4_BYTES, "NVFP4: 4-bit e2m1 + one FP8 scale per 16 values = 4.5 bits/weight"),
    "W4A16_NVFP4": ("modelopt_fp4", NVFP4_BYTES,
                    "NVFP4 weight-only: 4-bit e2m1 + one FP8 scale per 16 values = 4.5 bits/weight"),
    "MXFP8": ("modelopt_mxfp8", MXFP8_BYTES, "MXFP8: e4m3 + one e8m0 scale per 32 values = 8.25 bits/weight"),
}
_MODELOPT_BLOCK_ALIASES = {"FP8_BLOCK_SCALES": "FP8_PB_WO"}


def _modelopt_algo(algo: str, group_size: int | None) -> tuple[str, float, str]:
    algo = _MODELOPT_BLOCK_ALIASES.get(algo, algo)
    if algo not in _MODELOPT_ALGOS:
        raise QuantFormatError(f"ModelOpt quant_algo '{algo}' is not one vLLM 0.32/0.33 loads (it knows "
                               f"{', '.join([*_MODELOPT_ALGOS, 'MIXED_PRECISION'])}): re-export the checkpoint "
                               "with one of those")
    method, value, why = _MODELOPT_ALGOS[algo]
    if "NVFP4" in algo and group_size and group_size != 16:
        value = 0.5 + 1 / group_size
        why = f"NVFP4: 4-bit e2m1 + one FP8 scale per {group_size} values = {8 * value:.3g} bits/weight"
    return method, value, why


def _modelopt(q: dict[str, Any], source: str) -> Quantization:
    """Both ModelOpt layouts (modelopt.py ``from_config``): ``{"quantization": {quant_algo, exclude_modules,
    group_size, quantized_layers}}`` (hf_quant_config.json) or flat ``{quant_algo, ignore, group_size}``."""
    inner = q.get("quantization") if isinstance(q.get("quantization"), dict) else None
    body = inner if inner is not None else q
    algo = str(body.get("quant_algo") or "").upper()
    if not algo:
        raise QuantFormatError(f"the ModelOpt quantization in {source} has no quant_algo: is the file complete?")
    ignore_raw = body.get("exclude_modules") if inner is not None else q.get("ignore", q.get("exclude_modules"))
    ignore = tuple(str(p) for p in (ignore_raw or []))
    group_size = body.get("group_size")
    group = int(group_size) if isinstance(group_size, (int, float, str)) and str(group_size).isdigit() else None
    if algo == "MIXED_PRECISION":
        layers = body.get("quantized_layers") or {}
        if not isinstance(layers, dict) or not layers:
            raise QuantFormatError(f"ModelOpt MIXED_PRECISION in {source} lists no quantized_layers: vLLM needs them")
        per_module: list[tuple[str, float]] = []
        algos: dict[str, int] = {}
        for name, info in layers.items():
            info = info if isinstance(info, dict) else {}
            sub = str(info.get("quant_algo") or "").upper()
            _method, value, _why = _modelopt_algo(sub, info.get("group_size"))
            per_module.append((str(name), value))
            algos[sub] = algos.get(sub, 0) + 1
        mix = ", ".join(f"{n} {a}" for a, n in sorted(algos.items(), key=lambda kv: -kv[1]))
        return Quantization("modelopt_mixed", 0.0, 0, scheme=algo, ignore=ignore, layer_bytes=tuple(per_module),
                            source=source, why=f"ModelOpt MIXED_PRECISION, per module: {mix} (unlisted modules "
                            "unquantized)")
    method, value, why = _modelopt_algo(algo, group)
    return Quantization(method, 8 * value, group or 0, scheme=algo, block_fp8=algo in ("FP8_PB_WO",
                        "FP8_BLOCK_SCALES"), bytes_per_weight=value, ignore=ignore, source=source,
                        why=f"ModelOpt {why}")


_LABELS = {"awq": "AWQ", "gptq": "GPTQ", "auto-round": "AutoRound"}


def _int_group(q: dict[str, Any], method: str) -> Quantization:
    """GPTQ / AWQ / AutoRound: packed int + fp16 scale and packed zero point per group (gptq.py, awq.py)."""
    bits = int(q.get("bits") or q.get("w_bit") or 4)
    raw_group = q.get("group_size", q.get("q_group_size", 128))
    group = int(raw_group) if raw_group is not None else 128
    zero = bool(q.get("zero_point", True)) if method == "awq" else True  # GPTQ stores qzeros even when sym
    value = int_group_bytes(bits, group, zero_point=zero)
    per = f"per {group}" if group > 0 else "per output channel"
    extra = "; desc_act: + one int32 group index per input row" if q.get("desc_act") else ""
    ignore = tuple(str(p) for p in (q.get("modules_to_not_convert") or []))
    return Quantization(method, float(bits), max(group, 0), bytes_per_weight=value, ignore=ignore,
                        lm_head_quantized=bool(q.get("lm_head", False)),
                        why=f"{_LABELS.get(method, method)} {bits}-bit + fp16 scale{' and packed zero' if zero else ''} "
                        f"{per} = {8 * value:.3g} bits/weight{extra}")


def _fp8(q: dict[str, Any]) -> Quantization:
    """``fp8`` (fp8.py): per-tensor scales, or an fp32 scale per ``weight_block_size`` block."""
    block = q.get("weight_block_size")
    ignore = tuple(str(p) for p in (q.get("modules_to_not_convert") or q.get("ignored_layers") or []))
    if isinstance(block, list) and len(block) == 2:
        shape = (int(block[0]), int(block[1]))
        value = fp8_block_bytes(shape)
        return Quantization("fp8", 8.0, 0, block_fp8=True, weight_block=shape, bytes_per_weight=value, ignore=ignore,
                            why=f"FP8 e4m3 + one fp32 scale per {shape[0]}x{shape[1]} block = {8 * value:.4g} "
                            "bits/weight")
    return Quantization("fp8", 8.0, 0, bytes_per_weight=1.0, ignore=ignore,
                        why="FP8 e4m3, per-tensor scales: 8 bits/weight")


def _ct_group_bytes(weights: dict[str, Any], fmt: str) -> tuple[float, str, str]:
    """(bytes per weight, scheme, reason) of one compressed-tensors config group's ``weights``."""
    bits = float(weights.get("num_bits", 8))
    wtype = str(weights.get("type", "int"))
    strategy = str(weights.get("strategy") or "tensor")
    group = int(weights.get("group_size") or 0)
    if bits == 4 and wtype == "float":
        size = group or 16
        value = 0.5 + 1 / size
        return value, "nvfp4", f"NVFP4 ({fmt}): 4-bit e2m1 + one FP8 scale per {size} = {8 * value:.3g} bits/weight"
    if wtype == "float":
        if strategy == "block":
            shape = weights.get("block_structure") or [FP8_BLOCK, FP8_BLOCK]
            value = fp8_block_bytes((int(shape[0]), int(shape[1])))
            return value, "w8a8-fp8", (f"FP8 e4m3 + one fp32 scale per {shape[0]}x{shape[1]} block = "
                                       f"{8 * value:.4g} bits/weight")
        return bits / 8, "w8a8-fp8", f"FP8 e4m3, {strategy} scales: {bits:g} bits/weight"
    if strategy == "group" and group:
        value = int_group_bytes(bits, group, zero_point=not weights.get("symmetric", True))
        return value, "wna16", (f"int{bits:g} + bf16 scale per {group}{'' if weights.get('symmetric', True) else ' and zero'}"
                                f" = {8 * value:.3g} bits/weight")
    return bits / 8, "wna16", f"int{bits:g}, {strategy} scales: {bits:g} bits/weight"


def _compressed_tensors(q: dict[str, Any]) -> Quantization:
    """compressed-tensors (compressed_tensors.py): each ``config_groups`` entry's weights scheme applies to the modules
    its ``targets`` match, layer names and ``re:`` regexes before module classes (utils.py ``find_matched_target``);
    a module no target matches is not quantized (``UnquantizedLinearMethod``). The group covering most modules
    (first: ``Linear``) names the format."""
    groups = q.get("config_groups") or {}
    fmt = str(q.get("format") or "")
    ignore = tuple(str(p) for p in (q.get("ignore") or []))
    best: tuple[float, str, str, int, float] | None = None
    per_target: dict[str, float] = {}  # vLLM's target_scheme_map: a later group's target overwrites, keeps its place
    parts: list[str] = []
    for group_name, entry in groups.items():
        entry = entry or {}
        weights = entry.get("weights") or {}
        if not weights:
            continue
        value, scheme, why = _ct_group_bytes(weights, str(entry.get("format") or fmt))
        acts = entry.get("input_activations") or {}
        if scheme == "wna16" and acts:
            scheme = "w8a8-int8" if float(weights.get("num_bits", 8)) == 8 else "w4a8-fp8"
        targets = [str(t) for t in entry.get("targets") or []]
        per_target.update(dict.fromkeys(targets, value))
        shown = ", ".join(targets[:2]) + (f" +{len(targets) - 2}" if len(targets) > 2 else "")
        parts.append(f"{group_name} ({shown}) {8 * value:.4g} bits")
        covers = 10**9 if "Linear" in targets else len(targets)
        if best is None or covers > best[3]:
            best = (value, scheme, why, covers, float(weights.get("num_bits", 8)))
    if best is None:
        return Quantization("compressed-tensors", 8.0, 0, scheme="w8a8-int8", bytes_per_weight=1.0, ignore=ignore,
                            why="compressed-tensors without weight schemes: sized as 8 bits/weight")
    rules = tuple([("ct-name", t, v) for t, v in per_target.items()]
                  + [("ct-class", t, v) for t, v in per_target.items() if not t.startswith("re:")])
    value, scheme, why, _covers, bits = best
    more = (f"; per module, the config group vLLM matches: {'; '.join(parts)}; other modules unquantized"
            if len(parts) > 1 or "Linear" not in per_target else "")
    return Quantization("compressed-tensors", bits, 0, scheme=scheme, bytes_per_weight=value, ignore=ignore,
                        block_fp8="block" in why, module_rules=rules, unmatched_unquantized=True,
                        why=f"compressed-tensors {why}{more}")


def _mxfp4(q: dict[str, Any]) -> Quantization:
    ignore = tuple(str(p) for p in (q.get("modules_to_not_convert") or []))
    return Quantization("mxfp4", 4.25, 32, experts_only=True, bytes_per_weight=MXFP4_BYTES, ignore=ignore,
                        why="MXFP4 MoE experts: 4-bit e2m1 + one e8m0 scale per 32 = 4.25 bits/weight; other "
                        "layers unquantized")


def _quark_weight(weight: Any) -> tuple[float, str, str] | None:
    """(bytes per weight, scheme, reason) of one Quark ``weight`` spec; None: the module is not quantized."""
    if isinstance(weight, list):
        weight = weight[0] if weight else None
    if not weight:
        return None
    dtype = str(weight.get("dtype") or "").lower()
    group = int(weight.get("group_size") or 0)
    if dtype.startswith("fp8"):
        if str(weight.get("qscheme") or "") == "per_group" and group:  # OCP MXFP8: an e8m0 scale per group
            value = 1.0 + 1 / group
            return value, "mxfp8", f"Quark MXFP8: e4m3 + one e8m0 scale per {group} = {8 * value:.3g} bits/weight"
        return 1.0, "fp8", "Quark FP8 e4m3: 8 bits/weight"
    if dtype in ("fp4", "mxfp4"):
        return MXFP4_BYTES, "mxfp4", "Quark MXFP4: 4-bit e2m1 + one e8m0 scale per 32 = 4.25 bits/weight"
    if dtype in ("int4", "uint4", "int8", "uint8"):
        bits = 4 if "4" in dtype else 8
        value = int_group_bytes(bits, group, zero_point=dtype.startswith("u"))
        return value, dtype, f"Quark {dtype} (group {group or 'per channel'}) = {8 * value:.3g} bits/weight"
    raise QuantFormatError(f"Quark weight dtype '{dtype or '?'}' is not one the planner sizes (fp8_e4m3, fp4/mxfp4, "
                           "int4, uint4, int8): give the checkpoint's model.safetensors.index.json for its real size")


def _quark(q: dict[str, Any]) -> Quantization:
    """AMD Quark (quark.py ``_find_matched_config``): a ``layer_quant_config`` entry matching the layer, else
    ``global_quant_config``; a spec without ``weight`` and ``exclude`` entries stay unquantized."""
    glob = q.get("global_quant_config") or {}
    main = _quark_weight(glob.get("weight"))
    ignore = tuple(str(p) for p in (q.get("exclude") or []))
    rules: list[ModuleRule] = []
    per_layer: list[tuple[float, str, str]] = []
    for pattern, config in (q.get("layer_quant_config") or {}).items():
        spec = _quark_weight((config or {}).get("weight"))
        rules.append(("quark", str(pattern), UNQUANTIZED if spec is None else spec[0]))
        if spec is not None:
            per_layer.append(spec)
    if main is None and not per_layer:
        raise QuantFormatError("the Quark quantization_config gives no weight dtype (global_quant_config.weight or "
                               "layer_quant_config): is config.json complete?")
    value, scheme, why = main or per_layer[0]
    if rules:
        why += (f"; {len(rules)} layer_quant_config pattern(s) first"
                + ("" if main else ", other modules unquantized (global_quant_config has no weight)"))
    return Quantization("quark", 8 * value, 0, scheme=scheme, bytes_per_weight=value, ignore=ignore,
                        module_rules=tuple(rules), unmatched_unquantized=main is None, why=why)


def _auto_round_bytes(data_type: str, bits: int, group: Any) -> float:
    """Bytes per weight of an AutoRound (vLLM ``inc``) module: 16 bits and more is unquantized."""
    if bits >= 16:
        return UNQUANTIZED
    if "mx_fp" in data_type:
        return MXFP4_BYTES if bits == 4 else MXFP8_BYTES
    if data_type in ("fp", "fp8"):
        return fp8_block_bytes((int(group[0]), int(group[1]))) if isinstance(group, list) else 1.0
    return int_group_bytes(bits, int(group) if isinstance(group, (int, float)) else 128)


#: AutoRound data types and bit widths vLLM's ``inc`` config accepts (inc/inc.py SUPPORTED_DTYPES, SUPPORTED_BITS).
_INC_DTYPES = ("int", "mx_fp", "fp")
_INC_BITS = range(2, 9)


def _auto_round(q: dict[str, Any]) -> Quantization:
    """AutoRound (vLLM ``inc``, inc/config_parser.py ``_resolve_raw``): ``extra_config`` per layer (exact or dotted
    suffix, then regex keys; 16 bits = unquantized), then only the blocks in ``block_name_to_quantize`` /
    ``to_quant_block_names`` are quantized; the rest at ``bits`` / ``group_size`` / ``data_type``."""
    data_type = str(q.get("data_type") or "int").lower()
    bits = int(q.get("bits") or 4)
    if not (data_type in _INC_DTYPES or "mx_fp" in data_type) or bits not in _INC_BITS:
        raise QuantFormatError(f"AutoRound data_type '{data_type}' with {bits} bits is not one vLLM 0.32/0.33 loads "
                               f"(data types {', '.join(_INC_DTYPES)}, bits {min(_INC_BITS)}-{max(_INC_BITS)}): "
                               "export it in another format (e.g. auto_round:llm_compressor)")
    group = q.get("group_size", 128)
    base = _int_group(q, "auto-round") if data_type == "int" else None
    value = base.bytes_per_weight if base else _auto_round_bytes(data_type, bits, group)
    why = base.why if base else f"AutoRound {data_type} {bits}-bit = {8 * value:.4g} bits/weight"
    extra = q.get("extra_config") or {}
    rules: list[ModuleRule] = []
    counts: dict[str, int] = {}
    for key, cfg in extra.items():
        cfg = cfg if isinstance(cfg, dict) else {}
        layer_bits = int(cfg.get("bits", bits))
        rule_bytes = value if (layer_bits, cfg.get("group_size", group)) == (bits, group) else \
            _auto_round_bytes(data_type, layer_bits, cfg.get("group_size", group))
        rules.append(("inc-key", str(key), rule_bytes))
        label = "unquantized" if rule_bytes == UNQUANTIZED else f"{layer_bits}-bit"
        counts[label] = counts.get(label, 0) + 1
    rules += [("inc-regex", k, v) for _kind, k, v in list(rules) if _REGEX_CHARS & set(k)]
    blocks = q.get("block_name_to_quantize") or q.get("to_quant_block_names")
    blocks = [b for b in blocks.split(",") if b] if isinstance(blocks, str) else list(blocks or [])
    rules += [("prefix", str(block), value) for block in blocks]
    if counts:
        why += "; extra_config: " + ", ".join(f"{n} module(s) {label}" for label, n in counts.items())
    if blocks:
        why += f"; only modules under {', '.join(map(str, blocks[:3]))}{' ...' if len(blocks) > 3 else ''}"
    ignore = tuple(str(p) for p in (q.get("modules_to_not_convert") or []))
    bitless = tuple(str(k) for k, cfg in extra.items() if not (isinstance(cfg, dict) and "bits" in cfg))
    return Quantization("auto-round", float(bits), int(group) if isinstance(group, int) else 0,
                        bytes_per_weight=value, ignore=ignore, module_rules=tuple(rules),
                        unmatched_unquantized=bool(blocks), bitless_keys=bitless, why=why)


def parse_quantization(q: Any, where: str = "config.json") -> Quantization:
    """The checkpoint's :class:`Quantization` from its ``quantization_config`` (or hf_quant_config.json content).

    :raises QuantFormatError: an unknown method or an incomplete description (one line, what to do).
    """
    if not q:
        return Quantization("none", why="the checkpoint is not quantized")
    if not isinstance(q, dict):
        raise QuantFormatError(f"{where} 'quantization_config' must be an object")
    producer = (q.get("producer") or {}).get("name") if isinstance(q.get("producer"), dict) else None
    legacy = producer == "modelopt" and isinstance(q.get("quantization"), dict)
    source = "hf_quant_config.json (ModelOpt layout)" if legacy else f"{where} quantization_config"
    method = str(q.get("quant_method", "")).lower().replace("compressed_tensors", "compressed-tensors")
    if legacy or method.startswith("modelopt") or (producer == "modelopt" and not method):  # ModelOpt 0.31 inline
        return _modelopt(q, source)
    if method in ("awq", "gptq"):
        return _int_group(q, method)
    if method in ("auto-round", "auto_round", "intel/auto-round"):
        return _auto_round(q)
    if method == "fp8":
        return _fp8(q)
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    if method == "mxfp4":
        return _mxfp4(q)
    if method == "quark":
        return _quark(q)
    if method == "bitsandbytes":
        bits = 8.0 if q.get("load_in_8bit") else 4.0
        return Quantization("bitsandbytes", bits, why=f"bitsandbytes {bits:g}-bit")
    if method == "gguf":
        return Quantization("gguf", 4.0, why="GGUF")
    raise QuantFormatError(f"quant_method '{method or '?'}' is not a format the planner sizes (known: "
                           f"{', '.join(KNOWN_METHODS)}): use a checkpoint in one of those, or set --quantization "
                           "to the method vLLM should use")
