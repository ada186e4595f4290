"""Read what the planner needs from a model directory on the controller (the I/O the core avoids).

:func:`plan_for_model` is the planner's entry for a model given as a path: used by the ``vllm_plan`` filter,
preflight's planning step (``preflight/planning.py`` ``try_plan``) and the ``vllm-fleet`` command.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from .core import PlanError, plan
from .rules import DEFAULT_VLLM_VERSION


class ModelFilesError(ValueError):
    """The model path is missing or its files are not what the planner needs."""


#: What a config.json must be instead of a binary file (the fix in the refusal).
_GIVE_INSTEAD = "give a Hugging Face model directory with its config.json (the planner reads config.json)"


def _refuse_binary(config_path: str, given_dir: bool) -> None:
    """Refuse a binary file where config.json should be: a GGUF checkpoint, safetensors, a tarball…

    Only the first bytes are read (a GGUF file is gigabytes).
    """
    try:
        with open(config_path, "rb") as handle:
            head = handle.read(4096)
    except OSError as exc:
        raise ModelFilesError(f"cannot read '{config_path}': {exc.strerror}") from None
    if head.startswith(b"GGUF"):
        what = "a GGUF checkpoint"
    elif b"\x00" in head:
        what = "a binary file"
    else:
        return
    where = f"'{config_path}' in the model directory" if given_dir else f"'{config_path}'"
    raise ModelFilesError(f"{where} is {what}, not a config.json: {_GIVE_INSTEAD}")


def _with_hf_quant_config(config: dict[str, Any], model_dir: str) -> dict[str, Any]:
    """config.json with ModelOpt's ``hf_quant_config.json`` as its ``quantization_config``, as vLLM reads it.

    vLLM (``transformers_utils/config.py``, "ModelOpt 0.29.0 and before saves the quantization config in a separate
    hf_quant_config.json") uses the file only when config.json has no ``quantization_config``; so does this.
    """
    quant_path = os.path.join(model_dir, "hf_quant_config.json")
    if config.get("quantization_config") is not None or not os.path.isfile(quant_path):
        return config
    try:
        with open(quant_path, encoding="utf-8") as handle:
            quant = json.load(handle)
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFilesError(f"cannot read '{quant_path}': {exc}") from None
    except json.JSONDecodeError as exc:
        raise ModelFilesError(f"'{quant_path}' is not valid JSON (line {exc.lineno}: {exc.msg}): fix or remove it "
                              "(vLLM reads it for the checkpoint's quantization)") from None
    if not isinstance(quant, dict):
        raise ModelFilesError(f"'{quant_path}' must hold a JSON object (ModelOpt's quantization description)")
    return {**config, "quantization_config": quant}


def load_model(path: str) -> tuple[dict[str, Any], int | None, str]:
    """Return (config dict, safetensors total bytes or None, model directory) for a directory or a config.json.

    ``metadata.total_size`` of ``model.safetensors.index.json`` gives the real weight bytes when present; a ModelOpt
    ``hf_quant_config.json`` beside config.json becomes its ``quantization_config`` (:func:`_with_hf_quant_config`).
    """
    if not path:
        raise ModelFilesError("no model given: pass a model directory or its config.json")
    path = os.path.expanduser(str(path))
    if os.path.isdir(path):
        model_dir, config_path = path, os.path.join(path, "config.json")
    elif os.path.isfile(path):
        model_dir, config_path = os.path.dirname(os.path.abspath(path)), path
    else:
        raise ModelFilesError(f"model path '{path}' does not exist: give a model directory or a config.json")
    if not os.path.isfile(config_path):
        raise ModelFilesError(f"'{model_dir}' has no config.json: is it a Hugging Face model directory?")
    _refuse_binary(config_path, os.path.isdir(path))
    try:
        with open(config_path, encoding="utf-8") as handle:
            config = json.load(handle)
    except UnicodeDecodeError:
        raise ModelFilesError(f"'{config_path}' is not UTF-8 text (a binary file?), not a config.json: "
                              f"{_GIVE_INSTEAD}") from None
    except json.JSONDecodeError as exc:
        raise ModelFilesError(f"'{config_path}' is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except OSError as exc:
        raise ModelFilesError(f"cannot read '{config_path}': {exc.strerror}") from None
    if not isinstance(config, dict):
        raise ModelFilesError(f"'{config_path}' must hold a JSON object")
    tok_path = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.isfile(tok_path):
        try:
            with open(tok_path, encoding="utf-8") as handle:
                tok_max = json.load(handle).get("model_max_length")
            if isinstance(tok_max, int) and 0 < tok_max < 10**8:
                config = {**config, "tokenizer_model_max_length": tok_max}
        except (OSError, ValueError, AttributeError):
            pass
    config = _with_hf_quant_config(config, model_dir)
    total: int | None = None
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index_path):
        try:
            with open(index_path, encoding="utf-8") as handle:
                index = json.load(handle)
            size = (index.get("metadata") or {}).get("total_size")
            total = int(size) if size else None
        except (OSError, ValueError, AttributeError):
            total = None
    return config, total, model_dir


def load_facts(path: str) -> dict[str, Any]:
    """GPU facts from a JSON file: the gpu_facts shape, or wrapped as {"gpu": ...} / {"ansible_facts": {"gpu": ...}}."""
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise ModelFilesError(f"facts file '{path}' does not exist") from None
    except json.JSONDecodeError as exc:
        raise ModelFilesError(f"facts file '{path}' is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if isinstance(data, dict) and isinstance(data.get("ansible_facts"), dict):
        data = data["ansible_facts"]
    if isinstance(data, dict) and isinstance(data.get("gpu"), dict):
        data = data["gpu"]
    if not isinstance(data, dict):
        raise ModelFilesError(f"facts file '{path}' must hold a JSON object in the gpu_facts shape")
    return data


def plan_for_model(
    facts: Any,
    model: Any,
    *,
    profile: Any = "chat",
    vllm_version: Any = DEFAULT_VLLM_VERSION,
    engine_args: Mapping[str, Any] | None = None,
    policy: Mapping[str, Any] | None = None,
    extra_args: Iterable[Any] | None = None,
    served_model_path: Any = None,
    draft_model: Any = None,
    observed: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Plan one host (CONTRACT 2) for a model given as its config dict or as a path (directory or config.json).

    With a path, the safetensors index gives the weight bytes and the directory is the served model unless
    ``served_model_path`` (the path on the host) is given. ``draft_model``: the speculative_config's draft (EAGLE
    head or draft model) as its config dict or model directory. The options are the ``vllm_plan`` filter's.

    :raises PlanError: ``facts`` is not a dict, or the planner refuses (one line that says what to change).
    :raises ModelFilesError: the model path is missing or unreadable.
    :raises TypeError: an option of the wrong type.
    """
    if not isinstance(facts, dict):
        raise PlanError(f"input must be the gpu_facts dict, not {type(facts).__name__}")
    if isinstance(model, dict):
        config, weights_total, model_dir = model, None, None
    else:
        config, weights_total, model_dir = load_model(str(model))
    return plan(
        facts,
        config,
        profile=profile,
        vllm_version=str(vllm_version),
        engine_args=dict(engine_args or {}),
        policy=dict(policy or {}),
        weights_total_bytes=weights_total,
        model_path=str(served_model_path) if served_model_path else model_dir,
        extra_args=[str(a) for a in (extra_args or [])],
        draft_model_config=_draft_config(draft_model),
        observed=dict(observed) if observed else None,
    )


def _draft_config(draft_model: Any) -> dict[str, Any] | None:
    """The draft's config dict: given as one, or read from its directory / config.json like the target's."""
    if draft_model is None or isinstance(draft_model, dict):
        return draft_model
    config, _total, _dir = load_model(str(draft_model))
    return config
