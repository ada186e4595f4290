"""The `vllm-fleet plan` command contract: JSON shape, human table, exit code 2 on refusals, --help."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .planner_data import GPU, MODELS

CLI = [sys.executable, "-m", "vllm_fleet.cli"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, check=False, timeout=60)


def test_json_contract():
    proc = run("plan", "--model", str(MODELS / "llama-3.1-8b"), "--gpu", "NVIDIA H100 80GB HBM3",
               "--gpu-count", "2", "--profile", "batch", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert set(plan["memory_gib"]) >= {"weights", "activation", "non_torch", "cuda_graph", "kv_cache"}
    assert set(plan["prediction"]) >= {"kv_cache_tokens", "gpu_blocks", "block_size", "max_concurrency",
                                       "max_model_len"}
    assert plan["engine_args"]["tensor-parallel-size"] == 1
    assert all(not k.startswith("-") for k in plan["engine_args"])
    assert plan["cli_args"][:2] == ["--tensor-parallel-size", "1"]
    # safetensors index total_size (16060522496 B = 14.96 GiB) is what the weights figure uses
    assert plan["memory_gib"]["weights"] == pytest.approx(16060522496 / 1024**3, rel=0.01)
    assert isinstance(plan["reasons"], dict) and isinstance(plan["warnings"], list)


def test_facts_file_and_human_output():
    proc = run("plan", "--model", str(MODELS / "qwen3-14b" / "config.json"),
               "--facts", str(GPU / "h200x2" / "expected_facts.json"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "2x NVIDIA H200" in out
    assert "--gpu-memory-utilization" in out and "CUDA context" in out
    assert "GPU KV cache size:" in out and "Maximum concurrency for 40,960 tokens per request" in out
    assert out.strip().splitlines()[-1].startswith("vllm serve ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "NVIDIA H100 80GB HBM3", "--tensor-parallel-size", "3"], "does not divide"),
        (["--gpu", "Tesla T4", "--dtype", "bfloat16"], "bfloat16 needs compute capability 8.0"),
        (["--gpu", "Mystery GPU"], "unknown GPU"),
        (["--gpu", "NVIDIA L4", "--max-model-len", "999999"], "above the model's limit"),
    ],
)
def test_refusal_is_one_line_exit_2(args, message):
    proc = run("plan", "--model", str(MODELS / "llama-3.1-8b"), *args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_missing_and_malformed_model(tmp_path: Path):
    proc = run("plan", "--model", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    (tmp_path / "config.json").write_text("{not json")
    proc = run("plan", "--model", str(tmp_path))
    assert proc.returncode == 2 and "not valid JSON" in proc.stderr and "Traceback" not in proc.stderr


def test_help_documents_the_contract():
    proc = run("plan", "--help")
    assert proc.returncode == 0
    for flag in ("--model", "--gpu", "--gpu-count", "--gpu-memory-mib", "--compute-capability", "--facts",
                 "--profile", "--vllm-version", "--tensor-parallel-size", "--pipeline-parallel-size",
                 "--gpu-memory-utilization", "--max-model-len", "--dtype", "--quantization", "--kv-cache-dtype",
                 "--max-num-seqs", "--max-num-batched-tokens", "--block-size", "--enforce-eager", "--json"):
        assert flag in proc.stdout, flag


def test_cpu_lane_without_gpu():
    proc = run("plan", "--model", str(MODELS / "tiny-llama"), "--json", "--kv-cache-memory-bytes", str(1 << 30))
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["device"] == "cpu" and plan["prediction"]["kv_cache_tokens"] == 1_048_576
