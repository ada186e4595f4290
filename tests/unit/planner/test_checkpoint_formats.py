"""Weights from the checkpoint's own quantization description, on real public checkpoints (issue 33, items 1 and 5).

The fixtures in tests/fixtures/planner/checkpoints are copied verbatim; SOURCES.json names each file's repository,
path and commit, and the published size (URL and verbatim line) where public evidence exists. Cases without one
test behaviour only: what the checkpoint's files say, not a number taken from the planner.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model import (
    layer_module_bytes,
    parse_model_config,
    weights_bytes_per_gpu,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import (
    load_model,
    plan_for_model,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.quant_formats import (
    lm_head_bytes,
    parse_quantization,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.weight_split import weight_split

from .planner_data import FIXTURES, facts

CHECKPOINTS = FIXTURES / "planner" / "checkpoints"
SOURCES: dict[str, Any] = json.loads((CHECKPOINTS / "SOURCES.json").read_text())
GIB = 1024**3


def spec_of(name: str):
    config, _total, _dir = load_model(str(CHECKPOINTS / name))
    return parse_model_config(config)


def total_gib(spec: Any, tp: int = 1, shards: int | None = None) -> float:
    return max(weights_bytes_per_gpu(spec, tp, 1, 2, spec.quantization, shards)) / GIB


def test_every_fixture_has_its_source() -> None:
    for name in (p.name for p in CHECKPOINTS.iterdir() if p.is_dir()):
        entry = SOURCES[name]
        on_disk = {p.name for p in (CHECKPOINTS / name).iterdir()}
        assert on_disk == set(entry["files"]), name
        for where in entry["files"].values():
            assert where["repo"] and where["path"], name
            # A GitHub file is pinned by its full commit; a Hub page sometimes shows only the 7-character one.
            full = re.fullmatch(r"[0-9a-f]{40}", where["commit"])
            assert full or (where["repo"].startswith("hf:") and re.fullmatch(r"[0-9a-f]{7,39}", where["commit"])), name
        assert entry["published"] or entry["note"], name


# --- ModelOpt, both layouts ---------------------------------------------------------------------------------------


def test_hf_quant_config_json_is_read_beside_config_json() -> None:
    """nvidia/Llama-3.1-70B-Instruct-FP8 keeps its quantization only in hf_quant_config.json (ModelOpt 0.23)."""
    spec = spec_of("llama-3.1-70b-instruct-fp8-modelopt")
    q = spec.quantization
    assert (q.method, q.scheme, q.bytes_per_weight, q.ignore) == ("modelopt", "FP8", 1.0, ("lm_head",))
    assert q.source.startswith("hf_quant_config.json")
    bf16 = parse_model_config(json.loads((CHECKPOINTS / "llama-3.1-70b-instruct-fp8-modelopt" / "config.json")
                                         .read_text()))
    assert bf16.quantization.method == "none"  # config.json alone says nothing about FP8
    # FP8 halves every linear layer; embeddings and lm_head (2 x 128256 x 8192) stay bf16.
    ratio = total_gib(spec) / total_gib(bf16)
    emb = 2 * 128256 * 8192 * 2 / GIB
    assert ratio == pytest.approx((total_gib(bf16) - emb) / 2 / total_gib(bf16) + emb / total_gib(bf16), rel=0.01)
    assert 0.5 < ratio < 0.53


def test_the_plan_says_the_quantization_came_from_hf_quant_config_json() -> None:
    result = plan_for_model(facts("h100x8_nvswitch"), CHECKPOINTS / "llama-3.1-70b-instruct-fp8-modelopt")
    reason = result["reasons"]["quantization"]
    assert "hf_quant_config.json" in reason and "8 bits/weight" in reason
    assert "estimated from config.json" in result["reasons"]["weights"]


def test_config_json_quantization_wins_over_hf_quant_config_json(tmp_path: Path) -> None:
    """vLLM reads hf_quant_config.json only when config.json has no quantization_config (transformers_utils/config.py)."""
    shutil.copytree(CHECKPOINTS / "qwen3-32b-fp8-static-modelopt", tmp_path / "m")
    quant = tmp_path / "m" / "hf_quant_config.json"
    doc = json.loads(quant.read_text())
    doc["quantization"]["quant_algo"] = "NVFP4"  # would be 4.5 bits if it were read
    quant.write_text(json.dumps(doc))
    config, _total, _dir = load_model(str(tmp_path / "m"))
    q = parse_model_config(config).quantization
    assert (q.method, q.scheme, q.bytes_per_weight) == ("modelopt", "FP8", 1.0)
    assert q.source == "config.json quantization_config"


def test_modelopt_031_inline_layout_without_quant_method() -> None:
    """Qwen3-32B-FP8-Static: config.json has producer modelopt and quant_algo FP8 but no quant_method."""
    config = json.loads((CHECKPOINTS / "qwen3-32b-fp8-static-modelopt" / "config.json").read_text())
    assert "quant_method" not in config["quantization_config"]
    q = parse_model_config(config).quantization
    assert (q.method, q.scheme, q.ignore) == ("modelopt", "FP8", ("lm_head",))


def test_nvfp4_is_four_and_a_half_bits_and_the_routers_stay_bf16() -> None:
    """nvidia/Qwen3-235B-A22B-NVFP4: quant_algo NVFP4, group_size 16, every layer's mlp.gate in exclude_modules."""
    spec = spec_of("qwen3-235b-a22b-nvfp4-modelopt")
    q = spec.quantization
    assert (q.method, q.group_size, q.bytes_per_weight) == ("modelopt_fp4", 16, 0.5 + 1 / 16)
    assert "4.5 bits/weight" in q.why
    assert sum(1 for p in q.ignore if p.endswith("mlp.gate")) == spec.num_layers
    attn, _dense, experts, _shared = layer_module_bytes(spec, q, 7, "full", 2.0)
    assert (attn, experts) == (0.5625, 0.5625)
    # Against the same model in block FP8 (Qwen/Qwen3-235B-A22B-FP8): the linear layers are 0.5625 / 1.0002 as big.
    fp8 = spec_of("qwen3-235b-a22b-fp8")
    assert 0.55 < total_gib(spec) / total_gib(fp8) < 0.58


