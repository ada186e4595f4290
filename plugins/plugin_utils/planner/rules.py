"""vLLM behaviour keyed by version: defaults, memory accounting, removed flags, dtypes, engine-argument types.

Facts come from vLLM's code (0.32.0 read directly; older behaviour from the release that changed it,
named next to each rule). Standard library only, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
class Removed:
    """One engine argument or environment variable vLLM dropped (or still parses but ignores), written once.

    Every spelling is derived from ``name``: the dash key (:attr:`key`), the ``--flag`` (:attr:`flag`) and the
    replacement in CLI words or engine-argument words (:meth:`replacement`, :meth:`instead`).

    :param name: the EngineArgs field (snake_case), or the environment variable.
    :param since: the first vLLM release whose ``vllm serve`` rejects (or ignores) it.
    :param why: what vLLM does now, one clause.
    :param use: replacement engine arguments, snake_case, ``"name"`` or ``"name=value"``.
    :param ignored: still accepted, but vLLM ignores it with a warning.
    """

    name: str
    since: tuple[int, int, int] = (0, 11, 0)
    why: str = ""
    use: tuple[str, ...] = ()
    ignored: bool = False

    @property
    def key(self) -> str:
        """``max-paddings``: the dash form the planner and vLLM's config file use."""
        return self.name.replace("_", "-")

    @property
    def flag(self) -> str:
        """``--max-paddings``."""
        return "--" + self.key

    def replacement(self, style: str = "cli", prefix: str = "") -> str:
        """The replacement, or ``""``: ``--runner pooling --convert embed`` (cli) or
        ``runner: pooling and convert: embed`` (``args``: engine-argument keys, each after ``prefix``)."""
        parts = []
        for item in self.use:
            name, sep, value = item.partition("=")
            if style == "cli":
                parts.append("--" + name.replace("_", "-") + (f" {value}" if sep else ""))
            else:
                parts.append(f"{prefix}{name}" + (f": {value}" if sep else ""))
        return (" " if style == "cli" else " and ").join(parts)

    def instead(self) -> str:
        """What to use instead, for a message that reads 'use …' (the planner's wording)."""
        replacement = self.replacement("cli")
        if not replacement:
            return f"nothing: {self.why}"
        return f"{replacement} ({self.why})" if self.why else replacement


#: Engine arguments vLLM dropped, with what replaces them (vllm-facts §5/B5: each flag parsed with the 0.32
#: `vllm serve` parser, which exits 2 on them). ``since``: 0.11 removed V0 and its flags; ``--max-paddings``
#: already failed in 0.8 (V1 became the default); ``--calculate-kv-scales`` went in 0.28.
REMOVED_ARGS: tuple[Removed, ...] = (
    Removed("max_paddings", (0, 8, 0), "V1 schedules by token budget", ("max_num_batched_tokens",)),
    Removed("worker_use_ray", use=("distributed_executor_backend=ray",)),
    Removed("swap_space", why="V1 preempts by recomputation; CPU KV offload is optional",
            use=("kv_offloading_size=GiB",)),
    Removed("enable_custom_kernels", why="it was never a vLLM flag"),
    Removed("disable_log_requests", why="request logging is off by default; --enable-log-requests opts in"),
    Removed("guided_decoding_backend", use=("structured_outputs_config.backend",)),
    Removed("use_v2_block_manager", why="V1 is the only engine"),
    Removed("num_scheduler_steps", why="removed with V0"),
    Removed("scheduler_delay_factor", why="removed with V0"),
    Removed("preemption_mode", why="V1 preempts by recomputation"),
    Removed("device", why="the platform is detected"),
    Removed("task", use=("runner=pooling", "convert=embed|classify|reward")),
    Removed("calculate_kv_scales", (0, 28, 0), "removed in vLLM 0.28"),
    Removed("max_parallel_loading_workers", ignored=True,
            why="vLLM warns it is currently not supported and ignores it: config/parallel.py:1082-1086"),
)

#: Environment variables vLLM no longer knows: vLLM warns "Unknown vLLM environment variable detected", or refuses
#: with --fail-on-environ-validation (platforms/interface.py:1446-1459). Refused for every target version.
REMOVED_ENV: tuple[Removed, ...] = (
    Removed("VLLM_USE_V1", why="V1 is the only engine"),
    Removed("VLLM_ATTENTION_BACKEND", use=("attention_backend=NAME",)),
)

#: The planner's view of :data:`REMOVED_ENV`: variable → what to use instead.
REMOVED_ENV_VARS: dict[str, str] = {entry.name: entry.instead() for entry in REMOVED_ENV}

#: ``--dtype`` spellings vLLM accepts (config/model.py ``ModelDType``: ``auto, half, float16, bfloat16, float,
#: float32``; the parser refuses anything else, ``bf16`` included) → the canonical name the planner emits.
KNOWN_DTYPES: dict[str, str] = {"auto": "auto", "half": "float16", "float16": "float16", "bfloat16": "bfloat16",
                                "float": "float32", "float32": "float32"}
#: ``--kv-cache-dtype`` values the planner can size (config/cache.py ``CacheDType``, less the ones it cannot:
#: ``fp8_inc`` is Intel Gaudi only, ``fp8_ds_mla``/``nvfp4*``/``turboquant*``/``*_per_token_head`` are special
#: per-token layouts whose page size is not dtype bytes x head size).
KV_DTYPES: tuple[str, ...] = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")

