"""LoRA adapter slots (issue 33, item 3): what vLLM preallocates for --enable-lora, and the ranks it refuses.

Evidence: a public PEFT run on Llama-3-8B, rank 64 on the seven projections, prints
"trainable params: 167,772,160 || all params: 8,198,033,408 || trainable%: 2.0465" (found with the search tool's
find_string, excerpt id 23795220952; its repository was not resolved). One vLLM slot allocates exactly those A and B
matrices at TP 1 (lora/layers/base_linear.py create_lora_weights: max_loras x rank x input, max_loras x output x
rank), so one slot is that count in the LoRA dtype. No public vLLM log of LoRA memory was found: the TP sharding,
slot scaling and refusals are tested as behaviour.
"""

from __future__ import annotations

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.lora import (
    lora_bytes_per_stage,
    resolve_lora,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model import parse_model_config

from .planner_data import model

H100 = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1}
H100X4 = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 4}
PEFT_RANK64_PARAMS = 167_772_160


def test_one_slot_is_the_published_adapter_size() -> None:
    spec = parse_model_config(model("llama-3.1-8b"))
    slots = resolve_lora({"enable-lora": True, "max-lora-rank": 64, "lora-dtype": "float32"}, 2)
    assert slots is not None
    assert sum(lora_bytes_per_stage(spec, slots, 1, 1)) == PEFT_RANK64_PARAMS * 4


def test_slots_scale_with_max_loras_and_shard_with_tp() -> None:
    spec = parse_model_config(model("llama-3.1-8b"))
    one = resolve_lora({"enable-lora": True, "max-lora-rank": 64}, 2)
    four = resolve_lora({"enable-lora": True, "max-lora-rank": 64, "max-loras": 4}, 2)
    sharded = resolve_lora({"enable-lora": True, "max-lora-rank": 64, "fully-sharded-loras": True}, 2)
    assert one is not None and four is not None and sharded is not None
    assert lora_bytes_per_stage(spec, four, 1, 1)[0] == 4 * lora_bytes_per_stage(spec, one, 1, 1)[0]
    tp1, tp4 = lora_bytes_per_stage(spec, one, 1, 1)[0], lora_bytes_per_stage(spec, one, 4, 1)[0]
    assert tp1 / 4 < tp4 < tp1  # B of column layers and A of row layers shard; the rest is whole on every rank
    assert lora_bytes_per_stage(spec, sharded, 4, 1)[0] < tp4


def test_the_plan_counts_the_slots_before_the_kv_cache() -> None:
    base = plan(H100, model("llama-3.1-8b"))
    lora = plan(H100, model("llama-3.1-8b"), engine_args={"enable_lora": True, "max_loras": 4, "max_lora_rank": 64})
    added = lora["memory_gib"]["weights"] - base["memory_gib"]["weights"]
    assert added == pytest.approx(4 * PEFT_RANK64_PARAMS * 2 / 1024**3, rel=0.001)  # bf16, the model dtype
    assert lora["prediction"]["kv_cache_tokens"] < base["prediction"]["kv_cache_tokens"]
    assert "4 adapter slot(s) of rank 64" in lora["reasons"]["enable-lora"]


def test_refusals() -> None:
    with pytest.raises(PlanError, match="--max-lora-rank 48 is not a rank vLLM allocates: use one of 1, 8, 16"):
        plan(H100, model("llama-3.1-8b"), engine_args={"enable_lora": True, "max_lora_rank": 48})
    with pytest.raises(PlanError, match="no effect without --enable-lora"):
        plan(H100, model("llama-3.1-8b"), engine_args={"max_loras": 4})
    with pytest.raises(PlanError, match="which vLLM refuses with LoRA"):
        plan(H100, model("llama-3.1-8b"), engine_args={
            "enable_lora": True, "max_num_seqs": 256, "max_num_batched_tokens": 512,
            "speculative_config": {"method": "ngram", "num_speculative_tokens": 3}})
    only_attn = resolve_lora({"enable-lora": True, "lora-target-modules": ["qkv_proj", "o_proj"]}, 2)
    assert only_attn is not None and only_attn.targets == {"q_proj", "k_proj", "v_proj", "o_proj"}
