"""AMD Instinct GPUs (issue 33 item 4): planned for vLLM's ROCm platform, refused by preflight for deploy.

Figures come from public evidence, never from the code under test:

* ROCm docs "AMD GPU specifications" (https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html; source
  github.com/ROCm/rocm-docs docs/reference/gpu-specs.rst @ 2b48ffc7c7df6af2687bf2c54062d939ee503c60): LLVM target,
  VRAM (GiB) and GFXIP major/minor per Instinct model.
* An MI300X rocminfo capture: GPU pool "Size: 201310208(0xbffc000) KB" (= 196592 MiB); rocm-smi names the GPU
  "AMD Instinct MI300X" (github.com/thamada/nvidia-smi gls/MI300X_x4_smi.py @ b09ef139265ffc7e3c78006346981de8e4d70499).
* vLLM's own source (platforms/rocm.py), read from the release tree when it is on disk.

No public vLLM start-up log of an MI300X with "GPU KV cache size" and "Model loading took" was found for a
checkpoint in the fixtures, so the KV figures of an AMD plan are tested for behaviour only.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.hardware import (
    ROCM_QUANTIZATION,
    gfx_capability,
    lookup_gpu,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.inputs import gpu_from_facts
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.amd import check_amd_host

from .planner_data import facts, model

ROOT = Path(__file__).resolve().parents[3]
SRC = Path(os.environ.get("VLLM_FLEET_VLLM_SRC", ROOT / ".cache" / "vllm-src"))
CHECKPOINTS = ROOT / "tests" / "fixtures" / "planner" / "checkpoints"

# ROCm docs Instinct table: (name as rocm-smi prints it, LLVM target, VRAM GiB per device, GFXIP major.minor).
# MI250X: the docs list 128 GiB for the module, "220 (110 per GCD)" CUs; each GCD is its own ROCm device (64 GiB).
DOCS = [
    ("AMD Instinct MI355X", "gfx950", 288, "9.5"),
    ("AMD Instinct MI325X", "gfx942", 256, "9.4"),
    ("AMD Instinct MI300X", "gfx942", 192, "9.4"),
    ("AMD Instinct MI250X", "gfx90a", 128 // 2, "9.0"),
]
MI300X_ROCMINFO_MIB = 201310208 // 1024


@pytest.mark.parametrize(("name", "gfx", "gib", "gfxip"), DOCS)
def test_catalogue_entries_match_the_rocm_docs(name: str, gfx: str, gib: int, gfxip: str) -> None:
    sku = lookup_gpu(name)
    assert sku is not None and sku.vendor == "amd" and sku.gfx == gfx
    assert sku.compute_capability == gfxip and gfx_capability(gfx) == gfxip
    assert sku.interconnect == "infinity_fabric"
    expected = MI300X_ROCMINFO_MIB if gfx == "gfx942" and gib == 192 else gib * 1024
    assert sku.memory_mib == expected
    assert abs(sku.memory_mib - gib * 1024) <= 16  # the capture is 16 MiB under the nominal 192 GiB


@pytest.mark.parametrize("name", ["AMD_Instinct_MI300X", "MI300X", "amd instinct mi300x"])
def test_vllm_and_bare_spellings_find_mi300x(name: str) -> None:
    sku = lookup_gpu(name)
    assert sku is not None and sku.key == "MI300X"


def test_mi300a_is_not_taken_for_mi300x() -> None:
    assert lookup_gpu("AMD Instinct MI300A") is None


def test_gfx_capability_follows_vllms_rule() -> None:
    # platforms/rocm.py _capability_from_gcn_arch docstring: gfx90a -> (9, 0), gfx942 -> (9, 4), gfx950 -> (9, 5),
    # gfx1100 -> (11, 0), gfx1200 -> (12, 0).
    assert [gfx_capability(g) for g in ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1200")] == \
        ["9.0", "9.4", "9.5", "11.0", "12.0"]
    with pytest.raises(ValueError):
        gfx_capability("sm_90")


def test_the_cli_shorthand_plans_eight_mi300x() -> None:
    result = plan({"gpu_name": "AMD Instinct MI300X", "gpu_count": 8}, model("llama-3.1-70b"))
    assert result["gpu"]["compute_capability"] == "9.4" and result["gpu"]["interconnect"] == "infinity_fabric"
    assert result["parallel"]["gpus_per_replica"] * result["parallel"]["replicas"] <= 8
    # ROCm's figure is used as is (no NVIDIA driver reservation subtracted).
    assert result["memory_gib"]["total"] == pytest.approx(MI300X_ROCMINFO_MIB / 1024, abs=0.01)
    assert any("ROCm" in w and "NVIDIA" in w for w in result["warnings"])
    assert "HIP context" in result["reasons"]["gpu-memory-utilization"]
    assert "ROCM_ATTN" in result["reasons"]["block-size"]


def test_facts_with_vendor_and_gfx_plan_an_uncatalogued_amd_gpu() -> None:
    gpu_facts = copy.deepcopy(facts("h200x2"))
    for gpu in gpu_facts["gpus"]:
        gpu.update(name="AMD Instinct MI308X", vendor="amd", gfx="gfx942", compute_capability=None,
                   memory_total_mib=196592, memory_free_mib=None, memory_used_mib=0)
    gpu_facts["gpu_name"] = "AMD Instinct MI308X"
    gpu = gpu_from_facts(gpu_facts)
    assert gpu is not None and gpu.amd and gpu.gfx == "gfx942" and gpu.compute_capability == "9.4"
    assert gpu.memory_mib == 196592 and not gpu.catalogued


def test_a_bad_vendor_or_gfx_is_refused_with_what_to_give() -> None:
    with pytest.raises(PlanError, match="vendor: amd"):
        gpu_from_facts({"gpu_name": "AMD Instinct MI300X", "gpu_count": 1, "vendor": "intel"})
    with pytest.raises(PlanError, match="gfx942"):
        gpu_from_facts({"gpu_name": "AMD Instinct MI999", "gpu_count": 1, "vendor": "amd", "gfx": "cdna3",
                        "gpu_memory_mib": 196592})


def test_fp8_checkpoint_on_gfx942_says_e4m3fnuz_and_on_gfx950_e4m3fn() -> None:
    mi300 = plan({"gpu_name": "AMD Instinct MI300X", "gpu_count": 8}, model("llama-3.1-405b-fp8"))
    assert "float8_e4m3fnuz" in mi300["reasons"]["quantization"]
    mi355 = plan({"gpu_name": "AMD Instinct MI355X", "gpu_count": 8}, model("llama-3.1-405b-fp8"))
    assert "float8_e4m3fn" in mi355["reasons"]["quantization"]
    assert "fnuz" not in mi355["reasons"]["quantization"]


def test_fp8_kv_cache_names_the_rocm_backends() -> None:
    result = plan({"gpu_name": "AMD Instinct MI300X", "gpu_count": 8}, model("llama-3.1-70b"),
                  engine_args={"kv-cache-dtype": "fp8"})
    assert "ROCM_ATTN" in result["reasons"]["kv-cache-dtype"] and "e4m3fnuz" in result["reasons"]["kv-cache-dtype"]


def test_a_method_rocm_does_not_list_is_refused() -> None:
    # bitsandbytes/gguf are plugins everywhere; experts_int8 is a vLLM core method missing from ROCm's list.
    assert "experts_int8" not in ROCM_QUANTIZATION
    with pytest.raises(PlanError, match="not supported by vLLM on ROCm"):
        plan({"gpu_name": "AMD Instinct MI300X", "gpu_count": 8}, model("qwen3-30b-a3b"),
             engine_args={"quantization": "experts_int8"})


def test_rocm_quantization_list_is_vllms() -> None:
    """hardware.ROCM_QUANTIZATION is RocmPlatform.supported_quantization of every release on disk."""
    roots = [SRC / v for v in ("0.32.0", "0.33.0") if (SRC / v / "vllm" / "platforms" / "rocm.py").is_file()]
    if not roots:
        if os.environ.get("VLLM_FLEET_REQUIRE_VLLM_SRC") == "1":
            pytest.fail(f"vLLM sources not under {SRC}")
        pytest.skip(f"vLLM sources not under {SRC}")
    for root in roots:
        text = (root / "vllm" / "platforms" / "rocm.py").read_text()
        block = re.search(r"supported_quantization: list\[str\] = (\[.*?\])", text, re.S)
        assert block is not None
        assert tuple(ast.literal_eval(block.group(1))) == ROCM_QUANTIZATION, root


def test_nvidia_plans_are_unchanged_by_the_vendor_field() -> None:
    gpu = gpu_from_facts(facts("h200x2"))
    assert gpu is not None and gpu.vendor == "nvidia" and not gpu.amd and gpu.gfx == ""


# --- preflight: one line for an AMD host ---------------------------------------------------------------------


def test_preflight_refuses_an_amd_host_in_one_line() -> None:
    amd_facts = copy.deepcopy(facts("h200x2"))
    for gpu in amd_facts["gpus"]:
        gpu.update(name="AMD Instinct MI300X", vendor="amd", gfx="gfx942")
    errors = check_amd_host("mi300-01", amd_facts)
    assert len(errors) == 1 and "\n" not in errors[0]
    assert errors[0].startswith("mi300-01: AMD Instinct MI300X (gfx942) is AMD")
    assert "NVIDIA hosts only" in errors[0] and "vllm-fleet plan --facts" in errors[0]


def test_preflight_passes_nvidia_and_cpu_hosts() -> None:
    assert check_amd_host("h200", facts("h200x2")) == []
    cpu = json.loads((ROOT / "tests" / "fixtures" / "planner" / "cpu_host.json").read_text())
    assert check_amd_host("cpu", cpu) == []  # an AMD EPYC CPU is not an AMD GPU
