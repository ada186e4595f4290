"""Every refusal: one line that says what to change (PlanError); the CLI exits 2 without a traceback."""

from __future__ import annotations

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan

from .planner_data import facts, model

L4 = {"gpu_name": "NVIDIA L4", "gpu_count": 1}


@pytest.mark.parametrize(
    ("gpu", "model_name", "kwargs", "message"),
    [
        # does not fit even at the largest TP x PP the facts allow: say the minimum needed
        (L4, "llama-3.1-405b-fp8", {}, r"does not fit.*needs about \d+ GiB"),
        ("h100x8_nvswitch", "llama-3.1-70b", {"engine_args": {"tensor_parallel_size": 6}},
         r"does not divide the model's 64 attention heads"),
        ("h100x8_nvswitch", "qwen3-30b-a3b", {"engine_args": {"tensor_parallel_size": 16}},
         r"more than the 8 GPU"),
        ("t4_x1", "tiny-llama", {"engine_args": {"dtype": "bfloat16"}}, r"bfloat16 needs compute capability 8\.0"),
        ("t4_x1", "tiny-llama", {"engine_args": {"kv_cache_dtype": "fp8"}}, r"no attention backend on Tesla T4"),
        ("h200x2", "tiny-llama", {"engine_args": {"max_model_len": 8192}}, r"above the model's limit of 4096"),
        (L4, "llama-3.1-8b", {"engine_args": {"max_model_len": 131072}}, r"does not fit one request.*at most \d+"),
        ("h200x2", "tiny-llama", {"engine_args": {"gpu_memory_utilization": 1.5}}, r"must be in \(0, 1\]"),
        ("h200x2", "tiny-llama", {"engine_args": {"max_num_seqs": "many"}}, r"--max-num-seqs must be an integer"),
        ("h200x2", "tiny-llama", {"engine_args": {"swap_space": 4}}, r"--swap-space was removed"),
        ("h200x2", "tiny-llama", {"extra_args": ["--worker-use-ray"]}, r"--distributed-executor-backend ray"),
        ("h200x2", "tiny-llama", {"extra_args": ["VLLM_USE_V1=1"]}, r"VLLM_USE_V1 no longer exists"),
        ("h200x2", "phi-3-mini-bnb", {}, r"vllm-bnb-plugin"),
        ("h200x2", "tiny-llama", {"engine_args": {"quantization": "fp8"}}, r"fp8_per_tensor"),
        ("h200x2", "tiny-llama", {"profile": "realtime"}, r"unknown profile 'realtime'"),
        ("a100_80gb_mig", "tiny-llama", {}, r"MIG"),
        ({"gpu_name": "Acme Accelerator 9000", "gpu_count": 1}, "tiny-llama", {}, r"unknown GPU.*--gpu-memory-mib"),
        ({"gpu_name": "Tesla V100-SXM2-32GB", "gpu_count": 1}, "tiny-llama", {}, r"below vLLM 0\.33\.0's floor of 7\.5"),
        ("h200x2", "tiny-llama", {"engine_args": {"gpu_memory_utilization": 0.999}, "policy": {"co_located_mib": 40000}},
         r"use at most 0\.\d+"),
        ("h200x2", "tiny-llama", {"policy": {"colocated": 1}}, r"unknown policy key"),
        ("h200x2", "tiny-llama", {"vllm_version": "latest"}, r"not a vLLM version"),
    ],
)
def test_refusals(gpu, model_name, kwargs, message):
    gpu_facts = facts(gpu) if isinstance(gpu, str) else gpu
    with pytest.raises(PlanError, match=message) as info:
        plan(gpu_facts, model(model_name), **kwargs)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "empty"),
        ({"hidden_size": 256}, "num_hidden_layers"),
        ({"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 3,
          "vocab_size": 10}, "not a multiple"),
        ({"num_hidden_layers": "two", "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 10},
         "positive integer"),
    ],
)
def test_malformed_config(config, message):
    with pytest.raises(PlanError, match=message):
        plan({"gpus": []}, config)


def test_cpu_head_dim_unsupported():
    cfg = dict(model("tiny-llama"), hidden_size=64, num_attention_heads=4, num_key_value_heads=2)  # head_dim 16
    with pytest.raises(PlanError, match="head_dim 16 is not supported by vLLM's CPU attention"):
        plan({"gpus": []}, cfg)
