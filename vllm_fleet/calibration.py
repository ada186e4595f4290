"""Compare the planner's predictions with real vLLM start-up observations.

An observation is one JSON object (one per line in a ``.jsonl`` file): the configuration vLLM was
started with and what it logged (``observed.kv_cache_tokens`` = "GPU KV cache size: N tokens").
``vllm-fleet calibrate OBSERVATIONS.jsonl --models MODEL_CONFIGS.json`` prints the error per case and the
summary figures the planner is held to (median absolute error, worst over-prediction) on the V1 engine, overall
and per architecture kind.

``vllm-fleet calibrate --kv-layout LAYOUT.jsonl`` replays start-ups whose log gives "Available KV cache memory":
the planner's KV-cache layout alone (groups, block size, state pages: memory.kv_layout) turns that memory into
blocks, concurrency and "GPU KV cache size" tokens, so the error is the layout's, not the memory model's. Each
observation names its real config.json (``config``, relative to the observations file).
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.hardware import lookup_gpu
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.memory import (
    KvLayout,
    kind_counts,
    kv_layout,
    state_blocks_per_request,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model import (
    ModelConfigError,
    ModelSpec,
    parse_model_config,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import (
    parse_version,
    rules_for,
    scheduler_defaults,
)


@dataclass
class CaseResult:
    case_id: str
    engine: str
    version: str
    observed_tokens: int
    predicted_tokens: int | None
    error: float | None  # (predicted - observed) / observed
    observed_kv_gib: float | None
    predicted_kv_gib: float | None
    note: str = ""
    kind: str = ""  # architecture kind (architecture_kind)
    # component -> (observed GiB, predicted GiB), where the log gives the component (COMPONENTS)
    components: dict[str, tuple[float, float]] | None = None

    @property
    def current_engine(self) -> bool:
        """V1 and vLLM >= 0.10: the observations the accuracy targets apply to."""
        try:
            return self.engine == "v1" and parse_version(self.version) >= (0, 10, 0)
        except ValueError:
            return False


def architecture_kind(spec: ModelSpec) -> str:
    """The kind a case is reported under: its KV-cache layout family."""
    kinds = set(spec.layer_kinds)
    if spec.state is not None:
        return f"hybrid {spec.state.kind.replace('_', '-')}"
    if "chunked" in kinds:
        return "chunked local"
    if "sliding" in kinds:
        return "sliding window"
    if spec.mla:
        return "MLA"
    if spec.multimodal:
        return "multimodal"
    return "MoE" if spec.is_moe else "dense"


def _kind_of(model_config: dict[str, Any]) -> str:
    try:
        return architecture_kind(parse_model_config(model_config))
    except ModelConfigError:
        return "?"


def _version(text: str) -> str:
    match = re.search(r"\d+\.\d+(\.\d+)?", text)
    if not match:
        raise ValueError(f"no version in {text!r}")
    return match.group(0)


def observation_inputs(obs: dict[str, Any], model_config: dict[str, Any]) -> dict[str, Any]:
    """Planner keyword arguments that reproduce one observation's configuration."""
    name = str(obs["gpu_name"]).split("(", maxsplit=1)[0].strip()
    sku = lookup_gpu(name)
    visible_mib = round(float(obs["gpu_mem_gib_total"]) * 1024)
    gpu = {"name": name, "memory_total_mib": visible_mib, "memory_free_mib": visible_mib, "memory_used_mib": 0,
           "compute_capability": sku.compute_capability if sku else "8.0"}
    count = int(obs.get("num_gpus") or obs.get("tp", 1) * obs.get("pp", 1))
    facts = {"gpus": [dict(gpu, index=i) for i in range(count)],
             "nvlink_domains": [list(range(count))] if count > 1 else []}
    engine_args: dict[str, Any] = {
        "tensor_parallel_size": obs.get("tp", 1),
        "gpu_memory_utilization": obs.get("gpu_memory_utilization"),
        "max_model_len": obs.get("max_model_len"),
    }
    if (obs.get("pp") or 1) > 1:
        engine_args["pipeline_parallel_size"] = obs["pp"]
    if obs.get("enforce_eager"):
        engine_args["enforce_eager"] = True
    text = " ".join(str(obs.get(k, "")) for k in ("notes",)) + " ".join(obs.get("evidence", []))
    # The non-default args the log prints: expert parallelism is the user's choice there, reproduce it.
    if re.search(r"enable_expert_parallel['\"]?:? (True|true)", text):
        engine_args["enable_expert_parallel"] = True
    offline = bool(re.search(r"\bLLM\(|[Oo]ffline LLM", text))
    # The observation ran vLLM's own scheduler defaults unless it says otherwise: reproduce them.
    version = _version(str(obs["vllm_version"]))
    if rules_for(version).engine == "v0":
        seqs, tokens = 256, max(int(obs.get("max_model_len") or 2048), 2048)
    else:
        defaults = scheduler_defaults(name, float(obs["gpu_mem_gib_total"]), 1, offline)
        seqs, tokens = defaults.max_num_seqs, defaults.max_num_batched_tokens
    engine_args["max_num_seqs"] = obs.get("max_num_seqs") or seqs
    engine_args["max_num_batched_tokens"] = tokens
    quant = str(obs.get("quantization") or "none")
    if "online" in quant and quant.startswith("fp8"):
        engine_args["quantization"] = "fp8"
    if obs.get("kv_cache_dtype") not in (None, "auto"):
        engine_args["kv_cache_dtype"] = obs["kv_cache_dtype"]
    return {
        "facts": facts,
        "model_config": model_config,
        "vllm_version": version,
        "engine_args": engine_args,
        "policy": {"offline": offline, "max_nodes": max(1, int(obs.get("pp") or 1))},
        "profile": "chat",
    }


