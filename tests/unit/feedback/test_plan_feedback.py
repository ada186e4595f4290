"""Plan feedback (plugins/plugin_utils/observe/feedback.py + filter) on real vLLM start-up log lines."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter import observe as flt
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import feedback as pf

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "feedback"
CPU_1G = (FIX / "vllm-cpu-0.32-1gib-4096.log").read_text()
CPU_025G = (FIX / "vllm-cpu-0.32-0.25gib-4096.log").read_text()
GPU_TP8 = (FIX / "vllm-0.10.2-gpu-tp8.log").read_text()

# What `vllm-fleet plan --model .cache/tiny-model --profile chat` predicts on this machine's CPU lane.
CPU_PLAN: dict[str, Any] = {
    "vllm_version": "0.32.0",
    "device": "cpu",
    "memory_gib": {"kv_cache": 1.0},
    "prediction": {"kv_cache_tokens": 1048576, "gpu_blocks": 8192, "block_size": 128, "max_concurrency": 256.0,
                   "max_model_len": 4096, "kv_cache_gib": 1.0},
}
GPU_PLAN: dict[str, Any] = {
    "vllm_version": "0.10.2",
    "device": "cuda",
    "memory_gib": {"kv_cache": 10.65},
    "prediction": {"kv_cache_tokens": 238208, "max_concurrency": 7.27, "max_model_len": 32768},
}


def test_parse_cpu_line() -> None:
    got = pf.parse_startup_log(CPU_1G)
    assert got["device"] == "cpu"
    assert got["kv_cache_tokens"] == 1048576
    assert got["max_concurrency"] == 256.0
    assert got["concurrency_for_tokens"] == 4096
    assert got["kv_cache_gib"] == 1.0
    assert len(got["lines"]) == 2
    assert pf.parse_startup_log(CPU_025G)["kv_cache_tokens"] == 262144


def test_parse_gpu_lines() -> None:
    got = pf.parse_startup_log(GPU_TP8)
    assert got["device"] == "gpu"
    assert (got["kv_cache_tokens"], got["max_concurrency"], got["concurrency_for_tokens"]) == (238208, 7.27, 32768)
    assert got["kv_cache_gib"] == 10.65


def test_last_startup_counts() -> None:
    # A restarted container logs both start-ups: the second one (0.25 GiB) is what runs now.
    got = pf.parse_startup_log(CPU_1G + CPU_025G)
    assert got["kv_cache_tokens"] == 262144
    assert got["max_concurrency"] == 64.0
    assert got["kv_cache_gib"] == 0.25
    assert all("1,048,576" not in line and "(1.0/" not in line for line in got["lines"])


def test_no_startup_line() -> None:
    got = pf.parse_startup_log("INFO starting\nloading weights\n")
    assert got["kv_cache_tokens"] is None and got["lines"] == []
    result = pf.compare(CPU_PLAN, got)
    assert result["status"] == "missing" and result["warnings"]


def test_exact_prediction_is_zero_error() -> None:
    result = pf.compare(CPU_PLAN, pf.parse_startup_log(CPU_1G))
    assert result["status"] == "ok"
    assert result["error"] == {"kv_cache_tokens": 0.0, "max_concurrency": 0.0, "kv_cache_gib": 0.0}
    assert result["worst_error"] == 0.0


def test_wrong_prediction_warns_with_sign() -> None:
    # The 0.25 GiB server against the 1 GiB plan: vLLM has 75 % fewer tokens than predicted.
    result = pf.compare(CPU_PLAN, pf.parse_startup_log(CPU_025G))
    assert result["status"] == "warn"
    assert result["error"]["kv_cache_tokens"] == -0.75
    assert any("kv_cache_tokens" in w and "-75.0%" in w for w in result["warnings"])


@pytest.mark.parametrize(("error", "status"), [(0.049, "ok"), (0.051, "warn"), (-0.049, "ok"), (-0.051, "warn")])
def test_five_percent_limit(error: float, status: str) -> None:
    plan = copy.deepcopy(GPU_PLAN)
    plan["prediction"]["kv_cache_tokens"] = round(238208 / (1 + error))
    plan["prediction"]["max_concurrency"] = None
    plan["memory_gib"] = {}
    assert pf.compare(plan, pf.parse_startup_log(GPU_TP8))["status"] == status


def test_other_max_model_len_skips_concurrency() -> None:
    plan = copy.deepcopy(CPU_PLAN)
    plan["prediction"]["max_model_len"] = 2048
    plan["prediction"]["max_concurrency"] = 512.0
    result = pf.compare(plan, pf.parse_startup_log(CPU_1G))
    assert result["error"]["max_concurrency"] is None
    assert result["status"] == "ok"
    assert any("max_model_len 4096" in w for w in result["warnings"])


def test_host_report_and_summary() -> None:
    report = pf.host_feedback("h1", CPU_PLAN, [{"replica": "vllm-0", "log": CPU_1G},
                                               {"replica": "vllm-1", "log": CPU_025G}])
    assert report["status"] == "warn"
    assert report["worst_error"] == 0.75
    assert [r["replica"] for r in report["replicas"]] == ["vllm-0", "vllm-1"]
    assert report["warnings"] and report["warnings"][0].startswith("vllm-1: ")
    json.dumps(report)  # the playbook writes it as JSON
    line = pf.summary_line(report)
    assert line.startswith("h1: plan feedback warn")
    assert "vllm-0 KV 1,048,576 tokens (plan 1,048,576, +0.0%), concurrency 256.00x (+0.0%)" in line
    assert "vllm-1 KV 262,144 tokens (plan 1,048,576, -75.0%)" in line
    missing = pf.host_feedback("h2", CPU_PLAN, [{"replica": "vllm", "log": ""}])
    assert missing["status"] == "missing" and "no start-up line" in pf.summary_line(missing)


def test_report_is_deterministic() -> None:
    logs = [{"replica": "vllm", "log": CPU_1G}]
    assert pf.host_feedback("h", CPU_PLAN, logs) == pf.host_feedback("h", CPU_PLAN, logs)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: pf.parse_startup_log(None), "log must be a string"),  # type: ignore[arg-type]
        (lambda: pf.compare([], {}), "plan must be a dict"),  # type: ignore[arg-type]
        (lambda: pf.compare(CPU_PLAN, {}, tolerance=-1), "tolerance"),
        (lambda: pf.host_feedback("", CPU_PLAN, []), "host"),
        (lambda: pf.host_feedback("h", CPU_PLAN, "x"), "list"),  # type: ignore[arg-type]
        (lambda: pf.host_feedback("h", CPU_PLAN, [{"log": ""}]), "replica"),
    ],
)
def test_bad_input(call: Any, message: str) -> None:
    with pytest.raises(pf.FeedbackError, match=message):
        call()


def test_filter_takes_registered_command_results() -> None:
    # The shape of a looped ansible.builtin.command register: vLLM logs on stderr.
    results = [{"item": {"container": "vf-dep-a", "port": 18310}, "stdout": "", "stderr": CPU_1G, "rc": 0}]
    report = flt.vllm_plan_feedback(results, CPU_PLAN, host="vf-dep-a")
    assert report["status"] == "ok" and report["replicas"][0]["replica"] == "vf-dep-a"
    assert flt.vllm_plan_feedback_line(report).startswith("vf-dep-a: plan feedback ok")
    with pytest.raises(AnsibleFilterError, match=r"item\.container"):
        flt.vllm_plan_feedback([{"stdout": ""}], CPU_PLAN, host="h")
    with pytest.raises(AnsibleFilterError, match="plan must be a dict"):
        flt.vllm_plan_feedback([], "nope", host="h")
    assert "vllm_plan_feedback" in flt.FilterModule().filters()


def test_fleet_report_observed_column() -> None:
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import report as fr

    good = pf.host_feedback("a", CPU_PLAN, [{"replica": "vllm", "log": CPU_1G}])
    bad = pf.host_feedback("b", CPU_PLAN, [{"replica": "vllm", "log": CPU_025G}])
    records = {"a": {"plan": CPU_PLAN, "feedback": good}, "b": {"plan": CPU_PLAN, "feedback": bad},
               "c": {"plan": CPU_PLAN}}
    md = fr.render_markdown(records)
    assert "| Observed KV tokens (error) |" in md
    assert "| 1,048,576 | 1,048,576 (+0.0%) |" in md
    assert "| 1,048,576 | 262,144 (-75.0%) ! |" in md
    assert "| 1,048,576 | – |" in md
    html = fr.render_html(records)
    assert "<th>Observed KV tokens (error)</th>" in html and "262,144 (-75.0%) !" in html
    # Without any feedback (the preflight before a first deploy) the report is unchanged: no column.
    plain = {"a": {"plan": CPU_PLAN}}
    assert "Observed" not in fr.render_markdown(plain) and "Observed" not in fr.render_html(plain)
    assert fr.observed_cell({"replicas": [{"observed": {}, "status": "missing"}]}) == "no log line !"


def test_log_entries_from_registered_results() -> None:
    entries = pf.log_entries([
        {"replica": "r0", "log": "text"},
        {"item": {"container": "c1"}, "stdout": "out", "stderr": "err"},
        {"item": "c2", "stdout": None, "stderr": "err"},
    ])
    assert entries == [{"replica": "r0", "log": "text"}, {"replica": "c1", "log": "out\nerr"},
                       {"replica": "c2", "log": "\nerr"}]


@pytest.mark.parametrize(
    ("logs", "message"),
    [("x", "input must be a list"), (["x"], "entry is not a dict: 'x'"),
     ([{"item": {}, "stdout": ""}], "a command result without item.container")],
)
def test_log_entries_refusals(logs: Any, message: str) -> None:
    with pytest.raises(pf.FeedbackError, match=message):
        pf.log_entries(logs)
    with pytest.raises(AnsibleFilterError, match=f"vllm_plan_feedback: {message}"):
        flt.vllm_plan_feedback(logs, CPU_PLAN, host="h")
