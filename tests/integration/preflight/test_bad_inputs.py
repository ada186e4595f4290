"""The bad-input catalogue: each case runs `ansible-playbook site.yml` against a small inventory under
tests/fixtures/preflight/cases/<case>/ and must stop in preflight with a message that names the host and
says what to change, with NO task reporting `changed` on any host and no later stage started.

All cases run once, concurrently, in a module fixture (each is still its own test); they need no Docker.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests/fixtures/preflight"

pytestmark = pytest.mark.integration

# case -> (host in the play, regex the one-line message matches; it names the host and what to change).
CATALOGUE: dict[str, tuple[str, str]] = {
    "model_too_large": ("t4-a", r"t4-a: the model does not fit: .*Tesla T4 needs [\d.]+ GiB before any KV cache"),
    "tp_not_dividing_heads": ("l40s-a", r"l40s-a: --tensor-parallel-size 3 does not divide the model's 64 attention heads"),
    "bf16_on_t4": ("t4-a", r"t4-a: --dtype bfloat16 needs compute capability 8\.0\+, Tesla T4 is 7\.5"),
    "fp8_kv_on_t4": ("t4-a", r"t4-a: --kv-cache-dtype fp8 has no attention backend on Tesla T4"),
    "max_model_len_beyond_model": ("h200-a", r"h200-a: --max-model-len 1000000 is above the model's limit of 131072"),
    "malformed_config": ("h200-a", r"h200-a: \S*models/malformed/config\.json' is not valid JSON"),
    "unknown_model_path": ("h200-a", r"model path \S*no-such-model does not exist on the controller"),
    "nvidia_smi_garbage": ("localhost", r"not the CSV.*line 1 has 1 columns, expected 15"),
    "two_sku_groups": ("h200-a", r"h200-a: is in 2 SKU groups \(gpu_h100, gpu_h200\)"),
    "multinode_mixed_gpus": ("a100-a", r"multi-node group big: mixed GPUs \(a100-a: 8x NVIDIA A100-SXM4-80GB"),
    "duplicate_port": ("h200-a", r"h200-a: port 8000 is used by both vllm_lb_port and vllm_serve_port"),
    "missing_api_key": ("h200-a", r"h200-a: the API-key secret vllm_fleet_api_key is missing"),
    "string_for_number": ("h200-a", r"h200-a: vllm_fleet_engine_args\.max_num_seqs must be an integer, got string '256'"),
    "gpu_memory_utilization_1_5": ("h200-a", r"h200-a: vllm_fleet_engine_args\.gpu_memory_utilization = 1\.5 is out of range"),
    "removed_flag_worker_use_ray": ("h200-a", r"h200-a: vllm_fleet_extra_args has --worker-use-ray, which vLLM 0\.32 rejects"),
    "removed_variable_max_paddings": ("h200-a", r"h200-a: variable vllm_max_paddings is no longer used"),
    "typo_variable": ("h200-a", r"unknown variable vllm_fleet_gpu_memory_utilisation"),
    "typo_serve_variable": ("h200-a", r"h200-a: unknown variable vllm_serve_prot \(did you mean vllm_serve_port\?\): "
                                      r"rename it, or remove it"),
    "serve_port_not_a_port": ("h200-a", r"h200-a: vllm_serve_port must be an integer port, got string '80x0'.*"
                                        r"h200-a: vllm_serve_restart_policy must be one of no, on-failure, always, "
                                        r"unless-stopped, got false \(YAML reads an unquoted no as false: quote it\)"),
    # Issue 31: a data center T4 on R535 runs vLLM 0.32's CUDA 13.0 only through forward compatibility, which needs
    # NVIDIA's cuda-compat files the inventory does not give: refused, with both fixes.
    "driver_too_old": ("t4-old", r"t4-old: cu130: .*driver 535\.261\.03 < 580\.65\.06: CUDA 13\.0 through forward "
                                 r"compatibility .*set vllm_image_cuda_compat_dir .*or upgrade the driver to >= 580\.65\.06"),
    "sku_mismatch": ("h200-a", r"h200-a: is in gpu_h100 \(expects a GPU matching 'H100'\) but discovery found NVIDIA H200"),
    "removed_env_var": ("h200-a", r"h200-a: vllm_fleet_env\.VLLM_USE_V1 is unknown to vLLM 0\.32"),
    "unknown_engine_arg": ("h200-a", r"h200-a: vllm_fleet_engine_args\.max_num_seq is not a vLLM 0\.32 engine "
                                     r"argument \(did you mean max_num_seqs\?\): fix the name"),
    "flag_and_value_in_one_item": ("h200-a", r"h200-a: vllm_fleet_extra_args\[0\] \S*--swap-space 16\S* holds a flag "
                                             r"and its value in one item .*write them as two items "
                                             r"\[\\*\"--swap-space\\*\", \\*\"16\\*\"\]"),
    "gguf_model": ("h200-a", r"h200-a: \S*gguf_model/tiny\.Q4_K_M\.gguf\S* is a GGUF checkpoint, not a config\.json: "
                             r"give a Hugging Face model directory with its config\.json"),
    "gpu_group_without_gpu": ("h100-c", r"h100-c: is in gpu_h100 but its facts show no NVIDIA GPU \(gpu_count 0\): "
                                        r"fix the driver .* or move the host to a cpu_<lane> group"),
    # The refusal names both variables and the fix; the (?!...) makes sure neither secret value is in the output.
    "secret_in_engine_args": ("h200-a", r"^(?!.*(?:sk-case-secret-52c1e9|hf-case-secret-8d0b77))"
                                        r".*h200-a: vllm_fleet_engine_args\.api_key holds an API key, .*put it in "
                                        r"vllm_fleet_api_key \(ansible-vault\) — it reaches vLLM as VLLM_API_KEY"
                                        r".*h200-a: vllm_fleet_env\.HF_TOKEN holds a Hugging Face token"),
    # vLLM's start-up rules, one mistake per host of one inventory (STARTUP below checks every host's line).
    "startup_rules": ("st-chunked", r"st-chunked: vLLM would refuse it: 'max_num_batched_tokens \(2048\) is smaller "
                                    r"than max_model_len \(8192\)\."),
}

# startup_rules: host -> the line it must get (vLLM's words, the host, the fix); preflight/startup.py, mirrored
# rules in preflight/startup_rules.py. Each is refused in the same run, before any host changes.
STARTUP: dict[str, str] = {
    "st-chunked": r"st-chunked: vLLM would refuse it: 'max_num_batched_tokens \(2048\) is smaller than max_model_len "
                  r"\(8192\)\..*remove enable_chunked_prefill: false",
    "st-seqs": r"st-seqs: vLLM would refuse it: 'max_num_batched_tokens \(256\) must be greater than or equal to "
               r"max_num_seqs \(512\)\.'",
    "st-active": r"st-active: vLLM would refuse it: 'max_num_active_seqs \(128\) cannot be greater than max_num_seqs "
                 r"\(64\)\.'",
    "st-longprefill": r"st-longprefill: vLLM would refuse it: 'long_prefill_token_threshold \(8192\) cannot be "
                      r"greater than the max_model_len \(4096\)\.'",
    "st-quant": r"st-quant: vLLM would refuse it: 'Quantization method specified in the model config \(fp8\) does "
                r"not match the quantization method specified in the `quantization` argument \(gptq\)': remove",
    "st-awq": r"st-awq: vLLM would refuse it: 'Cannot find the config file for awq'",
    "st-deprecated": r"st-deprecated: vLLM 0\.32 would refuse it: 'The quantization method fbgemm_fp8 is deprecated",
    "st-attn": r"st-attn: vLLM 0\.32 would refuse it: \"Unknown attention backend: 'XFORMERS'\": remove "
               r"vllm_fleet_engine_args\.attention_backend",
    "st-ep": r"st-ep: vLLM would refuse it: 'Number of experts in the model must be greater than 0 when expert "
             r"parallelism is enabled\.' \(the model is dense\)",
    "st-lora": r"st-lora: vLLM would refuse it: 'max_cpu_loras \(2\) must be >= max_loras \(4\)\.'",
    "st-dcp": r"st-dcp: vLLM would refuse it: 'Decode context parallelism for GQA/MQA requires `--tensor-parallel-size` "
              r"\(4\) to be greater than the model's total number of KV heads \(8\)",
    "st-cuda-env": r"st-cuda-env: vllm_fleet_env\.CUDA_VISIBLE_DEVICES fights the launch record",
    "st-vllm-port": r"st-vllm-port: vllm_fleet_env\.VLLM_PORT = 8000 is vLLM's first internal port and also a port of "
                    r"the launch record",
    "st-mn-model-a": r"st-mn-model-a: multi-node group two-checkpoints runs one model instance, but its hosts name 2 "
                     r"different checkpoints .*set vllm_fleet_model once for the group",
    "st-mn-version-a": r"st-mn-version-a: multi-node group two-versions runs one model instance, but its hosts name 2 "
                       r"different vLLM versions \(st-mn-version-a: 0\.32\.0; st-mn-version-b: 0\.33\.0\)",
}


def _env(case: str) -> dict[str, str]:
    if case == "nvidia_smi_garbage":
        return {"PATH": f"{ROOT / 'tests/fixtures/gpu/bin'}{os.pathsep}{os.environ.get('PATH', '')}",
                "FAKE_NVIDIA_SMI_FIXTURE": str(ROOT / "tests/fixtures/gpu/garbage")}
    return {}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, playbook: Callable[..., Any]) -> dict[str, tuple[Any, Path]]:
    base = tmp_path_factory.mktemp("preflight-cases")

    def one(case: str) -> tuple[str, tuple[Any, Path]]:
        artifacts = base / case / "artifacts"
        run = playbook("site.yml", FIXTURES / "cases" / case / "hosts.yml", artifacts, _env(case))
        return case, (run, artifacts)

    def other(name: str, playbook_path: str, extra: list[str]) -> tuple[str, tuple[Any, Path]]:
        artifacts = base / name / "artifacts"
        return name, (playbook(playbook_path, FIXTURES / "cases" / "startup_rules" / "hosts.yml", artifacts, None,
                               extra), artifacts)

    with ThreadPoolExecutor(max_workers=4) as pool:
        cases = [pool.submit(one, case) for case in sorted(CATALOGUE)]
        # The start-up rules' case also through the preflight stage alone and site.yml --check.
        extra = [pool.submit(other, "startup_rules@preflight", "playbooks/preflight.yml", []),
                 pool.submit(other, "startup_rules@check", "site.yml", ["--check"])]
        return dict(future.result() for future in cases + extra)


@pytest.mark.parametrize("run_name", ["startup_rules", "startup_rules@preflight", "startup_rules@check"])
@pytest.mark.parametrize("host", sorted(STARTUP))
def test_startup_rule_refused_in_preflight(host: str, run_name: str, runs: dict[str, tuple[Any, Path]]) -> None:
    """Every host of startup_rules gets its line, from site.yml, preflight.yml alone and site.yml --check."""
    run, artifacts = runs[run_name]
    context = f"\n--- ansible-playbook output ({run_name}) ---\n{run.output[-6000:]}"
    assert run.rc != 0, context
    assert re.search(STARTUP[host], run.flat), f"message /{STARTUP[host]}/ not found" + context
    assert run.recap and all(r["changed"] == 0 for r in run.recap.values()), context
    assert run.plays and all(p.startswith("Preflight") for p in run.plays), context
    assert "Traceback" not in run.output, context
    assert not artifacts.exists()


def test_every_startup_host_is_checked() -> None:
    inventory = yaml.safe_load((FIXTURES / "cases" / "startup_rules" / "hosts.yml").read_text())
    hosts = set(inventory["all"]["children"]["vllm_servers"]["children"]["gpu_h100"]["hosts"])
    # The second host of each multi-node group is named in its group's line.
    assert hosts - {"st-mn-model-b", "st-mn-version-b"} == set(STARTUP)


def test_catalogue_is_complete() -> None:
    on_disk = {p.name for p in (FIXTURES / "cases").iterdir() if (p / "hosts.yml").is_file()}
    assert on_disk == set(CATALOGUE)
    assert len(CATALOGUE) >= 15


@pytest.mark.parametrize("case", sorted(CATALOGUE))
def test_bad_input_stops_in_preflight(case: str, runs: dict[str, tuple[Any, Path]]) -> None:
    run, artifacts = runs[case]
    host, pattern = CATALOGUE[case]
    context = f"\n--- ansible-playbook output ({case}) ---\n{run.output[-6000:]}"
    assert run.rc != 0, "preflight accepted bad input" + context
    assert re.search(pattern, run.flat), f"message /{pattern}/ not found" + context
    assert host in run.recap, f"{host} not in the play" + context
    assert any(r["failed"] for r in run.recap.values()), context
    # Nothing changed on any host; no later stage started; no report written.
    assert run.recap, "no PLAY RECAP" + context
    assert all(r["changed"] == 0 for r in run.recap.values()), f"a task changed something: {run.recap}" + context
    assert run.plays and all(p.startswith("Preflight") for p in run.plays), f"plays run: {run.plays}" + context
    assert "Traceback" not in run.output, context
    assert not artifacts.exists()