def test_mixed_precision_per_module() -> None:
    """nvidia/Qwen3.6-27B-NVFP4: FP8 attention and linear attention, W4A16_NVFP4 MLP, per module."""
    spec = spec_of("qwen3.6-27b-nvfp4-mixed")
    q = spec.quantization
    assert q.method == "modelopt_mixed" and q.scheme == "MIXED_PRECISION"
    kinds = spec.layer_kinds
    full, linear = kinds.index("full"), kinds.index("mamba")
    assert layer_module_bytes(spec, q, full, "full", 2.0)[:2] == (1.0, 0.5625)
    assert layer_module_bytes(spec, q, linear, "mamba", 2.0)[:2] == (1.0, 0.5625)


def test_legacy_mixed_precision_file_needs_vllm_033(tmp_path: Path) -> None:
    """0.32 raises 'Unknown ModelOpt quant algo' on a MIXED_PRECISION hf_quant_config.json; 0.33 maps it."""
    (tmp_path / "m").mkdir()
    config = json.loads((CHECKPOINTS / "qwen3.6-27b-nvfp4-mixed" / "config.json").read_text())
    config.pop("quantization_config", None)
    config.get("text_config", {}).pop("quantization_config", None)
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    shutil.copy(CHECKPOINTS / "qwen3.6-27b-nvfp4-mixed" / "hf_quant_config.json", tmp_path / "m")
    with pytest.raises(PlanError, match=r"cannot read MIXED_PRECISION from hf_quant_config\.json"):
        plan_for_model(facts("h200x2"), tmp_path / "m", vllm_version="0.32.0")
    result = plan_for_model(facts("h200x2"), tmp_path / "m", vllm_version="0.33.0")
    assert "hf_quant_config.json" in result["reasons"]["quantization"]


