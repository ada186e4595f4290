"""The planner's inputs from the outside: workload profiles, the inventory policy and the GPU view of facts."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from .errors import PlanError, as_int
from .hardware import cc_tuple, gfx_capability, lookup_gpu

# --- Workload profiles --------------------------------------------------------------------------


@dataclass(frozen=True)
class Profile:
    """A workload: request shape, latency target and what the plan optimises for."""

    name: str
    prompt_tokens: int
    output_tokens: int
    p99_latency_ms: int
    min_concurrency: int  # requests of (prompt + output) tokens the KV pool must hold to be useful
    max_num_seqs_cap: int
    goal: str  # "latency" | "throughput" | "context"
    # Service targets (planner/targets.py chooses TP, max_num_seqs and max_num_batched_tokens by them): p99 TTFT and
    # p99 TPOT in ms as ``vllm bench serve`` reports them, at the host's expected load, either ``max_concurrency``
    # clients or ``request_rate`` requests per second (Poisson), spread evenly over the host's replicas.
    p99_ttft_ms: float | None = None
    p99_tpot_ms: float | None = None
    max_concurrency: int | None = None
    request_rate: float | None = None

    @property
    def request_tokens(self) -> int:
        """Tokens one request of this profile holds in the KV cache (prompt + output)."""
        return self.prompt_tokens + self.output_tokens

    @property
    def has_targets(self) -> bool:
        """Whether the profile states a p99 TTFT or TPOT target (and with it the load)."""
        return self.p99_ttft_ms is not None or self.p99_tpot_ms is not None

    @property
    def has_load(self) -> bool:
        """Whether the profile states the host's expected load (clients or request rate)."""
        return self.max_concurrency is not None or self.request_rate is not None

    def describe_targets(self) -> str:
        """``p99 TTFT <= 500 ms, p99 TPOT <= 50 ms at 64 concurrent clients`` (empty without targets)."""
        targets = (("TTFT", self.p99_ttft_ms), ("TPOT", self.p99_tpot_ms))
        parts = [f"p99 {name} <= {value:g} ms" for name, value in targets if value is not None]
        return ", ".join(parts) + (f" at {self.load_text()}" if self.has_load else "")

    def load_text(self) -> str:
        """``64 concurrent clients`` or ``12 requests/s``."""
        if self.max_concurrency is not None:
            return f"{self.max_concurrency} concurrent clients"
        return f"{self.request_rate:g} requests/s" if self.request_rate is not None else ""


PROFILES: dict[str, Profile] = {
    "chat": Profile(name="chat", prompt_tokens=1024, output_tokens=256, p99_latency_ms=500,
                    min_concurrency=16, max_num_seqs_cap=256, goal="latency"),
    "batch": Profile(name="batch", prompt_tokens=1024, output_tokens=512, p99_latency_ms=30000,
                     min_concurrency=64, max_num_seqs_cap=1024, goal="throughput"),
    "long-context": Profile(name="long-context", prompt_tokens=32768, output_tokens=1024, p99_latency_ms=60000,
                            min_concurrency=2, max_num_seqs_cap=64, goal="context"),
}
GOAL_SEQS_CAP = {"latency": 256, "context": 64}  # max_num_seqs cap of an explicit profile; else 1024
#: The keys an explicit profile may have; anything else (a misspelt target) is refused.
PROFILE_KEYS = ("name", "base", "prompt_tokens", "output_tokens", "p99_latency_ms", "goal", "min_concurrency",
                "p99_ttft_ms", "p99_tpot_ms", "max_concurrency", "request_rate")
PROFILE_GOALS = ("latency", "throughput", "context")


def resolve_profile(profile: str | dict[str, Any] | None) -> Profile:
    """A named profile, or an explicit one: {prompt_tokens, output_tokens, p99_latency_ms[, goal]} and optional
    service targets {p99_ttft_ms, p99_tpot_ms} with the host's load {max_concurrency | request_rate}."""
    if profile is None or profile == "":
        return PROFILES["chat"]
    if isinstance(profile, str):
        if profile not in PROFILES:
            raise PlanError(f"unknown profile '{profile}': use one of {', '.join(PROFILES)} "
                            "or give prompt_tokens/output_tokens/p99_latency_ms")
        return PROFILES[profile]
    if not isinstance(profile, dict):
        raise PlanError("profile must be a name or a mapping with prompt_tokens and output_tokens")
    unknown = sorted(str(k) for k in profile if k not in PROFILE_KEYS)
    if unknown:
        raise PlanError(f"profile key(s) {', '.join(unknown)} unknown: a profile takes {', '.join(PROFILE_KEYS)}")
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
    if goal not in PROFILE_GOALS:
        raise PlanError(f"profile goal {goal!r} is not one of {', '.join(PROFILE_GOALS)}")
    ttft, tpot = _target(profile, "p99_ttft_ms"), _target(profile, "p99_tpot_ms")
    concurrency, rate = _load(profile)
    if (ttft is not None or tpot is not None) and concurrency is None and rate is None:
        raise PlanError("profile targets p99_ttft_ms / p99_tpot_ms need the load they hold at: add max_concurrency "
                        "(clients the host serves at once) or request_rate (requests per second to the host)")
    return Profile(name=str(profile.get("name", "custom")), prompt_tokens=prompt, output_tokens=output,
                   p99_latency_ms=p99, min_concurrency=int(profile.get("min_concurrency", base.min_concurrency)),
                   max_num_seqs_cap=GOAL_SEQS_CAP.get(goal, 1024), goal=goal, p99_ttft_ms=ttft, p99_tpot_ms=tpot,
                   max_concurrency=concurrency, request_rate=rate)


