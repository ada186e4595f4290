"""Properties over random hardware: memory never over budget; more memory never lowers concurrency;
TP always divides the heads."""

from __future__ import annotations

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .planner_data import model

MODELS = ["tiny-llama", "llama-3.1-8b", "qwen3-14b", "qwen3-30b-a3b", "deepseek-v2-lite", "gpt-oss-20b",
          "qwen2.5-7b-awq", "llama-3.1-70b", "gemma-3-27b"]
CONFIGS = {name: model(name) for name in MODELS}
hardware = st.fixed_dictionaries({
    "memory_mib": st.integers(min_value=16 * 1024, max_value=192 * 1024),
    "count": st.sampled_from([1, 2, 4, 8]),
    "cc": st.sampled_from(["8.0", "8.6", "8.9", "9.0", "10.0"]),
})
settings.register_profile("planner", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("planner")


def _facts(hw: dict[str, object]) -> dict[str, object]:
    return {"gpu_name": "Test GPU", "gpu_count": hw["count"], "gpu_memory_mib": hw["memory_mib"],
            "compute_capability": hw["cc"]}


@given(hw=hardware, name=st.sampled_from(MODELS), profile=st.sampled_from(["chat", "batch", "long-context"]))
def test_memory_never_over_budget_and_tp_divides_heads(hw, name, profile):
    try:
        result = plan(_facts(hw), CONFIGS[name], profile=profile)
    except PlanError:
        return  # refusing is allowed; planning something that does not fit is not
    mem = result["memory_gib"]
    used = mem["weights"] + mem["activation"] + mem["non_torch"] + mem["cuda_graph"] + mem["kv_cache"]
    assert used <= mem["budget"] + 0.01
    assert mem["budget"] + mem["outside_budget"] <= mem["total"]
    tp = result["parallel"]["tensor_parallel_size"]
    heads = CONFIGS[name].get("num_attention_heads") or CONFIGS[name]["text_config"]["num_attention_heads"]
    assert heads % tp == 0
    assert result["prediction"]["kv_cache_tokens"] > 0
    assert result["prediction"]["max_concurrency"] >= 1.0  # one full-length request always fits


@given(hw=hardware, extra=st.integers(min_value=1024, max_value=64 * 1024), name=st.sampled_from(MODELS))
def test_more_memory_never_lowers_concurrency(hw, extra, name):
    small = dict(hw)
    big = dict(hw, memory_mib=hw["memory_mib"] + extra)
    args = {"tensor_parallel_size": 1, "max_model_len": 4096, "max_num_seqs": 64, "max_num_batched_tokens": 2048}
    try:
        a = plan(_facts(small), CONFIGS[name], engine_args=args)
    except PlanError:
        return
    b = plan(_facts(big), CONFIGS[name], engine_args=args)
    assert b["prediction"]["kv_cache_tokens"] >= a["prediction"]["kv_cache_tokens"]
    assert b["prediction"]["max_concurrency"] >= a["prediction"]["max_concurrency"]