#: Per-GPU memory components a start-up log can give: (observed key, the plan's memory_gib key).
COMPONENTS: tuple[tuple[str, str, str], ...] = (
    ("weights", "weights_gib", "weights"),
    ("activation", "activation_peak_gib", "activation"),
    ("non-torch", "non_torch_gib", "non_torch"),
    ("CUDA graphs", "cudagraph_gib", "cuda_graph"),
    ("KV cache", "kv_cache_gib", "kv_cache"),
)
#: A component whose median error differs between two vLLM releases by more than this (of the observed figure)
#: is flagged: vLLM changes these terms between releases (issue 26, item 5).
DRIFT_THRESHOLD = 0.25


def _components(observed: dict[str, Any], memory_gib: dict[str, float]) -> dict[str, tuple[float, float]]:
    result = {}
    for name, obs_key, pred_key in COMPONENTS:
        value = observed.get(obs_key)
        if value is not None and float(value) > 0:
            result[name] = (float(value), float(memory_gib[pred_key]))
    return result


def evaluate(observations: list[dict[str, Any]], model_configs: dict[str, dict[str, Any]]) -> list[CaseResult]:
    results: list[CaseResult] = []
    for obs in observations:
        observed = obs["observed"]
        tokens = int(observed.get("kv_cache_tokens") or 0)
        version = _version(str(obs["vllm_version"]))
        try:
            kwargs = observation_inputs(obs, model_configs[obs["model"]])
            result = plan(**kwargs)
            predicted = int(result["prediction"]["kv_cache_tokens"])
            results.append(CaseResult(obs["id"], str(obs.get("engine")), version, tokens, predicted,
                                      (predicted - tokens) / tokens if tokens else None,
                                      observed.get("kv_cache_gib"), result["prediction"]["kv_cache_gib"],
                                      kind=_kind_of(kwargs["model_config"]),
                                      components=_components(observed, result["memory_gib"])))
        except (PlanError, KeyError) as exc:
            results.append(CaseResult(obs["id"], str(obs.get("engine")), version, tokens, None, None,
                                      observed.get("kv_cache_gib"), None, note=str(exc)))
    return results