def _target(profile: dict[str, Any], key: str) -> float | None:
    """A p99 target in ms: a positive number, or absent."""
    value = profile.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or math.isnan(value):
        raise PlanError(f"profile {key} must be a positive number of milliseconds (e.g. {key}: 500), got {value!r}")
    return float(value)


def _load(profile: dict[str, Any]) -> tuple[int | None, float | None]:
    """The host's expected load: ``max_concurrency`` clients or ``request_rate`` requests/s, at most one."""
    concurrency, rate = profile.get("max_concurrency"), profile.get("request_rate")
    if concurrency is not None and rate is not None:
        raise PlanError("profile gives both max_concurrency and request_rate: keep one (clients at once, or "
                        "requests per second)")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise PlanError(f"profile max_concurrency must be a whole number >= 1 (clients the host serves at once), "
                        f"got {concurrency!r}")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0
                             or rate == float("inf")):
        raise PlanError(f"profile request_rate must be a positive number of requests per second, got {rate!r}")
    return concurrency, None if rate is None else float(rate)


# --- Inventory policy ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """Inventory policy: headroom and fleet shape. Absolute figures, not fractions."""

    safety_margin_mib: int | None = None  # default: 2% of the GPU, clamped to [1 GiB, 3 GiB]
    co_located_mib: int = 0  # other processes on each GPU (monitoring, another model, ...)
    instances_per_gpu: int = 1
    max_nodes: int = 1  # hosts one model instance may span (pipeline parallel across hosts)
    cpu_kv_cache_gib: float | None = None
    offline: bool = False  # plan for the LLM(...) class instead of `vllm serve`
    kv_cache_policy: str = "accuracy_first"  # or "capacity_first": fp8 KV cache where it pays (planner/recipes.py)


AT_LEAST_ONE_POLICY_KEYS = ("instances_per_gpu", "max_nodes")


