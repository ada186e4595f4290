"""Layer kinds from every config convention vLLM reads, on real published configs (issue 26, item 1).

The configs in tests/fixtures/planner/architectures are copied verbatim (SOURCES.json: repository, path, commit).
Where a release states its layer mix or parameter count, the test compares with it (URL and line in SOURCES.json).
A convention whose release ships its derived list too (Qwen3.5's ``layer_types`` beside ``full_attention_interval``)
is checked by removing the list and deriving it back as transformers does.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.layer_kinds import layer_kinds
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model import (
    ModelConfigError,
    parse_model_config,
    weights_bytes_per_gpu,
)

from .planner_data import FIXTURES, facts

ARCH = FIXTURES / "planner" / "architectures"
SOURCES: dict[str, Any] = json.loads((ARCH / "SOURCES.json").read_text())


def config(name: str) -> dict[str, Any]:
    return json.loads((ARCH / name / "config.json").read_text())


def test_every_fixture_names_its_source() -> None:
    for name in (p.name for p in ARCH.iterdir() if p.is_dir()):
        files = SOURCES[name]["files"]
        assert {p.name for p in (ARCH / name).iterdir()} == set(files), name
        assert all(len(f["commit"]) == 40 and f["repo"] and f["path"] for f in files.values()), name


def test_nemotron_h_pattern_gives_mamba2_attention_and_moe_blocks() -> None:
    """Nemotron-3-Nano: 52 layers = 23 Mamba-2 + 23 MoE + 6 attention (the release's own count)."""
    spec = parse_model_config(config("nemotron-3-nano-30b-a3b-bf16"))
    assert spec.layer_convention == "hybrid_override_pattern"
    assert Counter(spec.layer_kinds) == {"mamba": 23, "mlp": 23, "full": 6}
    assert spec.attention_layers == 6 and spec.state is not None and spec.state.kind == "mamba2"
    # mamba_ssm_cache_dtype float32 in the config (models/config.py:717-732): conv bf16, SSM state fp32.
    assert (spec.state.conv_bytes, spec.state.ssm_bytes) == (2, 4)


def test_nemotron_3_nano_weighs_its_published_parameter_count() -> None:
    """31.6 B published; sized as ~100 B before single-block layers were read (issue 26)."""
    published = SOURCES["nemotron-3-nano-30b-a3b-bf16"]["published"]
    spec = parse_model_config(config("nemotron-3-nano-30b-a3b-bf16"))
    params = sum(weights_bytes_per_gpu(spec, 1, 1, 2, spec.quantization)) / 2
    assert params == pytest.approx(published["params_total"], rel=0.01), f"{params / published['params_total'] - 1:+.2%}"


def test_nemotron_h_dense_pattern_and_the_plan_counts_only_attention_kv() -> None:
    """Nemotron-H-56B: '-' MLP blocks and 10 attention layers; the KV per token counts those 10 layers only."""
    spec = parse_model_config(config("nemotron-h-56b-base-8k"))
    assert Counter(spec.layer_kinds) == {"mamba": 54, "mlp": 54, "full": 10}
    result = plan(facts("h100x8_nvswitch"), config("nemotron-h-56b-base-8k"), vllm_version="0.32.0")
    groups = result["reasons"]["kv-cache-groups"]
    assert "mamba 6 groups" in groups and "full 1 group" in groups and "align" in groups


def test_full_attention_interval_derives_the_released_layer_types() -> None:
    """Qwen3.5-27B ships both: without layer_types, full_attention_interval 4 must give the same 16 + 48 layers."""
    cfg = config("qwen3.5-27b")
    text = cfg["text_config"]
    shipped = parse_model_config(cfg).layer_kinds
    derived = dict(text)
    derived.pop("layer_types")
    kinds, field = layer_kinds(derived, text["num_hidden_layers"])
    assert field == "full_attention_interval" and kinds == shipped
    assert Counter(shipped) == {"mamba": 48, "full": 16}


def test_llama4_rope_layers_are_chunked_and_every_fourth_is_global() -> None:
    spec = parse_model_config(config("llama-4-scout-17b-16e-instruct"))
    assert spec.layer_convention == "no_rope_layers" and spec.attention_chunk_size == 8192
    assert Counter(spec.layer_kinds) == {"chunked": 36, "full": 12}
    assert all(k == "full" for k in spec.layer_kinds[3::4])


def test_gemma4_sliding_layers_from_layer_types() -> None:
    spec = parse_model_config(config("gemma-4-26b-a4b"))
    assert Counter(spec.layer_kinds) == {"sliding": 25, "full": 5} and spec.sliding_window == 1024


def test_gated_delta_state_is_read_from_the_linear_attention_fields() -> None:
    """Qwen3.6-35B-A3B: conv (2 x 16 x 128 + 32 x 128) x 3 in bf16 + 32 x 128 x 128 in fp32 (mamba_ssm_dtype)."""
    spec = parse_model_config(config("qwen3.6-35b-a3b-nvfp4"))
    assert spec.state is not None and spec.state.kind == "gated_delta"
    assert spec.state_page_bytes(1) == 8192 * 3 * 2 + 32 * 128 * 128 * 4
    assert spec.state_page_bytes(2) == 4096 * 3 * 2 + 16 * 128 * 128 * 4


@pytest.mark.parametrize(("field", "value", "match"), [
    ("hybrid_override_pattern", "X", r"'hybrid_override_pattern' has \['X'\]"),  # the last layer made 'X'

    ("hybrid_override_pattern", "ME", r"has 2 entries but num_hidden_layers is 52"),
    ("layer_types", ["linear_attention"] * 3, r"'layer_types' must list one kind per layer \(52\), not 3"),
    ("layer_types", ["cross_attention"] * 52, r"'layer_types'\[0\] = 'cross_attention' is not a layer kind"),
    ("attn_layer_indices", [0, 4], r"'attn_layer_indices' describes a hybrid layer layout the planner does not read"),
])
def test_unknown_hybrid_conventions_are_refused_naming_the_field(field: str, value: Any, match: str) -> None:
    cfg = config("nemotron-3-nano-30b-a3b-bf16")
    if field != "hybrid_override_pattern":
        cfg.pop("hybrid_override_pattern")
    cfg[field] = cfg["hybrid_override_pattern"][:-1] + "X" if value == "X" else value
    with pytest.raises(ModelConfigError, match=match):
        parse_model_config(cfg)
    with pytest.raises(PlanError, match=field):
        plan(facts("h200x2"), cfg)


@pytest.mark.parametrize(("model_type", "match"), [
    ("falcon_h1", r"'falcon_h1' is not planned: Falcon-H1 runs attention and a Mamba2 mixer in parallel"),
    ("zamba2", r"'zamba2' is not planned: Zamba2's 'hybrid' layers run a shared attention block"),
])
def test_parallel_hybrids_are_refused_not_planned_as_attention(model_type: str, match: str) -> None:
    """Falcon-H1 and Zamba2 put an attention KV page and a Mamba2 state page in the same decoder layer (vLLM
    models/falcon_h1.py, models/zamba2.py). Falcon-H1 declares no per-layer field, so it was planned as plain attention
    with no state at all; both are refused with the reason (a Nemotron-H config relabelled: the refusal keys on
    model_type, before any per-layer field is read)."""
    cfg = config("nemotron-3-nano-30b-a3b-bf16")
    cfg["model_type"] = model_type
    with pytest.raises(ModelConfigError, match=match):
        parse_model_config(cfg)
    with pytest.raises(PlanError, match=model_type):
        plan(facts("h200x2"), cfg)


def test_a_pure_mamba_model_is_one_group_of_unpadded_state_pages() -> None:
    """model_type mamba2 without a per-layer field: every layer a state layer (vLLM MambaModelConfig, 0.33
    models/config.py:750-787), one group holding 2 + 1 blocks per request in align mode (kv_cache_interface.py:1135-1141)
    and no attention page to pad to (a Nemotron-H config relabelled: no public pure-Mamba log prints both lines)."""
    cfg = config("nemotron-3-nano-30b-a3b-bf16")
    cfg.pop("hybrid_override_pattern")
    cfg["model_type"] = "mamba2"
    groups = plan(facts("h200x2"), cfg, vllm_version="0.33.0")["reasons"]["kv-cache-groups"]
    assert groups.startswith("mamba 1 group x 3 blocks per request; all layers per group")
    assert "padded to the attention page" not in groups
    hybrid = plan(facts("h200x2"), config("nemotron-3-nano-30b-a3b-bf16"), vllm_version="0.33.0")
    assert "padded to the attention page" in hybrid["reasons"]["kv-cache-groups"]


def test_the_cli_plans_nemotron_3_nano_on_one_h100(capsys) -> None:
    """The path a user runs: `vllm-fleet plan --model DIR --gpu ...` (issue 26: it was sized as ~100 B and refused)."""
    from vllm_fleet.cli import main

    published = SOURCES["nemotron-3-nano-30b-a3b-bf16"]["published"]["params_total"]
    assert main(["plan", "--model", str(ARCH / "nemotron-3-nano-30b-a3b-bf16"), "--gpu", "NVIDIA H100 80GB HBM3",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["engine_args"]["tensor-parallel-size"] == 1
    weights_gib = float(result["reasons"]["weights"].split(" GiB")[0])
    assert weights_gib == pytest.approx(published * 2 / 1024**3, rel=0.01)
    assert result["reasons"]["kv-cache-groups"].startswith("mamba 4 groups x 3 blocks, full 1 group x ")
    assert result["prediction"]["block_size"] % 16 == 0 and result["prediction"]["block_size"] > 1000


@pytest.mark.parametrize(("engine_args", "conv", "ssm"), [
    ({}, 2, 4),  # the config's mamba_ssm_cache_dtype float32; conv state in the model dtype
    ({"mamba_ssm_cache_dtype": "bfloat16"}, 2, 2),  # the user's value wins (models/config.py:724-732)
    ({"mamba_cache_dtype": "float32"}, 4, 4),
])
def test_the_users_mamba_cache_dtypes_win_and_resize_the_state(engine_args, conv, ssm) -> None:
    result = plan(facts("h100x8_nvswitch"), config("nemotron-3-nano-30b-a3b-bf16"),
                  engine_args=dict(engine_args, tensor_parallel_size=1))
    page = 6144 * 3 * conv + 64 * 8192 * ssm
    assert f"conv 6144x3 x {conv} B + 64x8192 x {ssm} B = {page:,} B per layer" in result["reasons"]["kv-cache-groups"]
    assert result["prediction"]["block_size"] == 16 * -(-page // (16 * 2 * 2 * 128 * 2))


def test_gemma4_full_layers_take_the_global_kv_shape() -> None:
    """Gemma-4's full_attention layers use global_head_dim and, with attention_k_eq_v, num_global_key_value_heads
    (transformers' per_layer_config, vLLM models/gemma4.py:578-580); other families keep one attention shape."""
    for name, full in (("gemma-4-26b-a4b", (2, 512)), ("gemma-4-26b-a4b-nvfp4", (2, 512))):
        spec = parse_model_config(config(name))
        assert spec.full_kv == full and Counter(spec.layer_kinds) == {"sliding": 25, "full": 5}
        assert spec.kind_kv_bytes_per_token("full", 2, 2) == 2 * 1 * 512 * 2  # 2 KV heads over TP 2: one each
    for name in ("qwen3.5-27b", "llama-4-scout-17b-16e-instruct", "qwen3-vl-8b-instruct"):
        spec = parse_model_config(config(name))
        assert spec.full_kv is None
        assert spec.kind_kv_bytes_per_token("full", 1, 2) == spec.kv_bytes_per_token_layer(1, 2)
