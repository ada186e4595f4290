"""What starts taught the fleet, per (GPU SKU, model, vLLM version) (issue 30, item 3).

Pure Python, stdlib only, no I/O: the caller keeps the store (a JSON object, e.g. ``artifacts/learned.json``) and
passes it in; every function returns a new store or a view of it. One entry per key holds, per host, the
memory components vLLM logged at its last good start, and the correction (engine-arg changes with their
reasons) a failed start needed. Preflight of an identical host takes the correction instead of the estimate
and says so (:func:`learned_for`); a host whose KV pool is well below its twins' is flagged (:func:`drift`).

Components read from a vLLM 0.32 start-up log (:func:`components`; paths relative to ``site-packages/``):

- ``weights_gib``: "Model loading took X GiB memory" (``vllm/v1/worker/gpu_model_runner.py:5150``);
- ``kv_gib``: "Available KV cache memory: X GiB" (``vllm/v1/worker/gpu_worker.py:759-762``; the smallest worker);
  CPU: "Explicitly set (X/...) GiB for KV cache" (``vllm/v1/worker/cpu_worker.py:260``);
- ``kv_tokens``: "GPU KV cache size: N tokens" / "CPU KV cache size: N tokens" (``vllm/v1/core/kv_cache_utils.py``);
- ``cuda_graphs_gib``: "CUDA graph pool memory: X GiB (actual)" (``gpu_worker.py:971-979``), else "Graph
  capturing finished in N secs, took X GiB" (``gpu_model_runner.py:6582``).
"""

from __future__ import annotations

import copy
import re
import statistics
from collections.abc import Mapping
from typing import Any

from . import feedback

#: A host whose KV pool is this fraction below the median of its identical twins is a host problem.
DRIFT_TOLERANCE = 0.10

_WEIGHTS = re.compile(r"Model loading took ([\d.]+) GiB")
_GRAPH_POOL = re.compile(r"CUDA graph pool memory: ([\d.]+) GiB \(actual\)")
_GRAPH_TOOK = re.compile(r"Graph capturing finished in [\d.]+ secs?, took ([\d.]+) GiB")


def key(gpu_sku: str, model: str, vllm_version: str) -> str:
    """The store's key: identical hosts (same SKU) serving the same model on the same vLLM share it."""
    for part, name in ((gpu_sku, "gpu_sku"), (model, "model"), (vllm_version, "vllm_version")):
        if not isinstance(part, str) or not part:
            raise ValueError(f"{name} must be a non-empty string")
    return f"{gpu_sku}|{model}|{vllm_version}"


def key_for_input(item: Mapping[str, Any]) -> str:
    """The key of a host's planning input (preflight's ``record.host_input``): its SKU group, model and requested
    vLLM version (identical inputs plan identically)."""
    options = item.get("options") or {}
    model = item.get("model")
    return key(str(item.get("sku") or "no-sku"), model if isinstance(model, str) and model else "inline",
               str(options.get("vllm_version") or "default"))


def components(log: str) -> dict[str, float | int]:
    """The memory components of the last good start in a vLLM log (only those it logged)."""
    parsed = feedback.parse_startup_log(log)
    out: dict[str, float | int] = {}
    if parsed["kv_cache_gib"] is not None:
        out["kv_gib"] = parsed["kv_cache_gib"]
    if parsed["kv_cache_tokens"] is not None:
        out["kv_tokens"] = parsed["kv_cache_tokens"]
    for name, pattern in (("weights_gib", _WEIGHTS), ("cuda_graphs_gib", _GRAPH_POOL), ("cuda_graphs_gib", _GRAPH_TOOK)):
        found = pattern.findall(log)
        if found and name not in out:
            out[name] = float(found[-1])
    return out


def record(store: Mapping[str, Any], at: str, host: str, observed: Mapping[str, Any] | None = None,
           correction: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A new store with one host's start recorded under key ``at``.

    :param observed: :func:`components` of a good start (replaces the host's previous one).
    :param correction: a correction that made the start good (``planner.correction.propose`` result); kept
        for the key (identical hosts fail identically), with the host it was learned on.
    """
    new = copy.deepcopy(dict(store or {}))
    entry = new.setdefault(at, {"hosts": {}, "correction": None})
    if observed:
        entry["hosts"][host] = dict(observed)
    if correction and correction.get("changes"):
        entry["correction"] = {"changes": dict(correction["changes"]), "reasons": dict(correction.get("reasons") or {}),
                               "learned_on": host}
    return new


def learned_for(store: Mapping[str, Any], at: str, pinned: tuple[str, ...] | list[str] = ()) -> dict[str, Any] | None:
    """What preflight takes for a host of key ``at``: the learned changes (pins kept) with their reason."""
    entry = (store or {}).get(at)
    if not entry or not entry.get("correction"):
        return None
    corr = entry["correction"]
    changes = {k: v for k, v in corr["changes"].items() if k not in pinned}
    if not changes:
        return None
    starts = len(entry.get("hosts") or {})
    reasons = {k: (f"learned on {corr['learned_on']} (same GPU SKU, model and vLLM; {starts} good start(s) "
                   f"recorded): {corr['reasons'].get(k, 'a failed start needed it')}") for k in changes}
    return {"changes": changes, "reasons": reasons}


def drift(store: Mapping[str, Any], at: str, tolerance: float = DRIFT_TOLERANCE) -> list[dict[str, Any]]:
    """Hosts of key ``at`` whose KV pool is more than ``tolerance`` below the median of the others (two or more)."""
    hosts = {h: c for h, c in ((store or {}).get(at, {}).get("hosts") or {}).items() if c.get("kv_gib") is not None}
    flagged: list[dict[str, Any]] = []
    for host, comp in sorted(hosts.items()):
        twins = [float(c["kv_gib"]) for h, c in hosts.items() if h != host]
        if len(twins) < 1:
            continue
        median = statistics.median(twins)
        kv = float(comp["kv_gib"])
        if median > 0 and kv < median * (1 - tolerance):
            flagged.append({"host": host, "kv_gib": kv, "twins_median_gib": median,
                            "message": f"{host} logged {kv:.2f} GiB of KV, {100 * (1 - kv / median):.0f}% below its "
                                       f"identical twins ({median:.2f} GiB): a host problem (another process on the "
                                       "GPU, a different driver or ECC/MIG setting), not a plan problem"})
    return flagged