def policy_from_mapping(raw: dict[str, Any]) -> Policy:
    """An inventory mapping -> Policy; unknown keys and bad values raise PlanError."""
    known = {f.name for f in fields(Policy)}
    unknown = set(raw) - known
    if unknown:
        raise PlanError(f"unknown policy key(s) {', '.join(sorted(unknown))}: known are {', '.join(sorted(known))}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:
            continue
        if key == "offline":
            values[key] = bool(value)
        elif key == "kv_cache_policy":
            if value not in ("accuracy_first", "capacity_first"):
                raise PlanError(f"policy kv_cache_policy must be accuracy_first or capacity_first, not {value!r}")
            values[key] = str(value)
        elif key == "cpu_kv_cache_gib":
            try:
                values[key] = float(value)
            except (TypeError, ValueError):
                raise PlanError(f"policy {key} must be a number, not {value!r}") from None
        else:
            values[key] = as_int(value, f"policy {key}")
            floor = 1 if key in AT_LEAST_ONE_POLICY_KEYS else 0
            if values[key] < floor:
                raise PlanError(f"policy {key} must be {'at least 1' if floor else 'non-negative'}")
    return Policy(**values)


# --- The GPU view of the facts ------------------------------------------------------------------


@dataclass(frozen=True)
class Gpu:
    """One host's GPUs as the planner sees them (identical GPUs; memory as CUDA reports it)."""

    name: str
    memory_mib: int
    compute_capability: str
    count: int
    nvlink_domain: int  # largest set of GPUs fully connected by NVLink/NVSwitch (1 = PCIe)
    interconnect: str
    driver_version: str | None = None
    cuda_version: str | None = None
    used_mib: int = 0  # memory already used by other processes at plan time
    catalogued: bool = True  # False: the name is not in hardware.GPU_CATALOGUE (planned from the facts alone)
    shares_host_memory: bool = False  # unified memory (GB10): the host OS draws on the same pool
    vendor: str = "nvidia"  # "amd": an AMD Instinct GPU, planned for vLLM's ROCm platform (nothing deploys it)
    gfx: str = ""  # AMD: the gfx target (gfx942); compute_capability is vLLM's reading of it (9.4)

    @property
    def amd(self) -> bool:
        """True for an AMD GPU (the ROCm platform's rules apply)."""
        return self.vendor == "amd"

    def amd_note(self) -> str:
        """The plan's one line for an AMD GPU: what was planned, and that nothing here deploys it."""
        return (f"{self.name} ({self.gfx or 'gfx unknown'}, cc {self.compute_capability} as vLLM's ROCm platform "
                "reads it): planned for vLLM's ROCm build only; vllm-fleet's provisioning, image and deploy are "
                "NVIDIA (CUDA), so run this plan with a ROCm vLLM image you provide")

    def uncatalogued_note(self) -> str:
        """The plan's note for a GPU the catalogue does not know ("" when it does)."""
        if self.catalogued:
            return ""
        return (f"GPU '{self.name}' is not in the planner's catalogue (planner/hardware.py): planned from the facts "
                f"alone ({self.memory_mib} MiB as CUDA sees it, compute capability {self.compute_capability}, "
                f"{self.interconnect}); vLLM's own defaults for it follow its memory and compute capability")


DRIVER_RESERVED_MIB = 512  # nvidia-smi total minus what CUDA reports (615 MiB on H200, 430-770 elsewhere)


@dataclass(frozen=True)
class _RawGpu:
    """What the facts say before defaults and checks (memory/cc may be missing)."""

    name: str
    memory_mib: Any
    compute_capability: Any
    count: int
    nvlink_domain: int
    interconnect: str
    driver_version: Any
    cuda_version: Any
    used_mib: int
    cuda_visible_mib: int | None  # free + used as CUDA reports it, when the facts give both
    vendor: Any = None  # "nvidia" | "amd" when the facts say (else the catalogue's, else nvidia)
    gfx: Any = None  # AMD gfx target when the facts give it


def _raw_from_gpu_list(facts: dict[str, Any], gpus: list[dict[str, Any]]) -> _RawGpu:
    """CONTRACT 1 facts (a ``gpus`` list): one model of non-MIG GPUs, memory as CUDA sees it."""
    usable = [g for g in gpus if str(g.get("mig_mode", "Disabled")).lower() != "enabled"]
    if not usable:
        raise PlanError("every GPU on this host is in MIG mode: plan per MIG instance is not supported; "
                        "disable MIG (nvidia-smi -mig 0) or give the instance as --gpu-memory-mib")
    names = {str(g.get("name")) for g in usable}
    if len(names) > 1:
        raise PlanError(f"host mixes GPU models ({', '.join(sorted(names))}): vLLM needs identical GPUs; "
                        "restrict CUDA_VISIBLE_DEVICES to one model")
    first = usable[0]
    mem = first.get("memory_total_mib")
    free, used_now = first.get("memory_free_mib"), first.get("memory_used_mib")
    visible = None
    if mem is not None and free is not None and used_now is not None and free + used_now <= mem:
        # What CUDA reports as total (cudaMemGetInfo) = free + used; the rest is driver-reserved.
        visible = int(free) + int(used_now)
    used = max(as_int(g.get("memory_used_mib", 0) or 0, "memory_used_mib") for g in usable)
    domains = facts.get("nvlink_domains") or []
    domain = max((len(d) for d in domains), default=1) if domains else 1
    return _RawGpu(name=str(first.get("name")), memory_mib=mem, compute_capability=first.get("compute_capability"),
                   count=len(usable), nvlink_domain=domain,
                   interconnect=str(facts.get("interconnect") or ("nvlink" if domain > 1 else "pcie")),
                   driver_version=facts.get("driver_version"), cuda_version=facts.get("cuda_version"),
                   used_mib=used, cuda_visible_mib=visible, vendor=first.get("vendor") or facts.get("vendor"),
                   gfx=first.get("gfx") or facts.get("gfx"))


def _raw_from_shorthand(facts: dict[str, Any]) -> _RawGpu | None:
    """CLI shorthand ({gpu_name, gpu_count, ...}); None when it names no GPU (the CPU lane)."""
    raw_name = facts.get("gpu_name") or facts.get("gpu")
    if not raw_name or (int(facts.get("gpu_count", 0) or 0) == 0 and not facts.get("gpu")):
        return None
    name = str(raw_name)
    count = as_int(facts.get("gpu_count", 1) or 1, "gpu_count")
    sku_guess = lookup_gpu(name)
    domain = count if (sku_guess and sku_guess.nvlink_domain >= count) else (
        sku_guess.nvlink_domain if sku_guess else 1)
    interconnect = "pcie"
    if domain > 1:  # the catalogue's class of the usual board (an NVSwitch HGX, NVLink bridges, Infinity Fabric)
        interconnect = sku_guess.interconnect if sku_guess and sku_guess.interconnect != "single" else "nvlink"
    return _RawGpu(name=name, memory_mib=facts.get("gpu_memory_mib"), compute_capability=facts.get("compute_capability"),
                   count=count, nvlink_domain=domain, interconnect=interconnect,
                   driver_version=facts.get("driver_version"), cuda_version=facts.get("cuda_version"),
                   used_mib=0, cuda_visible_mib=None, vendor=facts.get("vendor"), gfx=facts.get("gfx"))


def gpu_from_facts(facts: dict[str, Any]) -> Gpu | None:
    """Build the GPU view from CONTRACT 1 facts (docs/architecture.md), or shorthand keys.

    Shorthand (CLI): {"gpu_name", "gpu_count", "gpu_memory_mib", "compute_capability"[, "vendor", "gfx"]}.
    AMD: a catalogued name ("AMD Instinct MI300X", "MI300X") is enough; otherwise ``vendor: amd`` with ``gfx``
    (on the host or on each ``gpus`` entry) and the memory; the compute capability is derived from gfx as vLLM does.
    Returns None for the CPU lane (no GPU). A name the catalogue does not know is planned from the facts when they
    carry its memory and compute capability (``Gpu.catalogued`` is False and the plan notes it); without them it
    is refused with what to give.
    """
    gpus = facts.get("gpus")
    raw = _raw_from_gpu_list(facts, gpus) if isinstance(gpus, list) and gpus else _raw_from_shorthand(facts)
    if raw is None:
        return None
    sku = lookup_gpu(raw.name)
    mem, cc = raw.memory_mib, raw.compute_capability
    vendor = str(raw.vendor or (sku.vendor if sku else "nvidia")).lower()
    if vendor not in ("nvidia", "amd"):
        raise PlanError(f"GPU vendor '{raw.vendor}' is not nvidia or amd: give vendor: amd (with gfx: gfx942) "
                        "for an AMD Instinct GPU, or leave it out for NVIDIA")
    gfx = str(raw.gfx or (sku.gfx if sku and sku.vendor == vendor else "")).lower()
    if vendor == "amd" and gfx and cc is None:
        try:
            cc = gfx_capability(gfx)
        except ValueError:
            raise PlanError(f"gfx '{raw.gfx}' is not a gfx target: give it as rocminfo prints it (gfx90a, "
                            "gfx942, gfx950)") from None
    if mem is None:
        if sku is None:
            raise PlanError(f"unknown GPU '{raw.name}' and no memory figure: give --gpu-memory-mib "
                            "and --compute-capability (or facts from gpu_facts)")
        mem = sku.memory_mib
    if cc is None:
        if sku is None:
            raise PlanError(f"unknown GPU '{raw.name}': give --compute-capability X.Y"
                            + (" (or gfx: gfx942 in the facts)" if vendor == "amd" else ""))
        cc = sku.compute_capability
    mem_i = as_int(mem, "gpu memory (MiB)")
    if mem_i <= 1024:
        raise PlanError(f"GPU memory {mem_i} MiB is not plausible: give memory in MiB (e.g. 81559)")
    # nvidia-smi's memory.total includes memory the driver reserves; CUDA sees total - reserved. AMD: the figure is
    # already what ROCm reports (rocminfo's pool, amd-smi's VRAM total); no reservation is measured to subtract.
    reserved = DRIVER_RESERVED_MIB if vendor == "nvidia" else 0
    mem_i = raw.cuda_visible_mib if raw.cuda_visible_mib is not None else mem_i - reserved
    if raw.count <= 0:
        raise PlanError("gpu_count must be at least 1")
    try:
        cc_tuple(str(cc))
    except ValueError:
        raise PlanError(f"compute capability '{cc}' is not X.Y (e.g. 9.0)") from None
    return Gpu(name=raw.name, memory_mib=mem_i, compute_capability=str(cc), count=raw.count,
               nvlink_domain=max(1, min(raw.nvlink_domain, raw.count)), interconnect=raw.interconnect,
               driver_version=str(raw.driver_version) if raw.driver_version else None,
               cuda_version=str(raw.cuda_version) if raw.cuda_version else None, used_mib=raw.used_mib,
               catalogued=sku is not None, shares_host_memory=bool(sku and sku.shares_host_memory),
               vendor=vendor, gfx=gfx)