def test_unknown_algorithms_and_formats_are_refused_with_what_vllm_knows() -> None:
    with pytest.raises(ValueError, match=r"W4A8_AWQ.*re-export"):
        parse_quantization({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "W4A8_AWQ"}})
    config = json.loads((CHECKPOINTS / "llama-3.1-70b-instruct-fp8-modelopt" / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "hqq"}
    with pytest.raises(PlanError, match=r"quant_method 'hqq' is not a format the planner sizes \(known: awq, gptq"):
        plan(facts("h200x2"), config)


# --- Published sizes ----------------------------------------------------------------------------------------------


def test_block_fp8_qwen3_235b_per_gpu_matches_the_published_load() -> None:
    """27.72 GiB of weights per GPU at TP8 + EP (vLLM's log; SOURCES.json: a sibling release, see 'inferred')."""
    published = SOURCES["qwen3-235b-a22b-fp8"]["published"]
    spec = spec_of("qwen3-235b-a22b-fp8")
    assert spec.quantization.block_fp8 and spec.quantization.method == "fp8"
    planned = total_gib(spec, tp=published["tp"], shards=published["tp"])
    assert planned == pytest.approx(published["value_gib"], rel=0.03)


def test_mxfp4_quantizes_only_the_experts() -> None:
    spec = spec_of("gpt-oss-20b")
    attn, _dense, experts, _shared = layer_module_bytes(spec, spec.quantization, 0, "sliding", 2.0)
    assert (attn, experts) == (2.0, 0.5 + 1 / 32)


@pytest.mark.xfail(strict=True, reason="vLLM pads MXFP4 experts for its MoE kernel (Marlin on A100: "
                   "fused_moe/oracle/mxfp4.py:844-849); the planner sizes the checkpoint's tensors, not the padding")
def test_mxfp4_gpt_oss_20b_matches_the_published_load() -> None:
    published = SOURCES["gpt-oss-20b"]["published"]
    assert total_gib(spec_of("gpt-oss-20b")) == pytest.approx(published["value_gib"], rel=0.03)


# --- Reconciling with the safetensors index -----------------------------------------------------------------------


def test_total_size_is_used_and_a_large_difference_is_a_warning() -> None:
    config, _total, _dir = load_model(str(CHECKPOINTS / "llama-3.1-70b-instruct-fp8-modelopt"))
    spec = parse_model_config(config)
    estimate = sum(weights_bytes_per_gpu(spec, 1, 1, 2, spec.quantization))
    close = plan(facts("h100x8_nvswitch"), config, weights_total_bytes=int(estimate * 1.01))
    assert "total_size (used)" in close["reasons"]["weights"] and "-1.0%" in close["reasons"]["weights"]
    assert not any("total_size" in w for w in close["warnings"])
    bf16_sized = plan(facts("h100x8_nvswitch"), config, weights_total_bytes=int(estimate * 1.9))
    assert any("differ by -47.4%" in w and "uses total_size" in w for w in bf16_sized["warnings"])


def test_nemotron_h_exclusions_match_its_backbone_module_names() -> None:
    """nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4 excludes backbone.layers.N.mixer.* (vLLM's names for Nemotron-H,
    models/nemotron_h.py): attention layer 5 and mamba layer 4 stay bf16, mamba layer 0 and the MoE blocks are NVFP4."""
    spec = spec_of("nemotron-3-nano-30b-a3b-nvfp4")
    q = spec.quantization
    assert (q.method, q.source) == ("modelopt_fp4", "hf_quant_config.json (ModelOpt layout)")
    assert spec.layer_kinds[4:7] == ("mamba", "full", "mlp")
    assert layer_module_bytes(spec, q, 5, "full", 2.0)[0] == 2.0
    assert layer_module_bytes(spec, q, 4, "mamba", 2.0)[0] == 2.0
    assert layer_module_bytes(spec, q, 0, "mamba", 2.0)[0] == 0.5625
    assert layer_module_bytes(spec, q, 6, "mlp", 2.0)[2] == 0.5625


def test_gemma4_moe_experts_are_nvfp4_and_its_dense_mlp_stays_bf16() -> None:
    """nvidia/Gemma-4-26B-A4B-NVFP4: vLLM builds a dense ``mlp`` beside ``router`` and ``experts`` in every layer
    (models/gemma4.py:609-614, :630-653). ModelOpt excludes ``layers.N.mlp*`` (and router, self_attn): the dense MLP
    stays BF16, the 128 experts of each layer are NVFP4. Before, the experts were matched as ``mlp.experts`` by that
    exclusion and sized in BF16, the dense MLP not at all."""
    spec = spec_of("gemma-4-26b-a4b-nvfp4")
    assert (spec.num_experts, spec.experts_per_token, spec.moe_intermediate_size) == (128, 8, 704)
    assert spec.shared_expert_intermediate_size == 2112  # the dense MLP, always active
    mixer, _dense, experts, shared = layer_module_bytes(spec, spec.quantization, 5, spec.layer_kinds[5], 2.0)
    assert (mixer, experts, shared) == (2.0, 0.5625, 2.0)
    per_gpu = max(weights_bytes_per_gpu(spec, 1, 1, 2, spec.quantization, 1))
    routed = 30 * 128 * 3 * 2816 * 704 * 0.5625
    assert routed < per_gpu < routed + 7e9  # experts in NVFP4; the rest (attention, embedding, vision) BF16


# --- Per-module schemes: compressed-tensors targets, Quark layer configs, AutoRound extra_config ------------------

QWEN35_W4A16 = "redhatai-qwen3.5-9b-quantized.w4a16"
INT4_G128 = 0.5 + 2 / 128  # int4 + one BF16 scale per 128 (symmetric: no zero point)


def _qwen35_with(quantization_config: dict[str, Any]):
    """RedHatAI/Qwen3.5-9B-quantized.w4a16's real config.json with its quantization_config swapped: a probe of how
    vLLM matches one format's per-module entries (the bytes each module gets), not a published size."""
    config = json.loads((CHECKPOINTS / QWEN35_W4A16 / "config.json").read_text())
    config["quantization_config"] = quantization_config
    return parse_model_config(config)


def _rates(spec: Any) -> dict[str, tuple[float, float]]:
    """(mixer, MLP) bytes per parameter of a full-attention layer, a gated-delta layer and the MTP layer."""
    full, linear = spec.layer_kinds.index("full"), spec.layer_kinds.index("mamba")
    q = spec.quantization
    return {name: layer_module_bytes(spec, q, layer, kind, 2.0)[:2]
            for name, layer, kind in (("full", full, "full"), ("linear", linear, "mamba"),
                                      ("mtp", spec.num_layers, "full"))}


def test_compressed_tensors_qwen35_ignore_list_and_its_mtp_layer() -> None:
    """The real release: one ``Linear`` group (int4, group 128); its ignore list keeps every linear_attn projection
    and ``re:^mtp.*`` in BF16, which needs the MTP layer under vLLM's own name ``mtp.layers.0``
    (models/qwen3_5_mtp.py:122, :234), not ``model.layers.32``."""
    spec = spec_of(QWEN35_W4A16)
    assert spec.quantization.module_rules == (("ct-name", "Linear", INT4_G128), ("ct-class", "Linear", INT4_G128))
    assert _rates(spec) == {"full": (INT4_G128, INT4_G128), "linear": (2.0, INT4_G128), "mtp": (2.0, 2.0)}


def test_qwen35_full_attention_counts_its_output_gate() -> None:
    """Qwen3NextAttention's qkv_proj holds 2 x heads x head_dim query rows when ``attn_output_gate`` (vLLM 0.32
    models/qwen3_next.py:315-320): 4096 x (2 x 16 x 256) for q, 4096 x 4 x 256 each for k and v, 16 x 256 x 4096 o."""
    spec = spec_of(QWEN35_W4A16)
    assert spec.attn_output_gate
    assert spec.attention_params_per_layer(1, "full") == (4096 * 8192 + 4096 * 4096 + 2 * 4096 * 1024, 0.0)
    config = json.loads((CHECKPOINTS / QWEN35_W4A16 / "config.json").read_text())
    config["text_config"]["attn_output_gate"] = False
    assert parse_model_config(config).attention_params_per_layer(1, "full")[0] == 4096 * 4096 * 2 + 2 * 4096 * 1024


def test_compressed_tensors_modules_take_the_group_their_target_names() -> None:
    """compressed-tensors (utils.py find_matched_target): a name or ``re:`` target first, then a class target; a module
    no group targets is not quantized (compressed_tensors.py:172, UnquantizedLinearMethod)."""
    real = spec_of(QWEN35_W4A16).quantization
    config = json.loads((CHECKPOINTS / QWEN35_W4A16 / "config.json").read_text())["quantization_config"]
    int4 = config["config_groups"]["group_0"]
    fp8 = {"targets": ["re:.*self_attn.*"], "format": "float-quantized",
           "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True}}
    both = {**config, "config_groups": {"group_0": {**int4, "targets": ["Linear"]}, "group_1": fp8}}
    spec = _qwen35_with(both)
    assert _rates(spec)["full"] == (1.0, INT4_G128)  # the regex names self_attn before the Linear class
    assert spec.quantization.bytes_per_weight == real.bytes_per_weight  # the Linear group names the format
    assert "group_1 (re:.*self_attn.*) 8 bits" in spec.quantization.why
    mlp_only = {**config, "config_groups": {"group_0": {**int4, "targets": ["re:.*mlp.*"]}}}
    mlp_spec = _qwen35_with(mlp_only)
    assert _rates(mlp_spec)["full"] == (2.0, INT4_G128)
    assert mlp_spec.quantization.why.endswith("other modules unquantized")


def test_quark_layer_quant_config_wins_over_the_global_one() -> None:
    """Quark (quark.py:755-760, :779): the first ``layer_quant_config`` key matching the layer (fnmatch with ``*``),
    else ``global_quant_config``; with no global weight the other modules stay unquantized."""
    fp8 = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False}
    mxfp4 = {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "is_dynamic": False}
    quark = {"quant_method": "quark", "export": {"kv_cache_group": [], "pack_method": "reorder"},
             "global_quant_config": {"weight": fp8}, "layer_quant_config": {"*mlp*": {"weight": mxfp4}},
             "exclude": ["lm_head", "re:^mtp.*", "*linear_attn*"]}
    rates = _rates(_qwen35_with(quark))
    assert rates["full"] == (1.0, 0.5 + 1 / 32) and rates["linear"][0] == 2.0
    no_global = {**quark, "global_quant_config": {"weight": None}}
    spec = _qwen35_with(no_global)
    assert _rates(spec)["full"] == (2.0, 0.5 + 1 / 32)
    assert "other modules unquantized" in spec.quantization.why


def test_auto_round_extra_config_and_quantized_blocks() -> None:
    """AutoRound (vLLM ``inc``, inc/config_parser.py:160-200): an ``extra_config`` entry (exact, dotted suffix, regex;
    16 bits = unquantized) before ``block_name_to_quantize``, outside which nothing is quantized; data types vLLM's
    inc does not load are refused (inc.py:37-39)."""
    base = {"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True, "data_type": "int",
            "packing_format": "auto_round:auto_gptq"}
    int4 = 0.5 + (2 + 0.5) / 128  # GPTQ packing: fp16 scale and a packed zero point per 128
    assert _rates(_qwen35_with(base))["full"] == (int4, int4)
    extra = {**base, "extra_config": {".*self_attn.*": {"bits": 16, "data_type": "float"}, "mtp.fc": {"bits": 16}},
             "block_name_to_quantize": ["model.language_model.layers"]}
    spec = _qwen35_with(extra)
    assert _rates(spec) == {"full": (2.0, int4), "linear": (int4, int4), "mtp": (2.0, 2.0)}
    assert "2 module(s) unquantized" in spec.quantization.why
    with pytest.raises(ValueError, match=r"data_type 'nv_fp'.*not one vLLM 0.32/0.33 loads"):
        _qwen35_with({**base, "data_type": "nv_fp"})


# --- The output projection (lm_head): quantized only where the format's vLLM code builds it quantized -------------


def test_mixed_precision_quantizes_the_lm_head_its_quantized_layers_name() -> None:
    """nvidia/Qwen3.6-35B-A3B-NVFP4 lists ``lm_head`` as W4A16_NVFP4 in ``quantized_layers``; vLLM's mixed-precision
    config looks the head up under that name (0.32 modelopt.py:1799-1800) and builds it with the NVFP4 linear method
    (:1847). Sized in BF16 the repository came out +2.7 % over its published 23.5 GB; as NVFP4 the head is 0.29 GB,
    not 1.02 (test_checkpoint_sizes.py checks the repository)."""
    spec = spec_of("qwen3.6-35b-a3b-nvfp4")
    _emb, head = spec.embedding_params()
    assert head == 248320 * 2048 and lm_head_bytes(spec.quantization, 2.0) == 0.5625
    split = weight_split(spec, 1, 1, 2, spec.quantization, 1, False)
    part = {p.name: p for p in split.parts}["lm_head"]
    assert part.bytes == int(head * 0.5625) and "modelopt_mixed description, 4.5 bits/weight" in part.reason
    assert split.total == max(weights_bytes_per_gpu(spec, 1, 1, 2, spec.quantization, 1))


@pytest.mark.parametrize(("quantization_config", "expected"), [
    # ModelOpt builds ParallelLMHead with its scheme unless exclude_modules keeps it (0.32 modelopt.py:250)
    ({"quant_method": "modelopt", "quant_algo": "FP8", "exclude_modules": []}, 1.0),
    ({"quant_method": "modelopt", "quant_algo": "FP8", "exclude_modules": ["lm_head"]}, 2.0),
    # AWQ / GPTQ only with "lm_head": true (auto_awq.py:245, auto_gptq.py:198)
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, 2.0),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "lm_head": True},
     0.5 + (2 + 0.5) / 128),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "lm_head": True}, 0.5 + (2 + 0.5) / 128),
    # FP8 builds linear layers only (fp8.py:180)
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, 2.0),
    # AutoRound: the head is not quantized unless extra_config names it (inc/config_parser.py:171)
    ({"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True, "data_type": "int"}, 2.0),
    ({"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True, "data_type": "int",
      "extra_config": {"lm_head": {"bits": 8, "group_size": 128}}}, 1 + (2 + 1) / 128),
    # an entry without "bits" leaves the head at 16 (get_config with quantized False), a decoder layer at the default
    ({"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True, "data_type": "int",
      "extra_config": {"lm_head": {"group_size": 64}}}, 2.0),
])  # fmt: skip
def test_each_format_quantizes_the_lm_head_as_vllm_builds_it(
    quantization_config: dict[str, Any], expected: float
) -> None:
    """Rule probes on the Qwen3.5-9B release's real config.json (its quantization_config swapped), not sizes."""
    assert lm_head_bytes(_qwen35_with(quantization_config).quantization, 2.0) == pytest.approx(expected)


def test_compressed_tensors_quantizes_the_lm_head_only_when_a_target_names_it() -> None:
    """compressed_tensors.py:186: the head takes a scheme only when a target matches its name; the ``Linear`` class
    target does not reach it (ParallelLMHead is no LinearBase), and ``ignore`` wins."""
    config = json.loads((CHECKPOINTS / QWEN35_W4A16 / "config.json").read_text())["quantization_config"]
    group = config["config_groups"]["group_0"]
    assert lm_head_bytes(spec_of(QWEN35_W4A16).quantization, 2.0) == 2.0  # the release: Linear, lm_head ignored
    named = {**config, "ignore": [], "config_groups": {"group_0": {**group, "targets": ["Linear", "lm_head"]}}}
    assert lm_head_bytes(_qwen35_with(named).quantization, 2.0) == INT4_G128
    linear_only = {**config, "ignore": [], "config_groups": {"group_0": {**group, "targets": ["Linear"]}}}
    assert lm_head_bytes(_qwen35_with(linear_only).quantization, 2.0) == 2.0
