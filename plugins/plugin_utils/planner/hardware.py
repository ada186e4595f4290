"""Hardware knowledge as data: GPU catalogue, attention backends, quantization floors.

Pure data and lookups (standard library only, no I/O). Every figure names where it comes from:
NVIDIA datasheets and real ``nvidia-smi`` captures for memory; vLLM 0.32 source for the backend and
quantization tables (see ``docs/sizing.md``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIB = 1024 * 1024
GIB = 1024 * MIB


@dataclass(frozen=True)
class GpuSku:
    """One accelerator model as nvidia-smi names it."""

    key: str
    pattern: str  # regular expression matched (case-insensitive) against the nvidia-smi name
    memory_mib: int  # memory.total as nvidia-smi reports it (what vLLM sees as total)
    compute_capability: str
    nvlink_domain: int  # GPUs one NVLink/NVSwitch domain spans on the usual board (1 = PCIe only)
    family: str


# memory_mib: the value nvidia-smi prints (real captures where we have them: H200 143771 MiB from
# tests/fixtures/gpu/h200x2; the others from published nvidia-smi output of those SKUs).
GPU_CATALOGUE: tuple[GpuSku, ...] = (
    GpuSku("B200", r"\bB200\b", 183359, "10.0", 8, "blackwell"),
    GpuSku("H200", r"\bH200\b", 143771, "9.0", 8, "hopper"),
    GpuSku("H100-NVL", r"\bH100 NVL\b", 95830, "9.0", 2, "hopper"),
    GpuSku("H100-PCIE", r"\bH100 PCIe\b", 81559, "9.0", 1, "hopper"),
    GpuSku("H100-SXM", r"\bH100\b", 81559, "9.0", 8, "hopper"),
    GpuSku("H20", r"\bH20\b", 97871, "9.0", 8, "hopper"),
    GpuSku("GH200", r"\bGH200\b", 97871, "9.0", 1, "hopper"),
    GpuSku("A100-80", r"\bA100\b.*80\s*GB", 81920, "8.0", 8, "ampere"),
    GpuSku("A100-40", r"\bA100\b", 40960, "8.0", 8, "ampere"),
    GpuSku("A800-80", r"\bA800\b", 81920, "8.0", 8, "ampere"),
    GpuSku("L40S", r"\bL40S\b", 46068, "8.9", 1, "ada"),
    GpuSku("L40", r"\bL40\b", 46068, "8.9", 1, "ada"),
    GpuSku("L4", r"\bL4\b", 23034, "8.9", 1, "ada"),
    GpuSku("A10G", r"\bA10G\b", 23028, "8.6", 1, "ampere"),
    GpuSku("A10", r"\bA10\b", 23028, "8.6", 1, "ampere"),
    GpuSku("A40", r"\bA40\b", 46068, "8.6", 2, "ampere"),
    GpuSku("RTX6000ADA", r"RTX 6000 Ada", 49140, "8.9", 1, "ada"),
    GpuSku("RTX4090", r"RTX 4090", 24564, "8.9", 1, "ada"),
    GpuSku("RTX4080", r"RTX 4080", 16376, "8.9", 1, "ada"),
    GpuSku("RTX3090", r"RTX 3090", 24576, "8.6", 2, "ampere"),
    GpuSku("T4", r"\bT4\b", 15360, "7.5", 1, "turing"),
    GpuSku("V100-32", r"\bV100\b.*32\s*GB", 32768, "7.0", 8, "volta"),
    GpuSku("V100", r"\bV100\b", 16384, "7.0", 8, "volta"),
    GpuSku("GTX1080", r"GTX 1080", 8192, "6.1", 1, "pascal"),
)


def lookup_gpu(name: str) -> GpuSku | None:
    """Return the catalogue entry whose pattern matches an nvidia-smi GPU name, or None."""
    for sku in GPU_CATALOGUE:
        if re.search(sku.pattern, name, flags=re.IGNORECASE):
            return sku
    return None


def cc_tuple(cc: str) -> tuple[int, int]:
    """'9.0' -> (9, 0)."""
    major, _, minor = str(cc).partition(".")
    return int(major), int(minor or 0)


def cc_int(cc: str) -> int:
    """'8.9' -> 89, the form vLLM's get_min_capability() uses."""
    major, minor = cc_tuple(cc)
    return major * 10 + minor