def summary(results: list[CaseResult]) -> dict[str, Any]:
    """Median absolute error and worst over-prediction, on current-engine cases and on all."""
    def figures(rows: list[CaseResult]) -> dict[str, Any]:
        errors = [r.error for r in rows if r.error is not None]
        return {
            "cases": len(rows),
            "planned": len(errors),
            "median_abs_error": statistics.median(abs(e) for e in errors) if errors else None,
            "max_overprediction": max(errors) if errors else None,
            "max_abs_error": max(abs(e) for e in errors) if errors else None,
        }

    return {"current_engine": figures([r for r in results if r.current_engine]), "all": figures(results)}


def component_errors(results: list[CaseResult]) -> dict[str, dict[str, Any]]:
    """Per memory component, over the cases whose log gives it: (predicted - observed) / observed, its median
    |error| (also in GiB: a small component's relative error is large), the worst (signed), the cases, the median
    error per vLLM minor release, and ``drift``: whether the median error moves between releases by more than
    DRIFT_THRESHOLD."""
    table: dict[str, dict[str, Any]] = {}
    for name, _obs, _pred in COMPONENTS:
        errors: list[float] = []
        gib: list[float] = []
        by_version: dict[str, list[float]] = {}
        for r in results:
            if not r.components or name not in r.components:
                continue
            observed, predicted = r.components[name]
            error = (predicted - observed) / observed
            errors.append(error)
            gib.append(predicted - observed)
            by_version.setdefault(".".join(r.version.split(".")[:2]), []).append(error)
        if not errors:
            continue
        medians = {v: statistics.median(e) for v, e in sorted(by_version.items(), key=lambda kv: parse_version(kv[0]))}
        spread = max(medians.values()) - min(medians.values())
        table[name] = {"cases": len(errors), "median_abs_error": statistics.median(abs(e) for e in errors),
                       "median_abs_error_gib": round(statistics.median(abs(g) for g in gib), 3),
                       "worst_error": max(errors, key=abs), "by_version": medians,
                       "drift": len(medians) > 1 and spread > DRIFT_THRESHOLD}
    return table


def format_component_table(results: list[CaseResult]) -> str:
    """The per-component error table (component, median |error|, worst, cases) and the version-drift flags."""
    lines = [f"{'component':12} {'median |err|':>12} {'GiB':>6} {'worst':>9} {'cases':>5}  median per vLLM release"]
    for name, f in component_errors(results).items():
        versions = ", ".join(f"{v} {m * 100:+.0f}%" for v, m in f["by_version"].items())
        flag = "  DRIFT: the error moves between releases" if f["drift"] else ""
        lines.append(f"{name:12} {f['median_abs_error'] * 100:11.1f}% {f['median_abs_error_gib']:6.2f} "
                     f"{f['worst_error'] * 100:+8.1f}% "
                     f"{f['cases']:>5}  {versions}{flag}")
    return "\n".join(lines)


def _figures(errors: list[float]) -> dict[str, Any]:
    return {"cases": len(errors), "median_abs_error": statistics.median(abs(e) for e in errors) if errors else None,
            "worst_error": max(errors, key=abs) if errors else None}


def summary_by_kind(rows: list[Any]) -> dict[str, dict[str, Any]]:
    """Median |error| and the worst error (signed) per architecture kind, over the planned cases."""
    kinds: dict[str, list[float]] = {}
    for r in rows:
        if r.error is not None:
            kinds.setdefault(r.kind, []).append(r.error)
    return {kind: _figures(errors) for kind, errors in sorted(kinds.items())}


def _kind_lines(rows: list[Any]) -> list[str]:
    return [f"  {kind}: {f['cases']} case{'s' if f['cases'] > 1 else ''}, median |error| "
            f"{f['median_abs_error'] * 100:.1f}%, worst {f['worst_error'] * 100:+.1f}%"
            for kind, f in summary_by_kind(rows).items()]


