"""vLLM behaviour keyed by version: defaults, memory accounting, removed flags.

Facts come from vLLM's code (0.32.0 read directly; older behaviour from the release that changed it,
named next to each rule). Standard library only, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_VLLM_VERSION = "0.32.0"


def parse_version(text: str) -> tuple[int, int, int]:
    """'0.32' -> (0, 32, 0); '0.6.4.post1' -> (0, 6, 4). Raises ValueError on garbage."""
    parts = str(text).strip().lstrip("v").split(".")
    nums: list[int] = []
    for part in parts[:3]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        nums.append(int(digits))
    if len(nums) < 2:
        raise ValueError(f"'{text}' is not a vLLM version (expected X.Y or X.Y.Z, e.g. 0.32.0)")
    while len(nums) < 3:
        nums.append(0)
    return nums[0], nums[1], nums[2]


@dataclass(frozen=True)
class VersionRules:
    """What one vLLM version does that the planner depends on."""

    version: tuple[int, int, int]
    engine: str  # "v1" or "v0"
    default_gpu_memory_utilization: float
    cudagraph_charged_to_budget: bool  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default
    chunked_prefill_default: bool
    prefix_caching_default: bool
    default_block_size: int
    removed_flags: dict[str, str]  # flag -> what to use instead
    ignored_flags: dict[str, str]

    @property
    def text(self) -> str:
        return ".".join(str(n) for n in self.version)


# Flags the articles use that vLLM 0.32's parser rejects (exit 2), with replacements
# (vllm-facts §5/B5, checked by parsing each with the 0.32 `vllm serve` parser).
_REMOVED_0_32: dict[str, str] = {
    "max-paddings": "nothing: V1 schedules by token budget (--max-num-batched-tokens)",
    "worker-use-ray": "--distributed-executor-backend ray",
    "swap-space": "nothing: V1 preempts by recomputation; optional --kv-offloading-size GiB",
    "enable-custom-kernels": "nothing: never a vLLM flag",
    "disable-log-requests": "nothing: request logging is off by default (--enable-log-requests opts in)",
    "guided-decoding-backend": "--structured-outputs-config.backend",
    "use-v2-block-manager": "nothing: V1 is the only engine",
    "num-scheduler-steps": "nothing (removed with V0)",
    "scheduler-delay-factor": "nothing (removed with V0)",
    "preemption-mode": "nothing: V1 preempts by recomputation",
    "device": "nothing: the platform is detected",
    "task": "--runner pooling --convert embed|classify|reward",
    "calculate-kv-scales": "nothing (removed in 0.28)",
}
_IGNORED_0_32: dict[str, str] = {
    "max-parallel-loading-workers": "accepted but ignored by vLLM 0.32 (config/parallel.py:1082-1086)",
}

# Environment variables removed from vLLM (an unknown VLLM_* variable is warned about or refused).
REMOVED_ENV_VARS: dict[str, str] = {
    "VLLM_USE_V1": "nothing: V1 is the only engine",
    "VLLM_ATTENTION_BACKEND": "--attention-backend NAME",
}


# --dtype spellings vLLM 0.32 accepts (config/model.py _STR_DTYPE_TO_TORCH_DTYPE), to the canonical name.
KNOWN_DTYPES: dict[str, str] = {"auto": "auto", "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16",
                                "half": "float16", "fp16": "float16", "float32": "float32", "float": "float32"}
# --kv-cache-dtype values the planner can size (config/cache.py CacheDType, minus fp8_inc: Intel Gaudi only).
KV_DTYPES: tuple[str, ...] = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")

def rules_for(version: str) -> VersionRules:
    """Return the rules for a vLLM version string.

    - V1 is the default engine from 0.8 and the only one from 0.11; observations before 0.8 are V0.
    - ``gpu_memory_utilization`` defaults to 0.92 in 0.32 (config/cache.py:102); earlier releases 0.9.
    - CUDA-graph memory is charged inside the budget from 0.21.0
      (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1; the 0.27.1 log says "default since v0.21.0").
    """
    v = parse_version(version)
    if v < (0, 6, 0):
        raise ValueError(f"vLLM {version} is too old to plan for: the planner supports 0.6 and newer")
    if v >= (0, 11, 0):
        removed = dict(_REMOVED_0_32)
    elif v >= (0, 8, 0):
        removed = {"max-paddings": _REMOVED_0_32["max-paddings"]}
    else:
        removed = {}
    return VersionRules(
        version=v,
        engine="v1" if v >= (0, 8, 0) else "v0",
        default_gpu_memory_utilization=0.92 if v >= (0, 32, 0) else 0.9,
        cudagraph_charged_to_budget=v >= (0, 21, 0),
        chunked_prefill_default=v >= (0, 8, 0),
        prefix_caching_default=v >= (0, 8, 0),
        default_block_size=16,
        removed_flags=removed,
        ignored_flags=dict(_IGNORED_0_32) if v >= (0, 11, 0) else {},
    )


@dataclass(frozen=True)
class SchedulerDefaults:
    max_num_batched_tokens: int
    max_num_seqs: int
    tier: str


def scheduler_defaults(
    gpu_name: str | None, gpu_memory_gib: float | None, world_size: int = 1, offline: bool = False
) -> SchedulerDefaults:
    """vLLM's own defaults for ``vllm serve`` (engine/arg_utils.py:2894-2985; vllm-facts B1).

    ``offline`` gives the ``LLM(...)`` class defaults instead.
    """
    if gpu_name is None:  # CPU platform
        if offline:
            return SchedulerDefaults(4096 * world_size, 256 * world_size, "cpu")
        return SchedulerDefaults(2048 * world_size, 128 * world_size, "cpu")
    mem = gpu_memory_gib or 0.0
    if mem >= 160:
        return SchedulerDefaults(16384, 1024, ">=160GiB")
    if mem >= 70 and "a100" not in gpu_name.lower():
        return SchedulerDefaults(16384 if offline else 8192, 1024, ">=70GiB")
    return SchedulerDefaults(8192 if offline else 2048, 256, "other")


def cudagraph_capture_sizes(max_num_seqs: int, blackwell: bool = False) -> list[int]:
    """CUDA-graph capture sizes vLLM 0.32 uses by default (config/vllm.py:2292-2365)."""
    largest = min(max_num_seqs * 2, 1024 if blackwell else 512)
    sizes = [s for s in (1, 2, 4) if s <= largest]
    sizes += list(range(8, min(256, largest + 1), 8))
    sizes += list(range(256, largest + 1, 16))
    return sizes