#: Integer engine arguments (EngineArgs fields typed int) → the range the fleet accepts (min, max; None: no max).
#: The bounds are sanity limits, not vLLM's; ``max_model_len`` also takes ``auto``/``-1`` (fit to memory).
#: Preflight checks pinned values against the range; the planner (engine_args.py) converts these keys to int and
#: refuses values below 1, or below 0 where the minimum here is 0 (``seed``, ``optimization_level`` = -O0..-O3).
INT_ENGINE_ARGS: dict[str, tuple[int, int | None]] = {
    "tensor_parallel_size": (1, 1024),
    "pipeline_parallel_size": (1, 1024),
    "data_parallel_size": (1, 1024),
    "max_num_seqs": (1, 1_000_000),
    "max_num_batched_tokens": (1, 100_000_000),
    "block_size": (1, 4096),
    "max_model_len": (16, 100_000_000),
    "kv_cache_memory_bytes": (1, None),
    "optimization_level": (0, 3),
    "seed": (0, None),
    "max_loras": (1, None),
}
#: Float engine arguments → (exclusive lower bound, inclusive upper bound); gpu_memory_utilization is vLLM's
#: ``Field(gt=0, le=1)`` (config/cache.py).
FLOAT_ENGINE_ARGS: dict[str, tuple[float, float]] = {
    "gpu_memory_utilization": (0.0, 1.0),
    "kv_offloading_size": (0.0, 1.0e6),
    "cpu_offload_gb": (-1.0e-9, 1.0e6),
}
#: Switches (true/false).
BOOL_ENGINE_ARGS: tuple[str, ...] = ("enforce_eager", "enable_prefix_caching", "enable_chunked_prefill",
                                     "trust_remote_code", "enable_expert_parallel", "disable_custom_all_reduce",
                                     "async_scheduling")
#: Engine arguments with a fixed set of values (config/parallel.py ``DistributedExecutorBackend``; vllm-facts
#: §B1 ``--performance-mode``). ``dtype``/``kv_cache_dtype``: :attr:`VersionRules.dtypes`/``kv_cache_dtypes``.
CHOICE_ENGINE_ARGS: dict[str, tuple[str, ...]] = {
    "distributed_executor_backend": ("mp", "ray", "uni", "external_launcher"),
    "performance_mode": ("balanced", "interactivity", "throughput"),
}

#: Head sizes vLLM's CPU attention kernels support (``v1/attention/backends/cpu_attn.py:52-70``, vLLM 0.32): the
#: CPU lane refuses other sizes. ``plugins/module_utils/tiny_model.py`` keeps a host-side copy (module_utils
#: cannot import the planner); ``tests/unit/tiny_model/test_tiny_model_content.py`` checks the two are equal.
CPU_ATTENTION_HEAD_SIZES: tuple[int, ...] = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

#: ``vllm serve --port`` default, and the multi-node ``--master-port`` default (config/parallel.py ``master_port``).
DEFAULT_SERVE_PORT = 8000
DEFAULT_MASTER_PORT = 29501


@dataclass(frozen=True)
class VersionRules:
    """What one vLLM version does that the planner and preflight depend on."""

    version: tuple[int, int, int]
    engine: str  # "v1" or "v0"
    default_gpu_memory_utilization: float
    cudagraph_charged_to_budget: bool  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default
    chunked_prefill_default: bool
    prefix_caching_default: bool
    default_block_size: int
    removed_flags: dict[str, str]  # dash key -> what to use instead (derived from REMOVED_ARGS)
    ignored_flags: dict[str, str]
    removed_args: tuple[Removed, ...] = ()  # the REMOVED_ARGS entries in force, the ignored ones included
    removed_env: tuple[Removed, ...] = REMOVED_ENV
    dtypes: dict[str, str] = field(default_factory=lambda: dict(KNOWN_DTYPES))
    kv_cache_dtypes: tuple[str, ...] = KV_DTYPES

    @property
    def text(self) -> str:
        return ".".join(str(n) for n in self.version)

    @property
    def series(self) -> str:
        """``0.32``: the release series, as messages name it."""
        return f"{self.version[0]}.{self.version[1]}"

    def removed_arg(self, name: str) -> Removed | None:
        """The entry for an engine argument in any spelling (``swap_space``, ``swap-space``, ``--swap-space``)."""
        key = str(name).strip().lstrip("-").replace("_", "-")
        return next((entry for entry in self.removed_args if entry.key == key), None)


def rules_for(version: str) -> VersionRules:
    """Return the rules for a vLLM version string.

    - V1 is the default engine from 0.8 and the only one from 0.11; observations before 0.8 are V0.
    - ``gpu_memory_utilization`` defaults to 0.92 in 0.32 (config/cache.py:102); earlier releases 0.9.
    - CUDA-graph memory is charged inside the budget from 0.21.0
      (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1; the 0.27.1 log says "default since v0.21.0").
    - Removed and ignored engine arguments: each :data:`REMOVED_ARGS` entry from its ``since`` release.
    """
    v = parse_version(version)
    if v < (0, 6, 0):
        raise ValueError(f"vLLM {version} is too old to plan for: the planner supports 0.6 and newer")
    in_force = tuple(entry for entry in REMOVED_ARGS if v >= entry.since)
    return VersionRules(
        version=v,
        engine="v1" if v >= (0, 8, 0) else "v0",
        default_gpu_memory_utilization=0.92 if v >= (0, 32, 0) else 0.9,
        cudagraph_charged_to_budget=v >= (0, 21, 0),
        chunked_prefill_default=v >= (0, 8, 0),
        prefix_caching_default=v >= (0, 8, 0),
        default_block_size=16,
        removed_flags={entry.key: entry.instead() for entry in in_force if not entry.ignored},
        ignored_flags={entry.key: entry.why for entry in in_force if entry.ignored},
        removed_args=in_force,
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
