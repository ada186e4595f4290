"""Hardware knowledge as data: GPU catalogue, attention backends, quantization floors.

Pure data and lookups (standard library only, no I/O). Every figure names where it comes from:
NVIDIA datasheets and real ``nvidia-smi`` captures for memory; vLLM 0.32 source for the backend and
quantization tables, unchanged in 0.33 (every ``get_min_capability`` returns the same; the CUDA backend
priority only gained a sparse-MLA FA4 entry) (see ``docs/sizing.md``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIB = 1024 * 1024
GIB = 1024 * MIB


@dataclass(frozen=True)
class GpuSku:
    """One accelerator model as nvidia-smi names it.

    ``interconnect`` is the class of the usual board: ``nvswitch`` (every GPU of the host on one NVSwitch fabric),
    ``nvlink`` (NVLink bridges or a mesh between ``nvlink_domain`` GPUs), ``pcie`` (no NVLink), or ``single`` (one
    GPU per host or superchip; more GPUs meet over the network); AMD Instinct entries say ``infinity_fabric`` (xGMI
    links; ``nvlink_domain`` is then the GPUs one Infinity Fabric hop apart).
    """

    key: str
    pattern: str  # regular expression matched (case-insensitive) against the nvidia-smi name
    memory_mib: int  # memory.total as nvidia-smi reports it (what vLLM sees as total)
    compute_capability: str
    nvlink_domain: int  # GPUs one NVLink/NVSwitch domain spans on the usual board (1 = PCIe only)
    family: str
    bandwidth_gbs: int = 0  # peak memory bandwidth, GB/s (datasheet)
    interconnect: str = "pcie"
    shares_host_memory: bool = False  # unified memory: the host OS and vLLM draw on the same pool
    vendor: str = "nvidia"  # "nvidia" | "amd" (AMD Instinct: planned only; provisioning, image and deploy are NVIDIA)
    gfx: str = ""  # AMD: the LLVM target (gfx90a / gfx942 / gfx950); compute_capability is what vLLM derives from it
    #: NVIDIA's product line: "datacenter", "workstation" (RTX PRO / RTX Ada, DGX Spark) or "consumer" (GeForce).
    #: CUDA forward compatibility runs on data center GPUs only (image/forward_compat.py).
    segment: str = "datacenter"


# memory_mib: the value nvidia-smi prints. Real captures where we have them (H200 143771 MiB from
# tests/fixtures/gpu/h200x2); the others from published `nvidia-smi --query-gpu=name,memory.total` output of
# those SKUs (B300 "NVIDIA B300 SXM6 AC" 275040, GB200 189471, GB300 284208, RTX 5090 32607, RTX 4090 24564,
# RTX PRO 6000 Blackwell 97887, H800 81559, L20 46068, A30 24576 MiB; modal-labs/modal-client PR #2797 lists
# H100 81559, A100 81920/40960, A10 23028, L40S 46068, L4 23034, T4 15360). GB10: nvidia-smi prints [N/A]
# (unified memory, docs.nvidia.com/dgx/dgx-spark/known-issues.html); the figure is what CUDA reports, 121.69 GiB.
# bandwidth_gbs and compute capability: NVIDIA datasheets and developer.nvidia.com/cuda-gpus (B200/GB200 8 TB/s,
# B300/GB300 8 TB/s, H200 4.8 TB/s, H100 SXM 3.35 TB/s, H100 NVL 3.9 TB/s, H100 PCIe 2 TB/s, H20 4.0 TB/s,
# H800 3.35 TB/s, A100 80GB 2.0 TB/s, A100 40GB 1.6 TB/s, A30 933 GB/s, A40 696 GB/s, A10/A10G 600 GB/s, L40S/L40/L20
# 864 GB/s, L4 300 GB/s, T4 320 GB/s, RTX PRO 6000 Blackwell 1792 GB/s, RTX 6000 Ada 960 GB/s, GeForce RTX 5090
# 1792 GB/s, 4090 1008 GB/s, GB10 273 GB/s LPDDR5X). Order matters only where one pattern contains another
# (H100 NVL / PCIe before H100, H200 NVL before H200, A100 80GB before A100).
GPU_CATALOGUE: tuple[GpuSku, ...] = (
    # Blackwell (cc 10.x data center, 12.x workstation/consumer)
    GpuSku("B200", r"\bB200\b", 183359, "10.0", 8, "blackwell", 8000, "nvswitch"),
    GpuSku("B300", r"\bB300\b", 275040, "10.3", 8, "blackwell", 8000, "nvswitch"),
    GpuSku("GB200", r"\bGB200\b", 189471, "10.0", 4, "blackwell", 8000, "nvswitch"),  # NVL72: 4 GPUs a tray
    GpuSku("GB300", r"\bGB300\b", 284208, "10.3", 4, "blackwell", 8000, "nvswitch"),
    GpuSku("GB10", r"\bGB10\b", 124610, "12.1", 1, "blackwell", 273, "single", shares_host_memory=True, segment="workstation"),
    GpuSku("RTXPRO6000BW", r"RTX PRO 6000 Blackwell", 97887, "12.0", 1, "blackwell", 1792, "pcie", segment="workstation"),
    GpuSku("RTX5090", r"RTX 5090", 32607, "12.0", 1, "blackwell", 1792, "pcie", segment="consumer"),
    # Hopper (cc 9.0)
    GpuSku("H200-NVL", r"\bH200 NVL\b", 143771, "9.0", 4, "hopper", 4800, "nvlink"),
    GpuSku("H200", r"\bH200\b", 143771, "9.0", 8, "hopper", 4800, "nvswitch"),
    GpuSku("H100-NVL", r"\bH100 NVL\b", 95830, "9.0", 2, "hopper", 3900, "nvlink"),
    GpuSku("H100-PCIE", r"\bH100 PCIe\b", 81559, "9.0", 1, "hopper", 2000, "pcie"),
    GpuSku("H100-SXM", r"\bH100\b", 81559, "9.0", 8, "hopper", 3350, "nvswitch"),
    GpuSku("H800", r"\bH800\b", 81559, "9.0", 8, "hopper", 3350, "nvswitch"),
    GpuSku("H20", r"\bH20\b", 97871, "9.0", 8, "hopper", 4000, "nvswitch"),
    GpuSku("GH200", r"\bGH200\b", 97871, "9.0", 1, "hopper", 4000, "single"),
    # Ampere (cc 8.0 / 8.6)
    GpuSku("A100-80", r"\bA100\b.*80\s*GB", 81920, "8.0", 8, "ampere", 2039, "nvswitch"),
    GpuSku("A100-40", r"\bA100\b", 40960, "8.0", 8, "ampere", 1555, "nvswitch"),
    GpuSku("A800-80", r"\bA800\b", 81920, "8.0", 8, "ampere", 2039, "nvswitch"),
    GpuSku("A30", r"\bA30\b", 24576, "8.0", 2, "ampere", 933, "nvlink"),
    GpuSku("A40", r"\bA40\b", 46068, "8.6", 2, "ampere", 696, "nvlink"),
    GpuSku("A10G", r"\bA10G\b", 23028, "8.6", 1, "ampere", 600, "pcie"),
    GpuSku("A10", r"\bA10\b", 23028, "8.6", 1, "ampere", 600, "pcie"),
    GpuSku("RTX3090", r"RTX 3090", 24576, "8.6", 2, "ampere", 936, "nvlink", segment="consumer"),
    # Ada Lovelace (cc 8.9)
    GpuSku("L40S", r"\bL40S\b", 46068, "8.9", 1, "ada", 864, "pcie"),
    GpuSku("L40", r"\bL40\b", 46068, "8.9", 1, "ada", 864, "pcie"),
    GpuSku("L20", r"\bL20\b", 46068, "8.9", 1, "ada", 864, "pcie"),
    GpuSku("L4", r"\bL4\b", 23034, "8.9", 1, "ada", 300, "pcie"),
    GpuSku("RTX6000ADA", r"RTX 6000 Ada", 49140, "8.9", 1, "ada", 960, "pcie", segment="workstation"),
    GpuSku("RTX4090", r"RTX 4090", 24564, "8.9", 1, "ada", 1008, "pcie", segment="consumer"),
    GpuSku("RTX4080", r"RTX 4080", 16376, "8.9", 1, "ada", 717, "pcie", segment="consumer"),
    # Older (below vLLM's cc 7.5 floor except T4: planned only for old vLLM releases)
    GpuSku("T4", r"\bT4\b", 15360, "7.5", 1, "turing", 320, "pcie"),
    GpuSku("V100-32", r"\bV100\b.*32\s*GB", 32768, "7.0", 8, "volta", 900, "nvlink"),
    GpuSku("V100", r"\bV100\b", 16384, "7.0", 8, "volta", 900, "nvlink"),
    GpuSku("GTX1080", r"GTX 1080", 8192, "6.1", 1, "pascal", 320, "pcie", segment="consumer"),
    # AMD Instinct (planning only; see AMD_CATALOGUE_SOURCES). The patterns allow vLLM's "AMD_Instinct_MI300X" (no \b at _).
    # compute_capability: vLLM's ROCm platform derives it
    # from the gfx name (platforms/rocm.py _capability_from_gcn_arch, rules.VERIFIED "rocm:gfx_capability").
    GpuSku("MI355X", r"(?<![A-Z0-9])MI355X?(?![A-Z0-9])", 294912, "9.5", 8, "cdna4", 8000, "infinity_fabric",
           vendor="amd", gfx="gfx950"),
    GpuSku("MI325X", r"(?<![A-Z0-9])MI325X?(?![A-Z0-9])", 262144, "9.4", 8, "cdna3", 6000, "infinity_fabric",
           vendor="amd", gfx="gfx942"),
    GpuSku("MI300X", r"(?<![A-Z0-9])MI300X(?![A-Z0-9])", 196592, "9.4", 8, "cdna3", 5300, "infinity_fabric",
           vendor="amd", gfx="gfx942"),
    GpuSku("MI250X", r"(?<![A-Z0-9])MI250X?(?![A-Z0-9])", 65536, "9.0", 2, "cdna2", 1638, "infinity_fabric",
           vendor="amd", gfx="gfx90a"),
)

# Where each AMD entry's figures come from (memory per GPU as ROCm sees it, gfx target, bandwidth):
# - VRAM and LLVM target: ROCm docs "AMD GPU specifications", Instinct table
#   https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html (source: github.com/ROCm/rocm-docs
#   docs/reference/gpu-specs.rst @ 2b48ffc7c7df6af2687bf2c54062d939ee503c60): MI355X CDNA4 gfx950 288 GiB
#   (GFXIP 9.5); MI325X CDNA3 gfx942 256 GiB (9.4); MI300X CDNA3 gfx942 192 GiB (9.4); MI250X CDNA2 gfx90a 128 GiB
#   "220 (110 per GCD)" (9.0). An MI250X module is two GCDs, each its own ROCm device: 64 GiB and a 2-GCD package
#   (nvlink_domain 2: the in-package Infinity Fabric pair; the 8 GCDs of a node are not all one hop apart).
# - MI300X 196592 MiB is what ROCm reports, not the nominal 196608: rocminfo's GPU pool "Size: 201310208(0xbffc000)
#   KB" (public MI300X captures, e.g. ROCm/legacy-rocm-build issue #4750; thamada/nvidia-smi gls/) and rocm-smi
#   names it "AMD Instinct MI300X", device ID 0x74a1 (github.com/thamada/nvidia-smi gls/MI300X_x4_smi.py @
#   b09ef139265ffc7e3c78006346981de8e4d70499). No public capture for the others: their nominal GiB x 1024.
# - Names: rocm-smi / amd-smi print "AMD Instinct MI300X"; vLLM's get_device_name maps device IDs to
#   "AMD_Instinct_MI300X" / "AMD_Instinct_MI325X" (platforms/rocm.py _ROCM_DEVICE_ID_NAME_MAP); the patterns match
#   both spellings and the bare model ("MI300X").
# - Bandwidth (GB/s, AMD product pages): MI355X 8 TB/s, MI325X 6 TB/s, MI300X 5.3 TB/s, MI250X 3.2 TB/s per module
#   (1638 per GCD). Interconnect: AMD Infinity Fabric (xGMI) links, 8 OAM GPUs fully connected on MI300X/MI325X/
#   MI355X platforms (vLLM checks one-hop XGMI in RocmPlatform.is_fully_connected).
AMD_CATALOGUE_SOURCES = "https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html"


def gfx_capability(gfx: str) -> str:
    """vLLM's compute capability for a gfx target, as ``_capability_from_gcn_arch`` derives it: 'gfx942' -> '9.4'.

    gfx9xx: major = first digit, minor = second (gfx90a -> 9.0); gfx1xxx: two-digit major. Raises ValueError on a
    name that is not gfx followed by 2-4 digits.
    """
    m = re.match(r"gfx(\d+)", str(gfx).strip().lower())
    if not m or not 2 <= len(m.group(1)) <= 4:
        raise ValueError(f"'{gfx}' is not a gfx target like gfx942")
    digits = m.group(1)
    if len(digits) == 4:
        return f"{int(digits[:2])}.{digits[2]}"
    return f"{digits[0]}.{digits[1]}"


# --- ROCm (vLLM 0.32/0.33 platforms/rocm.py; rules.VERIFIED "rocm:*") --------------------------------------------
# RocmPlatform.supported_quantization, verbatim (identical in 0.32.0 and 0.33.0); vLLM's verify_quantization refuses
# any other method on ROCm. The planner's "auto-round" is vLLM's "inc" method.
ROCM_QUANTIZATION: tuple[str, ...] = (
    "awq", "auto_awq", "awq_marlin", "gptq", "auto_gptq", "fp8", "deepseek_v4_fp8", "compressed-tensors",
    "fbgemm_fp8", "inc", "quark", "mxfp4", "mxfp8", "torchao", "modelopt", "modelopt_fp4", "modelopt_mxfp8",
    "modelopt_mixed", "fp8_per_tensor", "fp8_per_block", "fp8_per_channel", "online", "gpt_oss_mxfp4",
)
ROCM_QUANT_ALIASES: dict[str, str] = {"auto-round": "inc"}


def rocm_supports_quantization(method: str) -> bool:
    """Whether vLLM's ROCm platform accepts this quantization method (planner name or vLLM name)."""
    return ROCM_QUANT_ALIASES.get(method, method) in ROCM_QUANTIZATION


