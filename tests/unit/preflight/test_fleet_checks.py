"""Pure preflight validation (plugins/plugin_utils/preflight/: inputs, machines, multinode, images and
record.check_fleet): each bad input → one clear message."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.images import (
    check_driver_cuda,
    image_compat_check,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.inputs import (
    check_host_inputs,
    sku_groups,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.machines import (
    DEFAULT_PORT_VARIABLES,
    check_facts_shape,
    check_ports,
    check_sku_match,
    port_map,
    port_variables,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.multinode import (
    check_multinode,
    check_multinode_facts,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import check_fleet

ROOT = Path(__file__).resolve().parents[3]
RECORDED = ROOT / "inventories/example/recorded_facts"

GOOD: dict[str, Any] = {
    "vllm_fleet_model": "/models/llama/config.json",
    "vllm_fleet_vllm_version": "0.32.0",
    "vllm_fleet_engine_args": {"gpu_memory_utilization": 0.9, "tensor_parallel_size": 2, "max_model_len": 8192,
                               "dtype": "auto", "kv_cache_dtype": "auto", "enforce_eager": False},
    "vllm_fleet_extra_args": ["--enable-log-requests"],
    "vllm_fleet_env": {"VLLM_LOGGING_LEVEL": "INFO"},
    "vllm_fleet_api_key": "s3cr3t-key-from-vault",
    "vllm_serve_port": 8000,
}


def facts(host: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RECORDED / f"{host}.json").read_text())
    return data


def errors_for(**changes: Any) -> list[str]:
    variables = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is _DROP:
            variables.pop(key, None)
        else:
            variables[key] = value
    return check_host_inputs("h1", variables, ["vllm_servers", "gpu_h100"])


_DROP = object()


def test_good_inputs_have_no_errors() -> None:
    assert errors_for() == []


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"vllm_fleet_engine_args": {"gpu_memory_utilization": 1.5}}, "gpu_memory_utilization = 1.5 is out of range"),
        ({"vllm_fleet_engine_args": {"gpu_memory_utilization": 0}}, "gpu_memory_utilization = 0 is out of range"),
        ({"vllm_fleet_engine_args": {"gpu_memory_utilization": "0.9"}}, "must be a number, got string '0.9'"),
        ({"vllm_fleet_engine_args": {"gpu_memory_utilization": True}}, "must be a number, got bool"),
        ({"vllm_fleet_engine_args": {"tensor_parallel_size": "2"}}, "tensor_parallel_size must be an integer, got string"),
        ({"vllm_fleet_engine_args": {"tensor_parallel_size": 0}}, "tensor_parallel_size = 0 is out of range"),
        ({"vllm_fleet_engine_args": {"max_num_seqs": 2.5}}, "max_num_seqs must be an integer, got float"),
        ({"vllm_fleet_engine_args": {"dtype": "bf16"}}, "dtype = 'bf16' is not one of"),
        ({"vllm_fleet_engine_args": {"kv_cache_dtype": "int4"}}, "kv_cache_dtype = 'int4' is not one of"),
        ({"vllm_fleet_engine_args": {"enforce_eager": "yes"}}, "enforce_eager must be true or false"),
        ({"vllm_fleet_engine_args": {"swap_space": 4}}, "swap_space is not a vLLM 0.32 engine argument"),
        ({"vllm_fleet_engine_args": {"worker_use_ray": True}}, "distributed_executor_backend: ray"),
        ({"vllm_fleet_engine_args": {"Tensor-Parallel": 2}}, "must be snake_case"),
        ({"vllm_fleet_engine_args": ["tp", 2]}, "vllm_fleet_engine_args must be a dict"),
        ({"vllm_fleet_extra_args": ["--worker-use-ray"]}, "--worker-use-ray, which vLLM 0.32 rejects"),
        ({"vllm_fleet_extra_args": ["--swap-space=4"]}, "--swap-space, which vLLM 0.32 rejects"),
        ({"vllm_fleet_extra_args": ["--max-paddings", "256"]}, "--max-paddings"),
        ({"vllm_fleet_extra_args": ["--tensor-parallel-size", "4"]}, "pin it as vllm_fleet_engine_args.tensor_parallel_size"),
        ({"vllm_fleet_extra_args": "--enforce-eager"}, "must be a list of strings"),
        ({"vllm_fleet_extra_args": [8]}, "vllm_fleet_extra_args[0] must be a string"),
        ({"vllm_fleet_env": {"VLLM_USE_V1": "1"}}, "VLLM_USE_V1 is unknown to vLLM 0.32"),
        ({"vllm_fleet_env": {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}}, "attention_backend"),
        ({"vllm_fleet_api_key": _DROP}, "API-key secret vllm_fleet_api_key is missing"),
        ({"vllm_fleet_api_key": ""}, "empty or a placeholder"),
        ({"vllm_fleet_api_key": "CHANGEME"}, "empty or a placeholder"),
        ({"vllm_fleet_model": _DROP}, "vllm_fleet_model is not set"),
        ({"vllm_fleet_model": 42}, "vllm_fleet_model must be a path"),
        ({"vllm_fleet_vllm_version": 0.32}, "must be a quoted version"),
        ({"vllm_fleet_image_cuda_version": 13.0}, "must be a quoted CUDA version"),
        ({"vllm_fleet_api_key_required": "false"}, "vllm_fleet_api_key_required must be true or false"),
        ({"vllm_max_paddings": 256}, "vllm_max_paddings is no longer used"),
        ({"vllm_gpu_memory_utilization": 0.9}, "renamed to vllm_fleet_engine_args.gpu_memory_utilization"),
        ({"gpu_count": 8}, "discovered facts are never typed into the inventory"),
        ({"vllm_fleet_gpu_memory_utilisation": 0.9}, "unknown variable vllm_fleet_gpu_memory_utilisation"),
        ({"vllm_fleet_modle": "/m"}, "did you mean vllm_fleet_model?"),
        ({"vllm_fleet_port_variables": "vllm_serve_port"}, "must be a list of variable names"),
        ({"vllm_image_vllm_version": "0.31.0"}, "vllm_image_vllm_version '0.31.0' differs from vllm_fleet_vllm_version"),
        ({"vllm_fleet_policy": [1]}, "vllm_fleet_policy must be a dict"),
    ],
)
def test_bad_input_is_named(changes: dict[str, Any], needle: str) -> None:
    errors = errors_for(**changes)
    assert errors, f"no error for {changes}"
    assert any(needle in e for e in errors), errors
    assert all(e.startswith("h1: ") for e in errors)
    assert all("\n" not in e for e in errors)


def test_secret_value_never_in_messages() -> None:
    errors = errors_for(vllm_fleet_api_key="changeme", vllm_fleet_engine_args={"gpu_memory_utilization": 2})
    assert errors and not any("changeme" in e.lower() and "placeholder" not in e for e in errors)


def test_api_key_not_required_for_a_closed_lab() -> None:
    assert errors_for(vllm_fleet_api_key=_DROP, vllm_fleet_api_key_required=False) == []


def test_max_model_len_auto_is_allowed() -> None:
    assert errors_for(vllm_fleet_engine_args={"max_model_len": "auto"}) == []


@pytest.mark.parametrize(
    ("groups", "needle"),
    [
        (["vllm_servers"], "is in no SKU group"),
        (["vllm_servers", "gpu_h100", "gpu_h200"], "is in 2 SKU groups (gpu_h100, gpu_h200)"),
        (["vllm_servers", "gpu_h100", "cpu_lane"], "is in 2 SKU groups"),
    ],
)
def test_sku_group_membership(groups: list[str], needle: str) -> None:
    errors = check_host_inputs("h1", GOOD, groups)
    assert any(needle in e for e in errors), errors


def test_sku_groups_pattern() -> None:
    assert sku_groups(["all", "vllm_servers", "gpu_h200", "cpu_lane", "gpu", "gpus_misc"]) == ["cpu_lane", "gpu_h200"]


@pytest.mark.parametrize(
    ("ports", "needle"),
    [
        ({"vllm_serve_port": 8000, "vllm_lb_port": 8000}, "port 8000 is used by both vllm_lb_port and vllm_serve_port"),
        ({"vllm_serve_ports": [8000, 8001], "vllm_lb_port": 8001}, "port 8001 is used by both"),
        ({"vllm_serve_port": "8000"}, "must be an integer port, got string"),
        ({"vllm_serve_port": 70000}, "70000 is not a TCP port"),
    ],
)
def test_ports(ports: dict[str, Any], needle: str) -> None:
    errors = check_ports("h1", ports)
    assert any(needle in e for e in errors), errors


def test_distinct_ports_pass() -> None:
    assert check_ports("h1", {"vllm_serve_ports": [8000, 8001], "vllm_lb_port": 8080}) == []


def test_recorded_example_facts_are_contract_1() -> None:
    for path in sorted(RECORDED.glob("*.json")):
        assert check_facts_shape(path.stem, json.loads(path.read_text())) == [], path


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda f: f.pop("gpus"), "no 'gpus' list"),
        (lambda f: f.update(gpu_count="2"), "'gpu_count' must be an integer"),
        (lambda f: f.update(gpu_count=3), "gpu_count 3 but list 2 GPUs"),
        (lambda f: f.pop("host"), "no 'host' block"),
        (lambda f: f["gpus"][0].pop("memory_total_mib"), "gpus[0] lacks name/memory_total_mib"),
    ],
)
def test_facts_shape_errors(mutate: Any, needle: str) -> None:
    f = facts("h200-01")
    mutate(f)
    errors = check_facts_shape("h200-01", f)
    assert any(needle in e for e in errors), errors


def test_facts_shape_rejects_non_dict() -> None:
    assert "must be a JSON object" in check_facts_shape("x", ["nvidia-smi garbage"])[0]


def test_sku_match() -> None:
    assert check_sku_match("h200-01", facts("h200-01"), "gpu_h200", "H200") == []
    assert "discovery found NVIDIA H200" in check_sku_match("h200-01", facts("h200-01"), "gpu_h100", "H100")[0]
    assert "is in CPU group" in check_sku_match("h200-01", facts("h200-01"), "cpu_lane", "cpu")[0]
    assert check_sku_match("h200-01", facts("h200-01"), "gpu_h100", None) == []


@pytest.mark.parametrize(
    ("driver", "cuda", "image", "ok"),
    [
        ("580.159.04", "13.0", "13.0", True),
        ("575.51.03", "12.9", "13.0", False),
        ("575.51.03", "12.9", "12.9", True),
        ("535.261.03", "12.2", "12.9", False),
        ("535.261.03", None, "13.0", False),
        ("590.10", None, "13.0", True),
    ],
)
def test_driver_vs_image_cuda(driver: str, cuda: str | None, image: str, ok: bool) -> None:
    f = facts("t4-01")
    f["driver_version"], f["cuda_version"] = driver, cuda
    errors = check_driver_cuda("t4-01", f, image)
    assert (errors == []) is ok, errors
    if not ok:
        assert "upgrade the NVIDIA driver" in errors[0] and driver in errors[0]


def test_driver_check_skips_cpu_hosts() -> None:
    cpu = {"gpus": [], "gpu_count": 0, "driver_version": None, "cuda_version": None, "host": {}}
    assert check_driver_cuda("cpu", cpu, "13.0") == []


def plan(tp: int, pp: int, nodes: int) -> dict[str, Any]:
    return {"vllm_version": "0.32.0", "parallel": {"tensor_parallel_size": tp, "pipeline_parallel_size": pp,
                                                   "nodes": nodes, "gpus_per_replica": tp * pp, "replicas": 1}}


def rec(host: str, group: str | None, p: dict[str, Any], f: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"facts": f or facts(host if host.startswith("h1") else "h100-01"), "plan": p, "multinode_group": group}


def test_multinode_complete_and_homogeneous() -> None:
    records = {"h100-01": rec("h100-01", "g", plan(8, 2, 2)), "h100-02": rec("h100-02", "g", plan(8, 2, 2))}
    assert check_multinode(records) == []
    assert check_multinode_facts(records) == []


def test_multinode_incomplete() -> None:
    records = {"h100-01": rec("h100-01", "g", plan(8, 4, 4)), "h100-02": rec("h100-02", "g", plan(8, 4, 4))}
    errors = check_multinode(records)
    assert any("multi-node group g: incomplete" in e and "needs 4 node(s), the group has 2" in e for e in errors)


def test_multinode_plan_without_group() -> None:
    errors = check_multinode({"h100-01": rec("h100-01", None, plan(8, 2, 2))})
    assert "set vllm_fleet_multinode_group" in errors[0]


def test_multinode_mixed_gpus_from_facts() -> None:
    records = {"h100-01": {"facts": facts("h100-01"), "multinode_group": "g"},
               "h200-01": {"facts": facts("h200-01"), "multinode_group": "g"}}
    errors = check_multinode_facts(records)
    assert len(errors) == 1 and "mixed GPUs" in errors[0] and "NVIDIA H200" in errors[0]


def test_multinode_single_host_group() -> None:
    errors = check_multinode_facts({"h100-01": {"facts": facts("h100-01"), "multinode_group": "g"}})
    assert "at least two hosts" in errors[0]


def test_multinode_not_filling_nodes() -> None:
    p = plan(4, 2, 2)  # 8 GPUs over two 8-GPU nodes
    errors = check_multinode({"h100-01": rec("h100-01", "g", p), "h100-02": rec("h100-02", "g", p)})
    assert any("does not fill 2 nodes of 8 GPUs" in e for e in errors), errors


def test_check_fleet_uses_image_checker_when_no_cuda_pinned() -> None:
    calls: list[str] = []

    def checker(f: Any, p: Any) -> str | None:
        calls.append(f["gpu_name"])
        return "No vLLM image runs on driver 535"

    records = {"t4-01": {"facts": facts("t4-01"), "plan": plan(1, 1, 1), "ports": {"vllm_serve_port": 8000}}}
    errors = check_fleet(records, checker)
    assert errors == ["t4-01: No vLLM image runs on driver 535"] and calls == ["Tesla T4"]
    records["t4-01"]["image_cuda"] = "13.0"
    assert check_fleet(records, checker) == []


def test_port_variables_and_port_map() -> None:
    assert port_variables() == list(DEFAULT_PORT_VARIABLES)
    assert port_variables(("a_port",)) == ["a_port"]
    for bad in ("a_port", ["a_port", 1]):
        with pytest.raises(ValueError, match="vllm_fleet_port_variables must be a list of variable names"):
            port_variables(bad)
    assert port_map({"a": 8000, "b": None, "c": "", "d": [1, 2], "e": 0}) == {"a": 8000, "d": [1, 2], "e": 0}


def test_image_compat_check_uses_the_image_table() -> None:
    t4 = facts("t4-01")
    assert image_compat_check(t4, {}) is None  # no plan version: nothing to check
    assert image_compat_check(dict(t4, driver_version="580.95.05"), {"vllm_version": "0.32.0"}) is None
    refusal = image_compat_check(dict(t4, driver_version="470.256.02"), {"vllm_version": "0.32.0"})
    assert refusal and "470" in refusal