def format_table(results: list[CaseResult]) -> str:
    lines = [f"{'case':46} {'eng':3} {'vLLM':8} {'observed':>10} {'predicted':>10} {'error':>8}  kv GiB obs/pred"]
    for r in results:
        err = f"{r.error * 100:+.1f}%" if r.error is not None else "n/a"
        pred = str(r.predicted_tokens) if r.predicted_tokens is not None else "-"
        kv = f"{r.observed_kv_gib}/{r.predicted_kv_gib}"
        lines.append(f"{r.case_id[:46]:46} {r.engine:3} {r.version:8} {r.observed_tokens:>10} {pred:>10} {err:>8}  {kv}"
                     + (f"  ({r.note})" if r.note else ""))
    s = summary(results)
    for key, label in (("current_engine", "V1, vLLM >= 0.10"), ("all", "all cases")):
        f = s[key]
        if f["median_abs_error"] is not None:
            lines.append(f"{label}: {f['planned']}/{f['cases']} planned, median |error| "
                         f"{f['median_abs_error'] * 100:.1f}%, worst over-prediction {f['max_overprediction'] * 100:+.1f}%")
    lines.append("per kind (V1, vLLM >= 0.10):")
    lines.extend(_kind_lines([r for r in results if r.current_engine]))
    lines.append("per memory component (every case whose log gives it; error = (predicted - observed) / observed):")
    lines.append(format_component_table(results))
    return "\n".join(lines)


# --- The KV-cache layout alone, from the logged "Available KV cache memory" --------------------------------------

_KV_BYTES = {"auto": 0, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "bfloat16": 2, "float16": 2, "float32": 4}


@dataclass
class LayoutResult:
    case_id: str
    kind: str
    version: str
    observed_tokens: int
    predicted_tokens: int | None
    error: float | None
    observed_concurrency: float | None
    predicted_concurrency: float | None
    block_size: int | None
    note: str = ""


def layout_prediction(obs: dict[str, Any], config: dict[str, Any]) -> tuple[int, float, int, str]:
    """(tokens, concurrency, block size, kind) the planner's layout gives for the logged available KV memory.

    Blocks = available // bytes per block (kv_cache_utils.py), concurrency = blocks / blocks per request, tokens =
    int(concurrency x max_model_len). Speculative decoding (``num_speculative_tokens``) widens the state pages and
    adds state blocks; an MTP drafter's layers join the full-attention group (``mtp`` method).
    """
    spec = parse_model_config(config)
    tp = int(obs.get("tp") or 1)
    kv_bytes = _KV_BYTES[str(obs.get("kv_cache_dtype") or "auto")] or spec.dtype_bytes
    num_spec = int(obs.get("num_speculative_tokens") or 0)
    counts = dict(kind_counts(spec.layer_kinds))
    if num_spec and obs.get("speculative_method") == "mtp":
        counts["full"] = counts.get("full", 0) + spec.mtp_layers
    prefix = bool(obs.get("enable_prefix_caching", True))
    max_len = int(obs["max_model_len"])
    in_flight = in_flight_tokens(obs)
    layout = kv_layout(spec, tuple(counts.items()), tp, kv_bytes, int(obs.get("block_size") or 16), max_len,
                       in_flight, state_blocks=state_blocks_per_request(spec, prefix), num_spec=num_spec)
    available = int(float(obs["observed"]["available_kv_gib"]) * 1024**3)
    blocks = available // layout.bytes_per_block
    concurrency = blocks / layout.blocks_per_request
    return logged_tokens(obs, layout, blocks, concurrency), concurrency, layout.block_size, architecture_kind(spec)


