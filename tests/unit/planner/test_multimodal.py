"""The multimodal encoder profile and the activation terms (issue 26, items 4 and 5).

Every config is a real published config.json already in the fixtures (their SOURCES name the repository and commit).
The expected encoder budgets and item counts are the ones vLLM logged ("Encoder cache will be initialized with a
budget of N tokens, and profiled with K <modality> items of the maximum feature size"):

- llava-hf/llava-v1.6-mistral-7b-hf, vLLM 0.10.2, offline LLM (max_num_batched_tokens 16384): "encoder cache budget
  16384 tokens, profiled with 5 max-size images" (tests/fixtures/calibration/vllm_startup_observations.jsonl,
  case h100-llava-v16-mistral-7b-v0102-len4096, its source in the case).
- Qwen3.5/3.6-family vision checkpoints (patch 16, merge 2; hybrid attention blocks of 1568/1600 tokens in the same
  logs) served with max_num_batched_tokens 8192 ("compile range (1, 8192)"): "budget of 16384 tokens, and profiled
  with 1 image items" in https://github.com/noonghunna/club-3090/issues/751 and
  https://github.com/noonghunna/club-3090/issues/1047 (the threads name the checkpoints; the configs here are the
  family's published Qwen3.5-27B and Qwen3.6-35B-A3B ones).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.memory import (
    activation_bytes,
    activation_terms,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model import parse_model_config
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.multimodal import multimodal_profile

from .planner_data import FIXTURES, facts

CALIBRATION = json.loads((FIXTURES / "calibration" / "model_configs.json").read_text())
ARCH = FIXTURES / "planner" / "architectures"


def arch(name: str) -> dict[str, Any]:
    return json.loads((ARCH / name / "config.json").read_text())


def test_llava_next_profiles_five_max_size_images_in_a_16384_token_budget() -> None:
    spec = parse_model_config(CALIBRATION["llava-hf/llava-v1.6-mistral-7b-hf"])
    mm = multimodal_profile(spec.vision, {}, spec.hidden_size, 16384, 256, 4096, 2)
    assert mm is not None
    assert (mm.encoder_budget, mm.items_per_batch) == (16384, 5)  # the log's figures
    assert mm.tokens_per_item == 2928  # anyres 672x672: 576 + 48 x 48 + 48 newlines (16384 // 2928 = 5)


@pytest.mark.parametrize("name", ["qwen3.6-35b-a3b-nvfp4", "qwen3.5-27b"])
def test_qwen3_vision_profiles_one_16384_token_image(name: str) -> None:
    spec = parse_model_config(arch(name))
    mm = multimodal_profile(spec.vision, {}, spec.hidden_size, 8192, 256, 32768, 2)
    assert mm is not None
    assert (mm.encoder_budget, mm.items_per_batch, mm.tokens_per_item) == (16384, 1, 16384)
    assert mm.patches_per_item == 4 * 16384  # the 2x2 patch merger
    # The tower's own forward over 65536 patches dwarfs the cached outputs.
    assert mm.encoder_peak > 5 * mm.encoder_cache


def test_max_pixels_in_mm_processor_kwargs_shrinks_the_profiled_image() -> None:
    spec = parse_model_config(arch("qwen3.6-35b-a3b-nvfp4"))
    default = multimodal_profile(spec.vision, {}, spec.hidden_size, 8192, 256, 32768, 2)
    small = multimodal_profile(spec.vision, {"mm-processor-kwargs": {"max_pixels": 1048576}}, spec.hidden_size,
                               8192, 256, 32768, 2)
    assert default is not None and small is not None
    assert small.tokens_per_item == 1048576 // (32 * 32)
    assert small.items_per_batch == 8192 // 1024
    assert small.encoder_peak < default.encoder_peak


def test_text_only_setting_removes_the_encoder_profile_as_vllm_does() -> None:
    spec = parse_model_config(arch("qwen3.6-35b-a3b-nvfp4"))
    text_only = {"limit-mm-per-prompt": {"image": 0, "video": 0}}
    mm = multimodal_profile(spec.vision, text_only, spec.hidden_size, 8192, 256, 32768, 2)
    assert mm is not None and not mm.enabled
    lm_only = multimodal_profile(spec.vision, {"language-model-only": True}, spec.hidden_size, 8192, 256, 32768, 2)
    assert lm_only is not None and not lm_only.enabled
    llava = parse_model_config(CALIBRATION["llava-hf/llava-v1.6-mistral-7b-hf"])  # image only: image 0 is text-only
    off = multimodal_profile(llava.vision, {"limit-mm-per-prompt": {"image": 0}}, llava.hidden_size, 8192, 256, 4096, 2)
    assert off is not None and not off.enabled
    terms = activation_terms(spec, 1, 8192, 256, 2, mm=mm)
    assert terms.encoder_peak == terms.encoder_cache == 0
    with_images = activation_bytes(spec, 1, 8192, 256, 2, mm=multimodal_profile(
        spec.vision, {}, spec.hidden_size, 8192, 256, 32768, 2))
    assert with_images > terms.total


def test_the_plan_says_which_and_text_only_frees_kv_cache() -> None:
    gpu = facts("h100x8_nvswitch")
    base = {"tensor_parallel_size": 1, "max_model_len": 32768}
    default = plan(gpu, arch("qwen3.6-35b-a3b-nvfp4"), engine_args=base)
    text = plan(gpu, arch("qwen3.6-35b-a3b-nvfp4"),
                engine_args=dict(base, limit_mm_per_prompt={"image": 0, "video": 0}))
    assert default["reasons"]["multimodal-profile"].startswith("encoder profile: 1 image x 16384 tokens")
    assert "skips the encoder profile" in text["reasons"]["multimodal-profile"]
    assert text["memory_gib"]["activation"] < default["memory_gib"]["activation"]
    assert text["prediction"]["kv_cache_gib"] > default["prediction"]["kv_cache_gib"]
    assert default["reasons"]["activation"].startswith("activation peak ")


def test_activation_terms_add_up_and_each_term_moves_with_its_input() -> None:
    dense = parse_model_config(CALIBRATION["Qwen/Qwen2-7B-Instruct"])
    moe = parse_model_config(CALIBRATION["Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"])
    t = activation_terms(moe, 8, 8192, 256, 2, expert_parallel=True, dp=2)
    assert t.total == t.forward + t.moe_workspace + t.all2all + t.sampler + t.workspace
    assert t.total == activation_bytes(moe, 8, 8192, 256, 2, expert_parallel=True, dp=2)
    assert t.all2all == t.moe_workspace  # DP 2: the other rank's gathered rows, as many as this rank's
    assert activation_terms(moe, 8, 8192, 256, 2, expert_parallel=True, dp=1).all2all == 0
    d = activation_terms(dense, 1, 8192, 256, 2)
    assert d.moe_workspace == d.all2all == 0
    # The sampler: fp32 logits and one copy over min(max_num_seqs, tokens) rows of the vocabulary.
    assert d.sampler == 256 * dense.vocab_size * 4 * 2
    assert activation_terms(dense, 1, 8192, 512, 2).sampler == 2 * d.sampler


def test_the_tower_is_split_by_tp_unless_the_encoder_runs_data_parallel() -> None:
    spec = parse_model_config(arch("qwen3.5-27b"))
    one = multimodal_profile(spec.vision, {}, spec.hidden_size, 8192, 256, 32768, 2, tp=1)
    two = multimodal_profile(spec.vision, {}, spec.hidden_size, 8192, 256, 32768, 2, tp=2)
    data = multimodal_profile(spec.vision, {"mm-encoder-tp-mode": "data"}, spec.hidden_size, 8192, 256, 32768, 2, tp=2)
    assert one is not None and two is not None and data is not None
    assert two.encoder_peak < one.encoder_peak == data.encoder_peak
    assert two.encoder_cache == one.encoder_cache  # the outputs are whole on every rank


def test_images_off_with_video_on_is_not_taken_for_text_only() -> None:
    # vLLM then profiles the video modality (PR https://github.com/vllm-project/vllm/pull/30475: Qwen3-VL-235B with
    # --limit-mm-per-prompt.image 0 logs "budget of 153600 tokens, and profiled with 1 video items"): not modelled,
    # the flat charge stays and the plan says why.
    spec = parse_model_config(arch("qwen3.6-35b-a3b-nvfp4"))
    assert multimodal_profile(spec.vision, {"limit-mm-per-prompt": {"image": 0}}, spec.hidden_size,
                              8192, 256, 32768, 2) is None  # video unset: 999 (config/multimodal.py:704-706)
    result = plan(facts("h100x8_nvswitch"), arch("qwen3.6-35b-a3b-nvfp4"),
                  engine_args={"tensor_parallel_size": 1, "max_model_len": 32768, "limit_mm_per_prompt": {"image": 0}})
    assert "keeps another modality" in result["reasons"]["multimodal-profile"]
    two = multimodal_profile(spec.vision, {"limit-mm-per-prompt": {"image": 2, "audio": 0}}, spec.hidden_size,
                             8192, 256, 32768, 2)
    assert two is not None and two.items_per_batch == 1  # club-3090 issue 612's setting: still one image


def test_the_modular_moe_workspace_of_0_32_cuts_the_dp_ep_peak_of_deepseek_v3() -> None:
    # vLLM 0.32 TritonExperts.workspace_shapes: (M, topk, max(n, h)) sharing storage with the (M, h) output, and
    # (M, topk, max(2n, h)); DeepSeek-V3 under DP 8 x TP 1 with EP: n 2048, h 7168, top-8 over 8 x 8192 gathered rows.
    v3 = parse_model_config(json.loads((FIXTURES / "planner" / "checkpoints" / "deepseek-v3" / "config.json")
                                       .read_text()))
    old = activation_terms(v3, 1, 8192, 256, 2, expert_parallel=True, dp=8)
    new = activation_terms(v3, 1, 8192, 256, 2, expert_parallel=True, dp=8, modular_moe=True)
    rows = 8 * 8192
    assert new.moe_workspace + new.all2all == rows * (8 * (7168 + 7168) + 2 * 7168) * 2
    assert (old.moe_workspace + old.all2all) / (new.moe_workspace + new.all2all) > 1.7
    # 17.1 vs 28.4 GiB per GPU: the 26-28 GiB came from the per-slot terms
    assert new.total / 2**30 < 17.5 < 26 < old.total / 2**30
