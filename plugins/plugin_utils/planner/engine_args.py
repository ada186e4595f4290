"""User engine arguments in and out: normalise and validate them, refuse removed flags, render CLI args."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .errors import PlanError, as_int
from .model import ModelSpec
from .options import ENGINE_ARG_ORDER, FLOAT_ENGINE_ARGS, INT_ENGINE_ARGS, option
from .rules import VersionRules

ENGINE_ARG_ALIASES = {"tp": "tensor-parallel-size", "pp": "pipeline-parallel-size"}
#: The integer engine args (dash form) → the least value the planner accepts: 1 ("must be positive"), or 0 where
#: options.INT_ENGINE_ARGS starts at 0 (``seed``, ``optimization-level``). The upper bounds are preflight's.
INT_ARGS: dict[str, int] = {key.replace("_", "-"): min(low, 1) for key, (low, _high) in INT_ENGINE_ARGS.items()}


def _typed_value(key: str, value: Any) -> Any:
    """One user value checked and converted for its (dash-form) key, by its declaration (``options.py``)."""
    declared = option(key)
    if key in INT_ARGS:
        number = as_int(value, f"--{key}")
        if number < INT_ARGS[key]:
            raise PlanError(f"--{key} must be positive, not {number}" if INT_ARGS[key] > 0
                            else f"--{key} must be 0 or more, not {number}")
        return number
    if declared is not None and declared.kind == "float" and declared.name in FLOAT_ENGINE_ARGS:
        low, high = FLOAT_ENGINE_ARGS[declared.name]
        try:
            fraction = float(value)
        except (TypeError, ValueError):
            raise PlanError(f"--{key} must be a number, not {value!r}") from None
        if not low < fraction <= high:
            raise PlanError(f"--{key} must be in ({low:g}, {high:g}], not {fraction}: {declared.help}")
        return fraction
    if declared is not None and declared.kind == "bool" and declared.owner == "planner" \
            and not isinstance(value, bool):
        raise PlanError(f"--{key} is a switch (true/false), not {value!r}")
    return value


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
        if key in rules.not_yet_args:
            raise PlanError(f"--{key} does not exist in vLLM {rules.text} (serve exits 2 on it): it is "
                            f"{rules.not_yet_args[key]}; target that release or drop it")
        result[key] = _typed_value(key, value)
    return result


def parse_extra_args(extra: list[str], rules: VersionRules) -> None:
    """Refuse removed (or not yet added) flags and removed VLLM_* variables in free-form extra args."""
    removed_env = {entry.name: entry.instead() for entry in rules.removed_env}
    for item in extra:
        text = str(item).strip()
        if text.startswith("--"):
            flag = text[2:].split("=", 1)[0]
            if flag in rules.removed_flags:
                raise PlanError(f"extra arg --{flag} was removed from vLLM {rules.text}: "
                                f"use {rules.removed_flags[flag]}")
            if flag in rules.not_yet_args:
                raise PlanError(f"extra arg --{flag} does not exist in vLLM {rules.text}: it is "
                                f"{rules.not_yet_args[flag]}")
        name = text.split("=", 1)[0]
        if name in removed_env:
            raise PlanError(f"{name} no longer exists in vLLM {rules.text}: use {removed_env[name]}")


def wanted_max_model_len(spec: ModelSpec, user: dict[str, Any], limit_note: str = "") -> int:
    """The user's --max-model-len (refused above the model's limit), else the model's limit.

    ``limit_note`` is appended to the limit in the refusal (e.g. how the limit was derived).
    """
    model_max = spec.max_model_len
    if "max-model-len" in user and int(user["max-model-len"]) > model_max:
        raise PlanError(f"--max-model-len {user['max-model-len']} is above the model's limit of {model_max} "
                        f"tokens{limit_note}: lower it")
    return int(user.get("max-model-len", model_max))


def ordered_engine_args(engine_args: dict[str, Any]) -> dict[str, Any]:
    """Engine args in ENGINE_ARG_ORDER first, then the rest in the order they were set."""
    ordered = {k: engine_args[k] for k in ENGINE_ARG_ORDER if k in engine_args}
    ordered.update({k: v for k, v in engine_args.items() if k not in ordered})
    return ordered


def option_argv(key: str, value: Any, negatable: Iterable[str] = ()) -> list[str]:
    """One engine arg as ``vllm serve`` reads it, the way vLLM's own ``--config`` loader turns a YAML key into argv
    (``FlexibleArgumentParser.load_config_file``, vllm/utils/argparse_utils.py:616-634 in 0.32.0): ``true`` → ``--key``;
    ``false`` → ``--no-key`` where the release has that spelling (``negatable``, snake_case names: the
    ``argparse.BooleanOptionalAction`` switches), else nothing (a plain ``store_true`` switch is off by default); a
    mapping → one JSON argument (``--speculative-config '{"method": "ngram", ...}'``); a list → the flag then each
    item (an empty list, like vLLM's loader, gives nothing); ``None`` → nothing; anything else → its text."""
    if value is None:
        return []
    if isinstance(value, bool):
        if value:
            return [f"--{key}"]
        return [f"--no-{key}"] if key.replace("-", "_") in set(negatable) else []
    if isinstance(value, dict):
        return [f"--{key}", json.dumps(value)]
    if isinstance(value, (list, tuple)):
        return [f"--{key}", *(json.dumps(v) if isinstance(v, (dict, list)) else str(v) for v in value)] if value else []
    return [f"--{key}", str(value)]


def to_cli_args(engine_args: dict[str, Any], negatable: Iterable[str] = (),
                extra_args: Iterable[str] = ()) -> list[str]:
    """Engine args -> the argument list for ``vllm serve`` (the model is positional there), then the user's extra
    args verbatim (after every engine arg, as the launch record's command puts them after ``--config``: on vLLM's
    command line a later flag wins)."""
    names = frozenset(negatable)
    args: list[str] = []
    for key, value in engine_args.items():
        if key == "model":
            continue
        args += option_argv(key, value, names)
    return args + [str(a) for a in extra_args]