#: The first release whose sliding-window and chunked-local groups hold the window plus every in-flight batch
#: (VllmConfig.max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens, 0.26.0 config/vllm.py:512-529,
#: kv_cache_interface.py:517 / :584; 0.32.0 config/vllm.py:577-598). Before it the window plus one batch:
#: 0.25.0 kv_cache_interface.py:495 (chunked) and :561 (sliding).
WINDOW_HOLDS_IN_FLIGHT = (0, 26, 0)


def in_flight_tokens(obs: dict[str, Any]) -> int:
    """Tokens past the window a sliding or chunked group holds per request in the observation's release: one batch
    before 0.26; from 0.26 every concurrent batch (2 under async scheduling at PP 1, the default; ``pp`` at PP > 1)."""
    batched = int(obs.get("max_num_batched_tokens") or 8192)
    if parse_version(_version(str(obs["vllm_version"]))) < WINDOW_HOLDS_IN_FLIGHT:
        return batched
    pp = int(obs.get("pp") or 1)
    return (2 if pp == 1 else pp) * batched


#: The first release whose "GPU KV cache size" is int(max_concurrency x max_model_len) (0.22.0
#: v1/core/kv_cache_utils.py:1724-1731, the comment there names the formula it replaced). Before it (the 0.19.0 line
#: vllm-project/vllm#40691 quotes from kv_cache_utils.py:1319, PR #38364) the line printed
#: num_blocks // len(kv_cache_groups) x min block size: for a hybrid model a different figure from the concurrency
#: line's. Observed here: the 0.13.0 / 0.19.x logs follow the old formula, a 0.20.1rc1 build the new one.
TOKENS_FROM_CONCURRENCY = (0, 20, 0)


def logged_tokens(obs: dict[str, Any], layout: KvLayout, blocks: int, concurrency: float) -> int:
    """The "GPU KV cache size" the observation's vLLM release prints for ``blocks`` blocks of ``layout``."""
    if parse_version(_version(str(obs["vllm_version"]))) >= TOKENS_FROM_CONCURRENCY:
        return int(concurrency * int(obs["max_model_len"]))
    groups = sum(n for _kind, n, _blocks in layout.groups) or 1
    return blocks // groups * layout.block_size


def evaluate_layout(observations: list[dict[str, Any]], base: Path) -> list[LayoutResult]:
    """Replay each observation's layout; ``config`` paths are relative to ``base``."""
    results: list[LayoutResult] = []
    for obs in observations:
        observed = obs["observed"]
        tokens = int(observed["kv_cache_tokens"])
        version = _version(str(obs["vllm_version"]))
        try:
            config = json.loads((base / obs["config"]).read_text(encoding="utf-8"))
            predicted, concurrency, block, kind = layout_prediction(obs, config)
            results.append(LayoutResult(obs["id"], kind, version, tokens, predicted, (predicted - tokens) / tokens,
                                        observed.get("max_concurrency"), round(concurrency, 2), block))
        except (ModelConfigError, KeyError, OSError) as exc:
            results.append(LayoutResult(obs["id"], "?", version, tokens, None, None, observed.get("max_concurrency"),
                                        None, None, note=str(exc)))
    return results


def format_layout_table(results: list[LayoutResult]) -> str:
    lines = [f"{'case':44} {'kind':20} {'vLLM':7} {'observed':>9} {'predicted':>9} {'error':>7}  conc obs/pred  block"]
    for r in results:
        err = f"{r.error * 100:+.2f}%" if r.error is not None else "n/a"
        pred = str(r.predicted_tokens) if r.predicted_tokens is not None else "-"
        lines.append(f"{r.case_id[:44]:44} {r.kind:20} {r.version:7} {r.observed_tokens:>9} {pred:>9} {err:>7}  "
                     f"{r.observed_concurrency}/{r.predicted_concurrency}  {r.block_size}"
                     + (f"  ({r.note})" if r.note else ""))
    lines.append("per kind:")
    lines.extend(_kind_lines(results))
    return "\n".join(lines)
