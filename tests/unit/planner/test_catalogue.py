"""The GPU catalogue (planner/hardware.py) and GPUs it does not know: planned from their facts, with a note."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.hardware import (
    GPU_CATALOGUE,
    lookup_gpu,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.inputs import gpu_from_facts

from .planner_data import facts, model

# nvidia-smi / torch names → (catalogue key, compute capability, interconnect class)
NAMES = [
    ("NVIDIA B200", "B200", "10.0", "nvswitch"),
    ("NVIDIA B300 SXM6 AC", "B300", "10.3", "nvswitch"),
    ("NVIDIA GB200", "GB200", "10.0", "nvswitch"),
    ("NVIDIA GB300", "GB300", "10.3", "nvswitch"),
    ("NVIDIA GB10", "GB10", "12.1", "single"),
    ("NVIDIA H200", "H200", "9.0", "nvswitch"),
    ("NVIDIA H200 NVL", "H200-NVL", "9.0", "nvlink"),
    ("NVIDIA H20", "H20", "9.0", "nvswitch"),
    ("NVIDIA H800", "H800", "9.0", "nvswitch"),
    ("NVIDIA H100 80GB HBM3", "H100-SXM", "9.0", "nvswitch"),
    ("NVIDIA H100 NVL", "H100-NVL", "9.0", "nvlink"),
    ("NVIDIA H100 PCIe", "H100-PCIE", "9.0", "pcie"),
    ("NVIDIA GH200 480GB", "GH200", "9.0", "single"),
    ("NVIDIA A100-SXM4-80GB", "A100-80", "8.0", "nvswitch"),
    ("NVIDIA A100-SXM4-40GB", "A100-40", "8.0", "nvswitch"),
    ("NVIDIA A30", "A30", "8.0", "nvlink"),
    ("NVIDIA A40", "A40", "8.6", "nvlink"),
    ("NVIDIA A10", "A10", "8.6", "pcie"),
    ("NVIDIA A10G", "A10G", "8.6", "pcie"),
    ("NVIDIA L40S", "L40S", "8.9", "pcie"),
    ("NVIDIA L40", "L40", "8.9", "pcie"),
    ("NVIDIA L20", "L20", "8.9", "pcie"),
    ("NVIDIA L4", "L4", "8.9", "pcie"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTXPRO6000BW", "12.0", "pcie"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTXPRO6000BW", "12.0", "pcie"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX6000ADA", "8.9", "pcie"),
    ("NVIDIA GeForce RTX 5090", "RTX5090", "12.0", "pcie"),
    ("NVIDIA GeForce RTX 4090", "RTX4090", "8.9", "pcie"),
    ("Tesla T4", "T4", "7.5", "pcie"),
]


@pytest.mark.parametrize(("name", "key", "cc", "interconnect"), NAMES)
def test_catalogue_names(name: str, key: str, cc: str, interconnect: str) -> None:
    sku = lookup_gpu(name)
    assert sku is not None and sku.key == key
    assert (sku.compute_capability, sku.interconnect) == (cc, interconnect)


def test_every_entry_is_complete() -> None:
    keys = [s.key for s in GPU_CATALOGUE]
    assert len(keys) == len(set(keys))
    for sku in GPU_CATALOGUE:
        assert sku.memory_mib > 1024 and sku.bandwidth_gbs > 0, sku.key
        fabrics = ("infinity_fabric",) if sku.vendor == "amd" else ("nvswitch", "nvlink")
        assert sku.interconnect in (*fabrics, "pcie", "single"), sku.key
        assert (sku.nvlink_domain > 1) == (sku.interconnect in fabrics), sku.key
        assert (sku.vendor == "amd") == bool(sku.gfx), sku.key


def test_rtx_5090_with_its_memory_plans_from_the_catalogue() -> None:
    """The issue's case: `--gpu "NVIDIA GeForce RTX 5090" --gpu-memory-mib 32607` used to ask for the compute
    capability; the catalogue knows it now."""
    result = plan({"gpu_name": "NVIDIA GeForce RTX 5090", "gpu_count": 1, "gpu_memory_mib": 32607},
                  model("llama-3.1-8b"))
    assert result["gpu"]["compute_capability"] == "12.0"
    assert not any("not in the planner's catalogue" in w for w in result["warnings"])


def test_unknown_name_with_memory_and_cc_in_the_facts_is_planned_with_a_note() -> None:
    gpu_facts = copy.deepcopy(facts("h200x2"))
    for gpu in gpu_facts["gpus"]:
        gpu["name"] = "NVIDIA Hypothetical X1"
    gpu_facts["gpu_name"] = "NVIDIA Hypothetical X1"
    result = plan(gpu_facts, model("llama-3.1-8b"))
    note = next(w for w in result["warnings"] if "not in the planner's catalogue" in w)
    assert "NVIDIA Hypothetical X1" in note and "compute capability 9.0" in note
    known = plan(facts("h200x2"), model("llama-3.1-8b"))
    assert result["engine_args"] == known["engine_args"]  # the facts carry everything the plan needs
    gpu = gpu_from_facts(gpu_facts)
    assert gpu is not None and gpu.catalogued is False


def test_unknown_name_without_cc_is_still_refused() -> None:
    with pytest.raises(PlanError, match="unknown GPU 'Acme 9000': give --compute-capability"):
        plan({"gpu_name": "Acme 9000", "gpu_count": 1, "gpu_memory_mib": 40000}, model("tiny-llama"))
    shorthand = plan({"gpu_name": "Acme 9000", "gpu_count": 1, "gpu_memory_mib": 40000, "compute_capability": "9.0"},
                     model("tiny-llama"))
    assert any("'Acme 9000' is not in the planner's catalogue" in w for w in shorthand["warnings"])


def test_gb10_uses_the_catalogue_memory_and_warns_about_the_shared_pool() -> None:
    """nvidia-smi prints [N/A] for GB10's memory: the facts carry none, the catalogue's CUDA figure is used."""
    result = plan({"gpu_name": "NVIDIA GB10", "gpu_count": 1}, model("llama-3.1-8b"))
    assert result["gpu"]["compute_capability"] == "12.1"
    assert result["gpu"]["memory_mib"] > 120_000
    assert any("shares its memory with the host" in w for w in result["warnings"])


def test_shorthand_takes_the_catalogue_interconnect() -> None:
    assert plan({"gpu_name": "NVIDIA B200", "gpu_count": 8}, model("tiny-llama"))["gpu"]["interconnect"] == "nvswitch"
    assert plan({"gpu_name": "NVIDIA L40S", "gpu_count": 4}, model("tiny-llama"))["gpu"]["interconnect"] == "pcie"
    assert plan({"gpu_name": "NVIDIA H100 NVL", "gpu_count": 2}, model("tiny-llama"))["gpu"]["interconnect"] == "nvlink"
