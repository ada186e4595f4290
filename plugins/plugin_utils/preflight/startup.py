# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""vLLM's own start-up rules, refused in preflight before any host changes.

Each check mirrors one entry of :mod:`.startup_rules` (the inventory of vLLM 0.32's and 0.33's configuration
and start-up validation, with file:line per version) and says what vLLM itself would say when the container
starts, plus the host and the fix. The rules are keyed by the host's target vLLM (``vllm_fleet_vllm_version``,
through the planner's release series); a rule that holds only for some GPUs reads the facts.

- :func:`check_host` — before planning: what the host pins (``vllm_fleet_engine_args``, ``vllm_fleet_env``)
  against the model's ``config.json``, the GPU facts and the version;
- :func:`check_plan` — after planning: the scheduler limits on the launch's final engine arguments (pinned or
  computed);
- :func:`check_groups` — what no single vLLM sees: one multi-node group, one checkpoint and one vLLM version.

Every check returns one-line messages (empty = all good), never raises on bad input. Pure (stdlib only, typed,
no I/O: the model's config is read by the caller).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.engine_args import vllm_rules

__all__ = ["ATTENTION_BACKENDS", "CHECKS", "DEPRECATED_QUANTIZATION", "check_groups", "check_host", "check_plan"]

# vllm/v1/attention/backends/registry.py AttentionBackendEnum (0.32.0:34, 0.33.0:34): the names
# ``--attention-backend`` accepts; anything else is "Unknown attention backend" (registry.py:29).
_BACKENDS_032 = (
    "FLASH_ATTN", "FLASH_ATTN_DIFFKV", "TRITON_ATTN", "TRITON_ATTN_DIFFKV", "TRITON_FLASH_ATTN", "ROCM_ATTN",
    "ROCM_SEGMENTED_ATTN", "ROCM_AITER_MLA", "ROCM_AITER_TRITON_MLA", "ROCM_AITER_FA", "ROCM_AITER_MLA_SPARSE",
    "XPU_MLA_SPARSE", "TORCH_SDPA", "FLASHINFER", "TRITON_FLASHINFER", "FLASHINFER_MLA", "TOKENSPEED_MLA",
    "FLASHINFER_MLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM120", "FLASHINFER_MLA_SPARSE_SM90", "TRITON_MLA",
    "CUTLASS_MLA", "FLASHMLA", "FLASHMLA_SPARSE", "FLASHMLA_SPARSE_DSV4", "FLASHINFER_MLA_SPARSE_DSV4",
    "ROCM_FLASHMLA_SPARSE_DSV4", "FLASHMLA_SPARSE_DSV41", "FLASHINFER_MLA_SPARSE_DSV41", "FLASHMLA_MEGA_ATTN_DSV41",
    "B12X", "FLASH_ATTN_MLA", "FLASH_ATTN_MLA_SPARSE", "MINIMAX_M3_SPARSE", "CUTLASS_MSA", "TRITON_MSA",
    "NO_ATTENTION", "FLEX_ATTENTION", "HPC_ATTN", "ROCM_AITER_UNIFIED_ATTN", "CPU_ATTN", "CPU_MLA", "AMX_MLA",
    "TURBOQUANT", "ULTRAQUANT", "CUSTOM",
)
#: 0.33 adds ROCM_FLASHMLA_SPARSE_DSV41, FLASH_ATTN_MLA_SPARSE_FA4, STEP5_DSA and ROCM_OCTAVE.
_BACKENDS_033 = (*_BACKENDS_032, "ROCM_FLASHMLA_SPARSE_DSV41", "FLASH_ATTN_MLA_SPARSE_FA4", "STEP5_DSA", "ROCM_OCTAVE")
ATTENTION_BACKENDS: dict[str, tuple[str, ...]] = {"0.32": _BACKENDS_032, "0.33": _BACKENDS_033}

#: What a checkpoint's ``quant_method`` may be served as when pinned differently: vLLM asks each method's
#: ``override_quantization_method`` (vllm/config/model.py:1416-1436) and only these accept the pin.
_OVERRIDES: dict[str, tuple[str, ...]] = {
    "awq": ("awq_marlin",), "gptq": ("gptq_marlin",), "mxfp4": ("gpt_oss_mxfp4",),
}
#: vllm/model_executor/layers/quantization/__init__.py DEPRECATED_QUANTIZATION_METHODS (0.32.0:52, 0.33.0:52):
#: refused unless ``allow_deprecated_quantization`` (vllm/config/model.py:1467 in 0.32).
DEPRECATED_QUANTIZATION: dict[str, tuple[str, ...]] = {"0.32": ("fbgemm_fp8", "fp_quant"),
                                                       "0.33": ("fbgemm_fp8", "fp_quant")}
#: Methods that read a quantization config from the checkpoint (vllm/model_executor/model_loader/weight_utils.py
#: get_quant_config: "Cannot find the config file for <method>" when the checkpoint has none, :375 in 0.32).
_CHECKPOINT_METHODS = ("awq", "awq_marlin", "gptq", "gptq_marlin", "compressed-tensors", "modelopt", "modelopt_fp4",
                       "modelopt_mxfp8", "modelopt_mixed", "mxfp4", "gpt_oss_mxfp4", "moe_wna16", "fp_quant")

#: Device visibility belongs to the launch record (its ``gpus`` / ``device_requests``): a container sees only its
#: own GPUs, numbered from 0, so a mask in vllm_fleet_env hides or renumbers them.
_DEVICE_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def _series(version: Any) -> str:
    series = vllm_rules(version).series
    return series if series in ATTENTION_BACKENDS else "0.33"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _pin(args: Mapping[str, Any], name: str) -> Any:
    """A pinned engine arg by its EngineArgs name (snake case) or its CLI spelling (dashes), as the plan has it."""
    if name in args:
        return args[name]
    return args.get(name.replace("_", "-"))


def _checkpoint_quant(config: Mapping[str, Any]) -> str | None:
    for cfg in (config, config.get("text_config") if isinstance(config.get("text_config"), Mapping) else {}):
        q = cfg.get("quantization_config") if isinstance(cfg, Mapping) else None
        if isinstance(q, Mapping) and q.get("quant_method"):
            return str(q["quant_method"]).lower()
    return None


def _text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = config.get("text_config")
    return inner if isinstance(inner, Mapping) else config


def _is_moe(config: Mapping[str, Any]) -> bool:
    cfg = _text(config)
    keys = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
    return any((_int(cfg.get(key)) or 0) > 0 for key in keys)


def _derived_len(config: Mapping[str, Any]) -> int | None:
    return _int(_text(config).get("max_position_embeddings"))


# --- before planning: the pins against the model, the facts and the version ---------------------------------------

def quantization_matches_checkpoint(host: str, ctx: Mapping[str, Any]) -> list[str]:
    pinned = _pin(ctx["args"], "quantization")
    if not isinstance(pinned, str) or not pinned:
        return []
    ckpt = _checkpoint_quant(ctx["config"])
    if ckpt is None:
        if pinned in _CHECKPOINT_METHODS:
            return [f"{host}: vLLM would refuse it: 'Cannot find the config file for {pinned}' — the checkpoint has "
                    f"no quantization_config, so it is not {pinned}: remove vllm_fleet_engine_args.quantization, "
                    "or point vllm_fleet_model at a checkpoint quantized with it"]
        return []
    if pinned == ckpt or pinned in _OVERRIDES.get(ckpt, ()):
        return []
    return [f"{host}: vLLM would refuse it: 'Quantization method specified in the model config ({ckpt}) does not "
            f"match the quantization method specified in the `quantization` argument ({pinned})': remove "
            f"vllm_fleet_engine_args.quantization (vLLM reads {ckpt} from the checkpoint) or set it to {ckpt}"]


def quantization_not_deprecated(host: str, ctx: Mapping[str, Any]) -> list[str]:
    pinned = _pin(ctx["args"], "quantization")
    method = pinned if isinstance(pinned, str) and pinned else _checkpoint_quant(ctx["config"])
    if method not in DEPRECATED_QUANTIZATION[ctx["series"]] or _pin(ctx["args"], "allow_deprecated_quantization"):
        return []
    return [f"{host}: vLLM {ctx['series']} would refuse it: 'The quantization method {method} is deprecated and will "
            "be removed in future versions of vLLM. To bypass, set `--allow-deprecated-quantization`.': use a "
            "checkpoint in a current format, or pin vllm_fleet_engine_args.allow_deprecated_quantization: true"]


def attention_backend_exists(host: str, ctx: Mapping[str, Any]) -> list[str]:
    backend = _pin(ctx["args"], "attention_backend")
    config = ctx["args"].get("attention_config")
    if backend is not None and isinstance(config, Mapping) and config.get("backend") is not None:
        return [f"{host}: vLLM would refuse it: 'attention_backend and attention_config.backend are mutually "
                "exclusive': pin one of them in vllm_fleet_engine_args, not both"]
    if backend is None and isinstance(config, Mapping):
        backend = config.get("backend")
    if backend is None:
        return []
    known = ATTENTION_BACKENDS[ctx["series"]]
    if str(backend).upper() in known:
        return []
    return [f"{host}: vLLM {ctx['series']} would refuse it: \"Unknown attention backend: '{backend}'\": "
            f"remove vllm_fleet_engine_args.attention_backend (vLLM picks one for the GPU) or use one of "
            f"{', '.join(n for n in known if not n.startswith(('ROCM', 'XPU', 'CPU', 'AMX')))}"]


def expert_parallel_needs_moe(host: str, ctx: Mapping[str, Any]) -> list[str]:
    if _pin(ctx["args"], "enable_expert_parallel") is not True or _is_moe(ctx["config"]):
        return []
    return [f"{host}: vLLM would refuse it: 'Number of experts in the model must be greater than 0 when expert "
            "parallelism is enabled.' (the model is dense): remove vllm_fleet_engine_args.enable_expert_parallel"]


def eplb_needs_expert_parallel(host: str, ctx: Mapping[str, Any]) -> list[str]:
    # Left unset, the planner turns EP on for EPLB ("required", planner/candidate.py expert_parallel); only a pinned
    # false is what vLLM would refuse.
    if _pin(ctx["args"], "enable_eplb") is not True or _pin(ctx["args"], "enable_expert_parallel") is not False:
        return []
    if not _is_moe(ctx["config"]):
        return []  # the planner refuses EPLB on a dense model with its own message
    return [f"{host}: vLLM would refuse it: 'enable_expert_parallel must be True to use EPLB.': pin "
            "vllm_fleet_engine_args.enable_expert_parallel: true beside enable_eplb, or remove enable_eplb"]


def lora_cpu_slots(host: str, ctx: Mapping[str, Any]) -> list[str]:
    cpu, loras = _int(_pin(ctx["args"], "max_cpu_loras")), _int(_pin(ctx["args"], "max_loras"))
    if cpu is None or (cpu >= (loras if loras is not None else 1)):
        return []
    loras = loras if loras is not None else 1
    return [f"{host}: vLLM would refuse it: 'max_cpu_loras ({cpu}) must be >= max_loras ({loras}).': raise "
            f"vllm_fleet_engine_args.max_cpu_loras to {loras} or more, or remove it (it defaults to max_loras)"]


def decode_context_parallel(host: str, ctx: Mapping[str, Any]) -> list[str]:
    """ParallelConfig (tp divisible by dcp) then ModelConfig.verify_with_parallel_config's GQA rules, in vLLM's
    order; prefill context parallelism (not planned) is left to vLLM."""
    dcp = _int(_pin(ctx["args"], "decode_context_parallel_size")) or 1
    if dcp <= 1 or (_int(_pin(ctx["args"], "prefill_context_parallel_size")) or 1) > 1:
        return []
    tp = _int(_pin(ctx["args"], "tensor_parallel_size")) or 1
    fix = "remove vllm_fleet_engine_args.decode_context_parallel_size"
    if tp % dcp:
        return [f"{host}: vLLM would refuse it: 'tp_size={tp} must be divisible by dcp_size={dcp}.': {fix}, or pin a "
                "tensor_parallel_size it divides"]
    cfg = ctx["config"].get("text_config") if isinstance(ctx["config"].get("text_config"), Mapping) else ctx["config"]
    heads = _int(cfg.get("num_attention_heads")) or 0
    kv = _int(cfg.get("num_key_value_heads")) or heads
    if cfg.get("kv_lora_rank") or not kv:  # MLA models are exempt (vllm/config/model.py:1565 in 0.32)
        return []
    if tp <= kv:
        return [f"{host}: vLLM would refuse it: 'Decode context parallelism for GQA/MQA requires "
                f"`--tensor-parallel-size` ({tp}) to be greater than the model's total number of KV heads ({kv}).': "
                f"{fix}, or raise tensor_parallel_size above {kv}"]
    if dcp > tp // kv:
        return [f"{host}: vLLM would refuse it: '`--decode-context-parallel-size` ({dcp}) exceeds the maximum "
                f"supported value ({tp // kv}) for `--tensor-parallel-size` ({tp}) and {kv} model KV heads.': lower "
                f"it to {tp // kv} or {fix}"]
    if (heads // kv) % dcp:
        return [f"{host}: vLLM would refuse it: \"The model's number of query heads per KV head ({heads // kv}) must "
                f"be divisible by `--decode-context-parallel-size` ({dcp}) for GQA/MQA.\": {fix}, or pin one that "
                f"divides {heads // kv}"]
    return []


def container_env_device_visibility(host: str, ctx: Mapping[str, Any]) -> list[str]:
    return [f"{host}: vllm_fleet_env.{name} fights the launch record: the container only has the GPUs the record "
            "gives it (numbered from 0), so vLLM would see fewer or none: remove it (pin the GPUs with "
            "vllm_fleet_policy or the host's replicas instead)" for name in _DEVICE_ENV if name in ctx["env"]]


def container_env_port(host: str, ctx: Mapping[str, Any]) -> list[str]:
    value = ctx["env"].get("VLLM_PORT")
    if value is None:
        return []
    try:
        port = int(str(value))
    except ValueError:
        return [f"{host}: vllm_fleet_env.VLLM_PORT = {value!r} is not an integer port (vLLM reads it as its first "
                "internal port, vllm/envs.py get_vllm_port): remove it, or give a port number"]
    used = {p for p in ctx["ports"].values() if isinstance(p, int)}
    if port in used:
        return [f"{host}: vllm_fleet_env.VLLM_PORT = {port} is vLLM's first internal port and also a port of the "
                "launch record (the API server listens there): remove it, or move it clear of the host's ports"]
    return []


def scheduler_pins(host: str, ctx: Mapping[str, Any]) -> list[str]:
    """The scheduler limits on what is pinned (the planner's computed values are checked by :func:`check_plan`)."""
    args = dict(ctx["args"])
    if _pin(args, "max_model_len") is None and _derived_len(ctx["config"]) is not None:
        args.setdefault("max_model_len", _derived_len(ctx["config"]))
    return _scheduler(host, args, pinned=True)


# --- after planning: the final engine arguments -------------------------------------------------------------------

def _scheduler(host: str, args: Mapping[str, Any], *, pinned: bool) -> list[str]:
    tokens, seqs = _int(_pin(args, "max_num_batched_tokens")), _int(_pin(args, "max_num_seqs"))
    length = _int(_pin(args, "max_model_len"))
    chunked = _pin(args, "enable_chunked_prefill")
    where = "vllm_fleet_engine_args" if pinned else "the plan"
    errors: list[str] = []
    if tokens is not None and length is not None and tokens < length and chunked is False:
        errors.append(f"{host}: vLLM would refuse it: 'max_num_batched_tokens ({tokens}) is smaller than "
                      f"max_model_len ({length}). [...] Please increase max_num_batched_tokens or decrease "
                      f"max_model_len.' (chunked prefill is off in {where}): remove enable_chunked_prefill: false, "
                      f"or pin max_num_batched_tokens >= {length}, or a max_model_len <= {tokens}")
    if tokens is not None and seqs is not None and tokens < seqs:
        errors.append(f"{host}: vLLM would refuse it: 'max_num_batched_tokens ({tokens}) must be greater than or "
                      f"equal to max_num_seqs ({seqs}).' ({where}): raise max_num_batched_tokens to {seqs} or "
                      f"lower max_num_seqs to {tokens}")
    active = _int(_pin(args, "max_num_active_seqs"))
    if active is not None and seqs is not None and active > seqs:
        errors.append(f"{host}: vLLM would refuse it: 'max_num_active_seqs ({active}) cannot be greater than "
                      f"max_num_seqs ({seqs}).' ({where}): lower max_num_active_seqs to {seqs} or remove it")
    threshold = _int(_pin(args, "long_prefill_token_threshold"))
    if threshold is not None and length is not None and threshold > length:
        errors.append(f"{host}: vLLM would refuse it: 'long_prefill_token_threshold ({threshold}) cannot be "
                      f"greater than the max_model_len ({length}).' ({where}): lower it to {length} or remove it")
    return errors


#: The checks by name (what :mod:`.startup_rules` entries point at), in the order :func:`check_host` runs them.
CHECKS: dict[str, Callable[[str, Mapping[str, Any]], list[str]]] = {
    "scheduler_pins": scheduler_pins,
    "quantization_matches_checkpoint": quantization_matches_checkpoint,
    "quantization_not_deprecated": quantization_not_deprecated,
    "attention_backend_exists": attention_backend_exists,
    "expert_parallel_needs_moe": expert_parallel_needs_moe,
    "eplb_needs_expert_parallel": eplb_needs_expert_parallel,
    "lora_cpu_slots": lora_cpu_slots,
    "decode_context_parallel": decode_context_parallel,
    "container_env_device_visibility": container_env_device_visibility,
    "container_env_port": container_env_port,
}


def check_host(host: str, item: Mapping[str, Any], config: Mapping[str, Any] | None) -> list[str]:
    """One host's pins against vLLM's start-up rules, before planning.

    :param item: the host's :func:`.record.host_input` (``options``, ``facts``, ``env``, ``ports``)
    :param config: the model's ``config.json`` (None when it cannot be read: the planner reports that)
    """
    options = item.get("options") or {}
    pinned = options.get("engine_args")
    args: Mapping[str, Any] = pinned if isinstance(pinned, Mapping) else {}
    given = item.get("env")
    env: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    ctx = {"args": dict(args), "config": dict(config or {}), "facts": dict(item.get("facts") or {}),
           "env": dict(env), "ports": dict(item.get("ports") or {}),
           "series": _series(options.get("vllm_version"))}
    errors: list[str] = []
    for name, check in CHECKS.items():
        if config is None and name not in ("container_env_device_visibility", "container_env_port"):
            continue
        errors += check(host, ctx)
    return errors


def check_plan(host: str, plan: Mapping[str, Any]) -> list[str]:
    """The scheduler limits vLLM's SchedulerConfig enforces, on the plan's final engine arguments."""
    final = plan.get("engine_args")
    return _scheduler(host, final if isinstance(final, Mapping) else {}, pinned=False)


def check_groups(hosts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One multi-node group serves one model instance: one checkpoint and one vLLM version on all its hosts."""
    groups: dict[str, list[str]] = {}
    for host, item in hosts.items():
        if item.get("multinode_group"):
            groups.setdefault(str(item["multinode_group"]), []).append(host)
    errors: list[str] = []
    for group, members in groups.items():
        for what, key, fix in (("checkpoint", "model", "set vllm_fleet_model once for the group (group_vars)"),
                               ("vLLM version", "vllm_version",
                                "set vllm_fleet_vllm_version once for the group (group_vars)")):
            seen: dict[str, list[str]] = {}
            for host in members:
                value = hosts[host].get("model") if key == "model" else (
                    hosts[host].get("options") or {}).get("vllm_version")
                seen.setdefault(str(value or ("default" if key == "vllm_version" else "")), []).append(host)
            if len(seen) > 1:
                parts = "; ".join(f"{', '.join(names)}: {value}" for value, names in seen.items())
                errors.append(f"{members[0]}: multi-node group {group} runs one model instance, but its hosts name "
                              f"{len(seen)} different {what}s ({parts}): {fix}")
    return errors