def rocm_fp8_dtype(gfx: str) -> str:
    """The FP8 type vLLM computes in on this gfx: e4m3fnuz on gfx94x (is_fp8_fnuz), OCP e4m3fn elsewhere."""
    return "float8_e4m3fnuz" if "gfx94" in gfx else "float8_e4m3fn"


def rocm_attention_backend(mla: bool) -> str:
    """The backend vLLM's ROCm platform tries first with AITER off (VLLM_ROCM_USE_AITER defaults to False)."""
    return "TRITON_MLA" if mla else "ROCM_ATTN"


def rocm_fp8_kv_backends(mla: bool, kv_dtype: str) -> list[str]:
    """ROCm backends whose supported_kv_cache_dtypes hold this fp8 KV dtype (AITER off): ROCM_ATTN and TRITON_ATTN
    take fp8, fp8_e4m3 and fp8_e5m2; TRITON_MLA takes fp8 and fp8_e4m3."""
    if mla:
        return [] if kv_dtype == "fp8_e5m2" else ["TRITON_MLA"]
    return ["ROCM_ATTN", "TRITON_ATTN"]


def lookup_gpu(name: str) -> GpuSku | None:
    """Return the catalogue entry whose pattern matches an nvidia-smi GPU name, or None."""
    for sku in GPU_CATALOGUE:
        if re.search(sku.pattern, name, flags=re.IGNORECASE):
            return sku
    return None