# --- Measured per-GPU memory outside vLLM's budget ---------------------------------------------
# tests/fixtures/gpu/h200x2/nontorch_memory.json (driver 580, torch 2.11+cu130, NCCL 2.28.9):
# CUDA context 528.8 MiB; NCCL communicator for 2 ranks 1643 - 693 - 4 = ~946 MiB per GPU.
CUDA_CONTEXT_MIB = 530
NCCL_COMMUNICATOR_MIB = 950

# --- Attention backends (vLLM 0.32 platforms/cuda.py priority; v1/attention/backends/*) ----------


def attention_backend(cc: str, mla: bool) -> str:
    """The backend vLLM 0.32 picks first on this compute capability (platforms/cuda.py:83-179)."""
    major, _ = cc_tuple(cc)
    if mla:
        if major == 9:
            return "FLASH_ATTN_MLA"
        if major == 10:
            return "FLASHINFER_MLA"
        return "TRITON_MLA"
    if major == 10:
        return "FLASHINFER"
    if cc_int(cc) >= 80:
        return "FLASH_ATTN"
    return "TRITON_ATTN"  # T4 (sm75): the only choice


def default_block_size(cc: str | None, mla: bool) -> int:
    """Block size vLLM uses when --block-size is unset (the backend's preferred kernel block).

    CacheConfig.DEFAULT_BLOCK_SIZE is 16; FlashInfer-MLA on Blackwell prefers 64; CPU uses 128
    (platforms/cpu.py:292-300).
    """
    if cc is None:
        return 128
    if mla and cc_tuple(cc)[0] == 10:
        return 64
    return 16


def fp8_kv_backends(cc: str, mla: bool) -> list[str]:
    """Attention backends that can run an fp8 KV cache on this GPU (vLLM 0.32, vllm-facts B3)."""
    n = cc_int(cc)
    major = n // 10
    found: list[str] = []
    if mla:
        if major in (9, 10):
            found.append("FLASH_ATTN_MLA" if major == 9 else "FLASHINFER_MLA")
        return found
    if major in (9, 10):
        found.append("FLASH_ATTN")  # FA3 on Hopper, FA4 on Blackwell
    if 80 <= n <= 121:
        found.append("FLASHINFER")
    if n >= 89:
        found.append("TRITON_ATTN")
    return found


# --- Quantization floors: get_min_capability() in vLLM 0.32 (vllm-facts B3) ----------------------
QUANT_MIN_CC: dict[str, int] = {
    "fp8": 75,
    "fp8_per_tensor": 75,
    "fp8_per_block": 75,
    "fp8_per_channel": 75,
    "mxfp8": 75,
    "awq": 75,
    "awq_marlin": 75,
    "auto_awq": 75,
    "gptq": 75,  # 60 in the method, 75 by the platform floor
    "gptq_marlin": 75,
    "auto_gptq": 75,
    "compressed-tensors": 75,
    "modelopt": 80,
    "modelopt_fp4": 75,
    "modelopt_mxfp8": 80,
    "mxfp4": 80,
    "gpt_oss_mxfp4": 80,
    "experts_int8": 80,
    "moe_wna16": 75,
    "torchao": 75,
    "fbgemm_fp8": 80,
}

# Quantization methods that left vLLM core (plugins now).
QUANT_PLUGINS: dict[str, str] = {
    "bitsandbytes": "vllm-bnb-plugin",
    "gguf": "vllm-gguf-plugin",
}

# compressed-tensors per-scheme floors (vllm-facts B3).
COMPRESSED_TENSORS_MIN_CC: dict[str, int] = {
    "w8a8-fp8": 89,
    "w4a8-fp8": 90,
    "wna16": 75,
    "w8a8-int8": 75,
    "nvfp4": 75,
    "mxfp4": 80,
}

MIN_SUPPORTED_CC = 75  # vLLM docs: compute capability 7.5 or higher; CUDA 13 wheels drop sm < 75
