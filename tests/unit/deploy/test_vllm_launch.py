"""Unit tests for plugins/plugin_utils/deploy/launch.py (engine config, replicas, multi-node commands)."""

from __future__ import annotations

import copy
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.launch import (
    LaunchError,
    engine_config,
    multinode_commands,
    replica_layout,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "deploy"
PLAN_CPU: dict[str, Any] = json.loads((FIXTURES / "plan_cpu.json").read_text())
PLAN_GPU: dict[str, Any] = json.loads((FIXTURES / "plan_h200x8_tp4.json").read_text())
SERVER = ["vllm", "serve"]


def _cfg(plan: dict[str, Any] = PLAN_CPU, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "model_path": "/models/tiny", "served_model_name": "tiny", "host": "127.0.0.1", "port": 18210,
    }
    args.update(kw)
    return engine_config(plan, **args)


def test_engine_config_deployment_keys_win_and_keys_are_sorted() -> None:
    cfg = _cfg()
    assert cfg == {
        "dtype": "bfloat16",
        "host": "127.0.0.1",
        "load-format": "dummy",
        "max-model-len": 512,
        "max-num-seqs": 8,
        "model": "/models/tiny",  # the plan's host path is replaced by the container path
        "port": 18210,
        "served-model-name": "tiny",
    }
    assert list(cfg) == sorted(cfg)


def test_engine_config_overrides_pin_normalise_and_remove() -> None:
    cfg = _cfg(overrides={"max_num_seqs": 4, "--enforce-eager": False, "--trust-remote-code": True, "dtype": None})
    assert cfg["max-num-seqs"] == 4
    # A false switch is written the way vLLM's --config loader can read it (its top-level parser has no --no-X).
    assert cfg["no-enforce-eager"] is True and "enforce-eager" not in cfg
    assert cfg["trust-remote-code"] is True
    assert "dtype" not in cfg
    assert "max_num_seqs" not in cfg


def test_false_switches_by_release_and_json_values_stay_whole() -> None:
    """``--no-X`` exists for BooleanOptionalAction options only; a false store_true switch is left out; mappings
    and lists stay data (the role writes them as YAML; vLLM's loader makes one JSON argument / one item each)."""
    plan = dict(PLAN_CPU, vllm_version="0.33.0")
    cfg = _cfg(plan, overrides={"monokernel": False, "disable_log_stats": False, "enable_prefix_caching": False,
                                "compilation_config": {"cudagraph_mode": "PIECEWISE"},
                                "cudagraph_capture_sizes": [1, 2, 4]})
    assert cfg["no-monokernel"] is True  # new in 0.33: negatable there
    assert "disable-log-stats" not in cfg and "no-disable-log-stats" not in cfg  # store_true
    assert cfg["no-enable-prefix-caching"] is True
    assert cfg["compilation-config"] == {"cudagraph_mode": "PIECEWISE"} and cfg["cudagraph-capture-sizes"] == [1, 2, 4]
    # 0.32 has no --monokernel at all: its false is kept as given (preflight refuses the name for 0.32).
    assert _cfg(dict(PLAN_CPU, vllm_version="0.32.0"), overrides={"monokernel": False})["monokernel"] is False


def test_engine_config_does_not_mutate_the_plan() -> None:
    plan = copy.deepcopy(PLAN_CPU)
    _cfg(plan, overrides={"max-num-seqs": 1})
    assert plan == PLAN_CPU


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"api-key": "s3cret"}, "vllm_serve_api_key"),
        ({"node-rank": 1}, "per node"),
        ({"distributed_executor_backend": "ray"}, "per node"),
        ({"Max Num Seqs": 1}, "not a vLLM option name"),
        ({"max-num-seqs": object()}, "unsupported value"),
        ({"max-num-seqs": [[1]]}, "unsupported value"),
    ],
)
def test_engine_config_rejects(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        _cfg(overrides=overrides)


@pytest.mark.parametrize(
    ("kw", "message"),
    [({"port": 0}, "port"), ({"port": "80"}, "port"), ({"host": ""}, "host"), ({"model_path": None}, "model_path")],
)
def test_engine_config_rejects_deployment_values(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        _cfg(**kw)


def test_engine_config_needs_engine_args() -> None:
    with pytest.raises(LaunchError, match="engine_args"):
        _cfg({"device": "cpu"})


def test_replica_layout_cpu_single() -> None:
    layout = replica_layout(PLAN_CPU, name="vf-dep-a", base_port=18210, server_prefix="a", address="127.0.0.1")
    assert layout == [
        {"index": 0, "container": "vf-dep-a", "port": 18210, "address": "127.0.0.1", "server": "a", "device_ids": [],
         "backend": {"server": "a", "address": "127.0.0.1", "port": 18210}}
    ]


def test_replica_layout_gpu_two_replicas_of_four() -> None:
    layout = replica_layout(PLAN_GPU, name="vllm", base_port=8000, server_prefix="gpu1", address="10.0.0.5")
    assert [r["container"] for r in layout] == ["vllm-0", "vllm-1"]
    assert [r["port"] for r in layout] == [8000, 8001]
    assert [r["server"] for r in layout] == ["gpu1-0", "gpu1-1"]
    assert [r["device_ids"] for r in layout] == [["0", "1", "2", "3"], ["4", "5", "6", "7"]]
    assert layout[1]["backend"] == {"server": "gpu1-1", "address": "10.0.0.5", "port": 8001}


def test_replica_layout_uses_given_gpu_indexes() -> None:
    layout = replica_layout(
        PLAN_GPU, name="v", base_port=8000, server_prefix="h", address="h", gpu_indexes=[7, 6, 5, 4, 3, 2, 1, 0]
    )
    assert layout[1]["device_ids"] == ["3", "2", "1", "0"]


@pytest.mark.parametrize(
    ("plan", "kw", "message"),
    [
        (PLAN_GPU, {"gpu_indexes": [0, 1, 2]}, "need 8 GPUs"),
        (dict(PLAN_GPU, parallel={"replicas": 0, "gpus_per_replica": 1}), {}, "replicas must be >= 1"),
        (dict(PLAN_GPU, parallel={"replicas": 1, "gpus_per_replica": 0}), {}, "gpus_per_replica >= 1"),
        (PLAN_CPU, {"base_port": 65535}, "base_port"),
        (PLAN_CPU, {"name": ""}, "non-empty"),
    ],
)
def test_replica_layout_rejects(plan: dict[str, Any], kw: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"name": "v", "base_port": 8000, "server_prefix": "h", "address": "h"}
    args.update(kw)
    with pytest.raises(LaunchError, match=message):
        replica_layout(plan, **args)


PLAN_2NODES = dict(
    PLAN_GPU,
    engine_args={"model": "/models/big", "tensor-parallel-size": 8, "pipeline-parallel-size": 2},
    parallel={"tensor_parallel_size": 8, "pipeline_parallel_size": 2, "replicas": 1, "gpus_per_replica": 16,
              "nodes": 2},
)


def test_multinode_mp_renders_vllm_launcher_flags() -> None:
    nodes = multinode_commands(
        PLAN_2NODES, backend="mp", nodes=["10.0.0.1", "10.0.0.2"], server_argv=SERVER,
        config_path="/etc/vllm/engine.yaml", master_port=29501,
    )
    assert nodes[0]["head"] is True and nodes[0]["serves_api"] is True
    assert nodes[0]["argv"] == [
        "vllm", "serve", "--config", "/etc/vllm/engine.yaml",
        "--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port", "29501",
        "--distributed-executor-backend", "mp",
    ]
    assert nodes[1]["argv"][-1] == "--headless"
    assert nodes[1]["argv"][nodes[1]["argv"].index("--node-rank") + 1] == "1"
    assert nodes[1]["argv"][nodes[1]["argv"].index("--master-addr") + 1] == "10.0.0.1"
    assert nodes[1]["serves_api"] is False
    assert shlex.split(nodes[1]["shell"]) == nodes[1]["argv"]


def test_multinode_ray_head_then_workers() -> None:
    nodes = multinode_commands(
        dict(PLAN_2NODES, parallel=dict(PLAN_2NODES["parallel"], nodes=3)),
        backend="ray", nodes=["h", "w1", "w2"], server_argv=SERVER, config_path="/etc/vllm/e.yaml", ray_port=6380,
    )
    head = nodes[0]
    assert head["argv"][:2] == ["bash", "-c"]
    script = head["argv"][2]
    assert script.startswith("ray start --head --port=6380 --node-ip-address=h && exec vllm serve ")
    assert script.endswith("--config /etc/vllm/e.yaml --distributed-executor-backend ray")
    for rank, worker in enumerate(nodes[1:], start=1):
        assert worker["argv"] == ["ray", "start", "--block", "--address=h:6380", f"--node-ip-address={worker['address']}"]
        assert worker["rank"] == rank and worker["serves_api"] is False
    assert "--nnodes" not in " ".join(n["shell"] for n in nodes)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"backend": "slurm"}, "'mp' or 'ray'"),
        ({"nodes": ["only-one"]}, "at least 2"),
        ({"nodes": ["a", "a"]}, "distinct"),
        ({"nodes": ["a", "b", "c"]}, "needs 2 nodes"),
        ({"server_argv": []}, "server_argv"),
        ({"master_port": 0}, "master_port"),
    ],
)
def test_multinode_rejects(kw: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"backend": "mp", "nodes": ["a", "b"], "server_argv": SERVER, "config_path": "/c"}
    args.update(kw)
    with pytest.raises(LaunchError, match=message):
        multinode_commands(PLAN_2NODES, **args)
