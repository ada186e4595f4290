# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""What a host asks of vLLM itself: pinned engine arguments (``vllm_fleet_engine_args``), extra ``vllm serve``
arguments (``vllm_fleet_extra_args``) and vLLM's environment (``vllm_fleet_env``), for the host's target vLLM.

The facts come from the planner: each release's names (``planner/engine_fields.py``), its removed and ignored
arguments, flags and environment variables (``planner/rules.py``, :func:`vllm_rules`), and the one table of engine
options (``planner/options.py``: types, ranges, choices, owner — which options the planner, the vllm_serve role or
the layout set, and what to set instead). Secrets are refused through :mod:`.secrets`.

Every check returns a list of one-line messages (empty = all good), each naming the host and saying what to change.
Pure (stdlib only, typed, no I/O).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

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
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.secrets import (
    holds_secret,
    secret_error,
    secret_kind,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.values import (
    did_you_mean,
    is_int,
    is_number,
    string_hint,
    type_name,
)

#: ``vllm serve`` options the vllm_serve role sets for every replica, and what to set instead (planner/options.py:
#: the deployment's options other than the model).
_SERVE_OWNED: dict[str, str] = {o.name: o.instead for o in OPTIONS if o.owner == "deployment" and o.instead}
#: Options the planner budgets when they are pinned in vllm_fleet_engine_args (EPLB's redundant experts and migration
#: buffers: planner/gpu_lane.py eplb_inputs), so vllm_fleet_extra_args must not carry them past it.
PIN_AS_ENGINE_ARGS = BUDGETED_PINS


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


def _as_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


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
        return [f"{host}: {var} must be a dict of engine arguments, got {type_name(args)}"]
    for key in sorted(args, key=str):
        value = args[key]
        where = f"{host}: {var}.{key}"
        kind = secret_kind(key)
        if kind is not None:
            errors.append(secret_error(host, f"{var}.{key}", kind, var))
            continue
        by_value = holds_secret(value, secrets)
        if by_value is not None:
            errors.append(secret_error(host, f"{var}.{key}", by_value, var))
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
            if not is_int(value):
                errors.append(f"{where} must be an integer, got {type_name(value)} {value!r}{string_hint(value)}")
            elif value < low or (high is not None and value > high):
                bound = f"{low}..{high}" if high is not None else f">= {low}"
                errors.append(f"{where} = {value} is out of range ({bound})")
        elif key in FLOAT_ENGINE_ARGS:
            low_f, high_f = FLOAT_ENGINE_ARGS[key]
            if not is_number(value):
                errors.append(f"{where} must be a number, got {type_name(value)} {value!r}{string_hint(value)}")
            elif not (low_f < float(value) <= high_f) or math.isnan(float(value)):
                errors.append(f"{where} = {value} is out of range: it must be > {low_f:g} and <= {high_f:g}")
        elif key in switches:
            if not isinstance(value, bool):
                errors.append(f"{where} must be true or false, got {type_name(value)} {value!r}")
        elif key in choices and value not in choices[key]:
            errors.append(f"{where} = {value!r} is not one of {', '.join(choices[key])}")
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
    return (f"{where} is not a vLLM {series} engine argument{did_you_mean(key, names)}: fix the name "
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
        return [f"{host}: vllm_fleet_extra_args must be a list of strings, got {type_name(extra)}"]
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
            errors.append(secret_error(host, f"vllm_fleet_extra_args has {flag}, which", kind,
                                       "vllm_fleet_extra_args", verb="takes"))
            skip_value = "=" not in text and len(words) == 1
            continue
        by_value = holds_secret(arg, secrets)
        if by_value is not None:
            errors.append(secret_error(host, f"vllm_fleet_extra_args[{i}]", by_value, "vllm_fleet_extra_args"))
            continue
        if not isinstance(arg, str):
            errors.append(f"{host}: vllm_fleet_extra_args[{i}] must be a string, got {type_name(arg)} {arg!r}")
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
                          f"{did_you_mean(name, known, _as_flag)}: fix the flag (vllm serve exits 2 on an "
                          "unrecognized argument)")
    return errors


def check_env(host: str, env: Any, vllm_version: str | None = None, *,
              secrets: Mapping[str, str] | None = None) -> list[str]:
    """Environment variables for vLLM: strings, none that vLLM removed, and no secret (by name, or a value of
    ``secrets``: value → the variable holding it; refused without the value)."""
    rules = vllm_rules(vllm_version)
    removed = {entry.name: entry for entry in rules.removed_env}
    if not isinstance(env, Mapping):
        return [f"{host}: vllm_fleet_env must be a dict of environment variables, got {type_name(env)}"]
    errors: list[str] = []
    for key in sorted(env, key=str):
        kind = secret_kind(key)
        by_value = None if kind else holds_secret(env[key], secrets)
        if kind is not None or by_value is not None:
            errors.append(secret_error(host, f"vllm_fleet_env.{key}", str(kind or by_value), "vllm_fleet_env"))
        elif key in removed:
            errors.append(f"{host}: vllm_fleet_env.{key} is unknown to vLLM {rules.series}: "
                          f"{_advice(removed[key], 'vllm_fleet_engine_args.')}")
        elif not isinstance(env[key], (str, int, float)) or isinstance(env[key], bool):
            errors.append(f"{host}: vllm_fleet_env.{key} must be a string, got {type_name(env[key])}")
    return errors