@dataclass(frozen=True)
class GpuRates:
    """Peak rates of one catalogue GPU for the performance model (perf.py): datasheet figures, dense (no sparsity).

    ``link_gbs`` is the per-GPU GPU-to-GPU bandwidth one way (NVLink / NVSwitch: half the bidirectional figure the
    datasheets print; PCIe-only boards: the PCIe x16 one-way rate). 0 for a rate the GPU lacks (FP8 before Ada).
    """

    key: str
    bandwidth_gbs: int
    bf16_tflops: float
    fp8_tflops: float
    fp4_tflops: float
    link_gbs: float


# Dense tensor TFLOP/s (the datasheets print "with sparsity"; these are half of those) and NVLink per GPU:
# NVIDIA H100/H200 datasheets (H100 SXM / H200 SXM: BF16 1979 sparse -> 989, FP8 3958 -> 1979, NVLink 900 GB/s;
# H100 NVL: BF16 1671 -> 835, FP8 3341 -> 1671, NVLink bridge 600 GB/s; H100 PCIe: BF16 1513 -> 756, FP8 3026 ->
# 1513); H800: same tensor rates as H100 SXM, NVLink 400 GB/s; H20: BF16 148, FP8 296, NVLink 900 GB/s (NVIDIA
# H20 product brief); HGX B200: BF16 2.25 PF, FP8 4.5 PF, FP4 9 PF per GPU dense, NVLink 5 1.8 TB/s; GB200 NVL72:
# 2.5 / 5 / 10 PF per GPU; B300 / GB300 (Blackwell Ultra): BF16 2.25/2.5, FP8 4.5/5, FP4 13.5/15 PF;
# A100 datasheet: BF16 312, NVLink 600 GB/s (A800 400); A30 165, NVLink 200; A40 149.7 (datasheet "299.4 with
# sparsity"), NVLink 112.5; A10 125; L40S 362 BF16 / 733 FP8; L40 181 / 362; L4 121 / 242; L20 119.5 / 239;
# RTX 6000 Ada 364 (FP8 728); GeForce RTX 4090 165 / 330 and RTX 5090 209.5 / 419 (FP16 accumulate, the Ada /
# Blackwell GeForce whitepapers); RTX PRO 6000 Blackwell 503.8 / 1007.6 / 2015 (FP4); T4 65 FP16; V100 125 FP16,
# NVLink 300 GB/s; MI300X 1307.4 / 2614.9, MI325X same, MI355X 2516 / 5033 / 10066 (AMD product pages), Infinity
# Fabric 64 GB/s per link one way x 7 links. PCIe one way: Gen4 x16 32 GB/s, Gen5 x16 64 GB/s. A10G has no
# NVIDIA datasheet (AWS-only part): the A10 figure is used and the calibration says so.
GPU_RATES: dict[str, GpuRates] = {r.key: r for r in (
    GpuRates("B200", 8000, 2250, 4500, 9000, 900),
    GpuRates("B300", 8000, 2250, 4500, 13500, 900),
    GpuRates("GB200", 8000, 2500, 5000, 10000, 900),
    GpuRates("GB300", 8000, 2500, 5000, 15000, 900),
    GpuRates("RTXPRO6000BW", 1792, 503.8, 1007.6, 2015, 64),
    GpuRates("RTX5090", 1792, 209.5, 419, 838, 64),
    GpuRates("H200-NVL", 4800, 835, 1671, 0, 450),
    GpuRates("H200", 4800, 989, 1979, 0, 450),
    GpuRates("H100-NVL", 3900, 835, 1671, 0, 300),
    GpuRates("H100-PCIE", 2000, 756, 1513, 0, 64),
    GpuRates("H100-SXM", 3350, 989, 1979, 0, 450),
    GpuRates("H800", 3350, 989, 1979, 0, 200),
    GpuRates("H20", 4000, 148, 296, 0, 450),
    GpuRates("GH200", 4000, 989, 1979, 0, 450),
    GpuRates("A100-80", 2039, 312, 0, 0, 300),
    GpuRates("A100-40", 1555, 312, 0, 0, 300),
    GpuRates("A800-80", 2039, 312, 0, 0, 200),
    GpuRates("A30", 933, 165, 0, 0, 100),
    GpuRates("A40", 696, 149.7, 0, 0, 56),
    GpuRates("A10G", 600, 125, 0, 0, 32),
    GpuRates("A10", 600, 125, 0, 0, 32),
    GpuRates("RTX3090", 936, 71, 0, 0, 56),
    GpuRates("L40S", 864, 362, 733, 0, 32),
    GpuRates("L40", 864, 181, 362, 0, 32),
    GpuRates("L20", 864, 119.5, 239, 0, 32),
    GpuRates("L4", 300, 121, 242, 0, 32),
    GpuRates("RTX6000ADA", 960, 364, 728, 0, 32),
    GpuRates("RTX4090", 1008, 165, 330, 0, 32),
    GpuRates("RTX4080", 717, 97.5, 195, 0, 32),
    GpuRates("T4", 320, 65, 0, 0, 16),
    GpuRates("V100-32", 900, 125, 0, 0, 150),
    GpuRates("V100", 900, 125, 0, 0, 150),
    GpuRates("MI355X", 8000, 2516, 5033, 10066, 448),
    GpuRates("MI325X", 6000, 1307.4, 2614.9, 0, 448),
    GpuRates("MI300X", 5300, 1307.4, 2614.9, 0, 448),
    GpuRates("MI250X", 1638, 191.5, 0, 0, 200),
)}


