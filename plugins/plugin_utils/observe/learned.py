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
  capturing finished in N secs, took X GiB" (``gpu_model_runner.py:6582``);
- ``non_torch_gib`` and ``activation_gib`` from the line vLLM prints after graph capture when it sized the pool by
  profiling (``gpu_worker.py:1013-1034``; 0.33: ``:1045-1066``): "Actual usage is C GiB for consumed memory
  (weights + non-torch), P GiB for peak activation, and G GiB for CUDAGraph memory": non-torch = C - weights; P is
  the profile's transient peak plus the CUDA-graph estimate charged before the KV pool (``gpu_worker.py:735-737``,
  ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` on by default, ``envs.py:2221-2222``), so activation = P - that
  estimate ("CUDA graph pool memory: ... X GiB (estimated)"), and the CUDA graphs charged to the budget are the
  estimate. Releases up to 0.10 printed the parts themselves: "Actual usage is W GiB for weight, P GiB for peak
  activation, N GiB for non-torch memory, and G GiB for CUDAGraph memory" (graphs captured outside the budget).

:func:`observation` bundles one replica's components with the host, the log's own time stamp of its KV line, the
vLLM version, the layout and the plan's estimate of each component: the plan feedback keeps it
(``artifacts/feedback/<host>.json``) and the next preflight hands it to the planner for identical hosts
(``planner/observed.py``).
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
_GRAPH_ESTIMATE = re.compile(r"CUDA graph pool memory: [\d.]+ GiB \(actual\), ([\d.]+) GiB \(estimated\)")
_USAGE_NEW = re.compile(r"Actual usage is ([\d.]+) GiB for consumed memory \(weights \+ non-torch\), ([\d.]+) GiB "
                        r"for peak activation, and ([\d.]+) GiB for CUDAGraph memory")
_USAGE_OLD = re.compile(r"Actual usage is ([\d.]+) GiB for weight, ([\d.]+) GiB for peak activation, ([\d.]+) GiB "
                        r"for non-torch memory, and ([\d.]+) GiB for CUDAGraph memory")
_LOG_TIME = re.compile(r"\b(?:INFO|WARNING|DEBUG) (\d\d-\d\d \d\d:\d\d:\d\d)")


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
    old = _USAGE_OLD.findall(log)
    new = _USAGE_NEW.findall(log)
    if old:
        weights, peak, non_torch, graphs = (float(v) for v in old[-1])
        out.setdefault("weights_gib", weights)
        out.update(activation_gib=peak, non_torch_gib=non_torch)
        out.setdefault("cuda_graphs_gib", graphs)
    elif new:
        consumed, peak, graphs = (float(v) for v in new[-1])
        estimate = _GRAPH_ESTIMATE.findall(log)
        charged = float(estimate[-1]) if estimate else 0.0
        out["activation_gib"] = round(max(peak - charged, 0.0), 2)
        if "weights_gib" in out:
            out["non_torch_gib"] = round(max(consumed - float(out["weights_gib"]), 0.0), 2)
        out["cuda_graphs_gib"] = charged if estimate else graphs
    return out


def logged_at(log: str) -> str | None:
    """The time stamp vLLM printed on the last KV-size line ("MM-DD hh:mm:ss", its logger's format), else on the
    last line it stamped: the start's own time, the same on every read of the same container's log."""
    lines = [line for line in log.splitlines() if _LOG_TIME.search(line)]
    sized = [line for line in lines if "KV cache size" in line]
    for line in reversed(sized or lines):
        return _LOG_TIME.search(line).group(1)  # type: ignore[union-attr]
    return None


#: Plan feedback component names -> the plan's ``memory_gib`` keys (the planner's names).
_PLAN_NAMES = {"weights_gib": "weights", "activation_gib": "activation", "non_torch_gib": "non_torch",
               "cuda_graphs_gib": "cuda_graph"}


def observation(host: str, plan: Mapping[str, Any], logs: list[Mapping[str, Any]],
                planned_with: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The first replica's good start as the planner takes it (``planner/observed.py``), None without a KV line.

    :param logs: ``[{"replica", "log"}]`` (``feedback.log_entries``).
    :param planned_with: the observation this plan was made with (the host's planning input), if any: on the same
        vLLM version and layout its ``estimated`` figures are kept, because this plan's ``memory_gib`` already holds
        vLLM's figures, not the estimate (taking them would cancel the offset on the next plan).
    """
    for entry in logs:
        log = str(entry.get("log") or "")
        comp = components(log)
        if "kv_tokens" not in comp:
            continue
        parallel = plan.get("parallel") or {}
        engine = plan.get("engine_args") or {}
        mem = plan.get("memory_gib") or {}
        layout = {"tp": parallel.get("tensor_parallel_size", 1), "pp": parallel.get("pipeline_parallel_size", 1),
                  "dp": parallel.get("data_parallel_size", 1), "eager": bool(engine.get("enforce-eager"))}
        estimated = {plan_name: mem[plan_name] for plan_name in _PLAN_NAMES.values() if plan_name in mem}
        if (planned_with and planned_with.get("vllm_version") == plan.get("vllm_version")
                and dict(planned_with.get("layout") or {}) == layout):
            estimated = {**estimated, **dict(planned_with.get("estimated") or {})}
        return {
            "host": host,
            "replica": str(entry.get("replica")),
            "at": logged_at(log) or "an unknown time",
            "vllm_version": plan.get("vllm_version"),
            "device": plan.get("device"),
            "layout": layout,
            "observed": {plan_name: comp[name] for name, plan_name in _PLAN_NAMES.items() if name in comp},
            "estimated": estimated,
            "kv_gib": comp.get("kv_gib"),
            "kv_tokens": comp.get("kv_tokens"),
        }
    return None


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
