# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Secrets in the wrong variable, and the state of the API-key secret.

A secret belongs in ``vllm_fleet_api_key`` or ``vllm_fleet_hf_token`` (ansible-vault): any other variable is written
into plans.json and the reports. :func:`secret_kind` recognises a secret by its name (any spelling: ``api_key``,
``--api-key``, ``VLLM_API_KEY``); :func:`secret_values` and :func:`holds_secret` find a secret's value elsewhere;
:func:`secret_error` is the refusal, which names where the secret is and where it goes, never the value.
:func:`api_key_problem` says whether the API key a deploy needs is missing or a placeholder.

The engine-argument, extra-argument and environment checks (:mod:`.engine_args`) and the host's inputs
(:mod:`.inputs`) call these. Pure (stdlib only, typed, no I/O).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

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

#: Name words that mark a secret wherever they appear (``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD``).
_SECRET_WORDS = {"SECRET", "PASSWORD", "PASSWD"}
#: Name words that mark a Hugging Face token when the name ends in TOKEN.
_HF_WORDS = {"HF", "HUGGING", "HUGGINGFACE"}


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


def secret_values(variables: Mapping[str, Any]) -> dict[str, str]:
    """The real (not placeholder) secret values set in ``variables`` → the variable that holds each."""
    values: dict[str, str] = {}
    for name in SECRET_VALUE_VARIABLES:
        value = variables.get(name)
        if isinstance(value, str) and value.strip() and value.strip().lower() not in _PLACEHOLDER_SECRETS:
            values.setdefault(value.strip(), name)
    return values


def holds_secret(value: Any, secrets: Mapping[str, str] | None) -> str | None:
    """The secret variable whose value ``value`` is or contains (strings in dicts and lists too), else None.

    :param secrets: secret value → the variable that holds it (:func:`secret_values`)
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
    return next((kind for kind in (holds_secret(v, secrets) for v in items) if kind), None)


def secret_error(host: str, where: str, kind: str, var: str, verb: str = "holds") -> str:
    """One line that names where the secret is and where it goes; never the value itself.

    ``kind``: :func:`secret_kind`'s answer for a name, or the secret variable whose value was found.
    """
    if kind in SECRET_VALUE_VARIABLES:
        what, fix = f"the value of {kind}", _SECRET_FIX[SECRET_VALUE_VARIABLES[kind]][1]
    else:
        what, fix = _SECRET_FIX.get(kind, _SECRET_FIX["secret"])
    return f"{host}: {where} {verb} {what}, and {var} is written into plans.json and the reports: {fix}"


def api_key_problem(variables: Mapping[str, Any]) -> str | None:
    """What is wrong with the API-key secret when one is required: "missing", "placeholder", or None."""
    if variables.get("vllm_fleet_api_key_required", True) is not True:
        return None
    key = variables.get("vllm_fleet_api_key")
    if key is None:
        return "missing"
    if not isinstance(key, str) or key.strip().lower() in _PLACEHOLDER_SECRETS:
        return "placeholder"
    return None