def gpu_rates(key: str) -> GpuRates | None:
    """The performance rates of a catalogue key (``GpuSku.key``), or None for a GPU the table lacks."""
    return GPU_RATES.get(key)


def cc_tuple(cc: str) -> tuple[int, int]:
    """'9.0' -> (9, 0)."""
    major, _sep, minor = str(cc).partition(".")
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
# cuBLAS/cuBLASLt handles and workspaces: the same capture measures 692.8 - 528.8 - 98 (torch tensors) = 66 MiB
# after the first matmul; the calibration logs put vLLM's non-torch figure at ~60 MiB on one GPU. vLLM < 0.33
# creates them inside the budget (profile run), 0.33 before its snapshot (rules.VersionRules.cublas_outside_budget).
CUBLAS_HANDLES_MIB = 60

# --- Attention backends (vLLM 0.32 platforms/cuda.py priority; v1/attention/backends/*) ----------


def attention_backend(cc: str, mla: bool, vendor: str = "nvidia") -> str:
    """The backend vLLM 0.32 picks first on this compute capability (platforms/cuda.py:83-179; ROCm: rocm.py)."""
    if vendor == "amd":
        return rocm_attention_backend(mla)
    major, _minor = cc_tuple(cc)
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
    "modelopt_mixed": 75,
    "quark": 70,
    "auto-round": 75,  # vLLM's inc method (60), 75 by the platform floor
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
