"""Re-plan one host from what vLLM said when it failed to start (issue 30, item 2).

Pure Python, stdlib only, no I/O. Input: a failure as :func:`observe.startup_failure.classify` returns it
(kind, stage, the numbers vLLM printed), the engine args the host was started with (the launch record's
``engine_args``: the plan's values with the user's pins applied), the names the user pinned, the workload
profile's floors and the policy. Output: the changed engine args, each with a one-line reason, or no change and
the fix a person should make. A pinned value is never changed (the user's value wins); a knob is never taken
below the profile's floor:

- ``max-model-len`` >= the profile's request tokens (prompt + output): a request of the profile still fits;
- ``max-num-seqs`` >= the profile's ``min_concurrency``;
- ``gpu-memory-utilization`` / CPU ``kv-cache-memory-bytes``: the KV pool left still holds ``min_concurrency``
  requests of the profile (bytes per token from vLLM's own figures: available KV GiB / KV tokens it logged).

The knobs are tried in the policy's order for the failure's kind (:data:`DEFAULT_ORDER`); the first one that
fixes the failure within the floors is used, once. vLLM's messages and where they come from: see
``observe/startup_failure.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

GIB = 1 << 30
MIB = 1 << 20

#: The knobs tried per failure kind, in order. GPU and CPU lanes differ only for the KV pool's size: on the CPU
#: lane the pool is ``--kv-cache-memory-bytes`` (docs/notes/cpu-kv-sizing.md), on GPUs it follows
#: ``--gpu-memory-utilization``.
DEFAULT_ORDER: dict[str, tuple[str, ...]] = {
    "kv_too_small": ("max-model-len", "gpu-memory-utilization", "kv-cache-memory-bytes"),
    "oom_graph_capture": ("gpu-memory-utilization", "max-num-seqs"),
    "oom_profiling": ("max-num-batched-tokens", "max-num-seqs"),
    "free_memory_below_budget": ("gpu-memory-utilization",),
}

#: Utilisation moves in steps of 0.01 (two decimals, as vLLM's own messages and the plan print it).
UTIL_STEP = 0.01
#: Highest utilisation a correction may raise to (vLLM's default is 0.92, ``vllm/config/cache.py:102``).
MAX_UTIL = 0.95

_NOT_FIXABLE = {
    "oom_load": "the weights do not fit the GPU: raise tensor_parallel_size, use a quantized checkpoint or a larger "
                "GPU (lowering the utilisation cannot help: vLLM loads the weights before it sizes anything)",
    "oom_unknown": "out of memory at an unknown stage: read the log; lower gpu_memory_utilization by hand",
    "no_kv_memory": "no memory is left for the KV cache after weights and activations: raise "
                    "gpu_memory_utilization (CPU: kv-cache-memory-bytes), tensor_parallel_size or quantize",
    "refused_flag": "vLLM refused a flag of the command line: remove or rename it in vllm_engine_args",
    "other": "not a sizing failure: read the log",
}


def _floor_util(value: float) -> float:
    return math.floor(round(value / UTIL_STEP, 6)) * UTIL_STEP


def _bytes_per_token(fig: Mapping[str, Any], engine: Mapping[str, Any]) -> float | None:
    """KV bytes per token from vLLM's own figures, when it printed enough of them."""
    if fig.get("available_kv_gib") and fig.get("kv_cache_tokens"):
        return float(fig["available_kv_gib"]) * GIB / int(fig["kv_cache_tokens"])
    if fig.get("needed_kv_gib") and fig.get("max_model_len") and float(fig["needed_kv_gib"]) >= 0.1:
        return float(fig["needed_kv_gib"]) * GIB / int(fig["max_model_len"])
    kv = engine.get("kv-cache-memory-bytes")
    est = fig.get("estimated_max_model_len")
    block = engine.get("block-size")
    if kv and est and block:  # CPU lane: the pool is exact; vLLM fits est tokens plus its one null block
        return int(kv) / (int(est) + int(block))
    return None


class _Ctx:
    """What every knob rule reads."""

    def __init__(self, failure: Mapping[str, Any], engine: Mapping[str, Any], request_tokens: int,
                 min_concurrency: int, gpu_total_gib: float | None, lane: str) -> None:
        self.kind = str(failure.get("kind"))
        self.fig: Mapping[str, Any] = failure.get("figures") or {}
        self.engine = engine
        self.request_tokens = request_tokens
        self.min_concurrency = min_concurrency
        self.lane = lane
        total = self.fig.get("gpu_total_gib") or gpu_total_gib
        self.total_gib = float(total) if total else None
        self.bpt = _bytes_per_token(self.fig, engine)
        self.floor_kv_bytes = (self.bpt or 0.0) * request_tokens * min_concurrency

    def util(self) -> float | None:
        value = self.engine.get("gpu-memory-utilization", self.fig.get("gpu_memory_utilization"))
        return float(value) if value is not None else None


#: knob → the rule that computes its corrected value (or says why it cannot); filled by :func:`_rule`.
_RULES: dict[str, Callable[[_Ctx], tuple[Any, str] | str]] = {}


def _rule(knob: str) -> Callable[[Callable[[_Ctx], tuple[Any, str] | str]], Callable[[_Ctx], tuple[Any, str] | str]]:
    def register(fn: Callable[[_Ctx], tuple[Any, str] | str]) -> Callable[[_Ctx], tuple[Any, str] | str]:
        _RULES[knob] = fn
        return fn
    return register


@_rule("max-model-len")
def _max_model_len(c: _Ctx) -> tuple[Any, str] | str:
    est = c.fig.get("estimated_max_model_len")
    if c.kind != "kv_too_small" or not est:
        return "vLLM printed no length that fits"
    block = int(c.engine.get("block-size") or 16)
    new = int(est) // block * block if int(est) >= block else int(est)
    if new < c.request_tokens:
        return f"the length that fits ({new}) is below one request of the profile ({c.request_tokens} tokens)"
    old = c.fig.get("max_model_len", c.engine.get("max-model-len"))
    return new, (f"vLLM's KV pool holds at most {est} tokens per request (it asked for {old}): lowered to {new} "
                 f"(a multiple of the block size {block}); the profile's {c.request_tokens}-token requests still fit")


@_rule("gpu-memory-utilization")
def _utilization(c: _Ctx) -> tuple[Any, str] | str:
    if c.lane != "gpu":
        return "not a GPU lane"
    util = c.util()
    if util is None or not c.total_gib:
        return "the utilisation or the GPU's memory is unknown"
    if c.kind == "kv_too_small":
        needed, avail = c.fig.get("needed_kv_gib"), c.fig.get("available_kv_gib")
        if needed is None or avail is None:
            return "vLLM printed no KV deficit"
        new = round(math.ceil(round((util + (float(needed) - float(avail)) / c.total_gib) / UTIL_STEP, 6))
                    * UTIL_STEP, 2)
        if new > MAX_UTIL:
            return f"closing the {float(needed) - float(avail):.2f} GiB deficit needs utilisation {new:.2f} > {MAX_UTIL}"
        return new, (f"vLLM needs {needed} GiB of KV for one request and had {avail} GiB: utilisation {util:.2f} → "
                     f"{new:.2f} on the {c.total_gib:.2f} GiB GPU")
    if c.kind == "free_memory_below_budget":
        free = float(c.fig["gpu_free_gib"])
        new = round(_floor_util(free / c.total_gib - UTIL_STEP), 2)
        why = (f"only {free:.2f} of {c.total_gib:.2f} GiB were free at start: utilisation {util:.2f} → {new:.2f} "
               "(another process holds the rest: check it)")
        delta_gib = (util - new) * c.total_gib
    else:  # OOM at graph capture: give the capture at least the allocation that failed back, in 0.01 steps
        tried = int(c.fig.get("tried_to_allocate_bytes") or 0)
        step_bytes = UTIL_STEP * c.total_gib * GIB
        steps = max(1, math.ceil(tried / step_bytes)) if tried else 2
        new = round(util - steps * UTIL_STEP, 2)
        delta_gib = steps * UTIL_STEP * c.total_gib
        what = f"the failed allocation ({tried / MIB:.0f} MiB)" if tried else "no allocation size printed: 2 steps"
        why = (f"CUDA-graph capture ran out of memory after the KV pool was sized: utilisation {util:.2f} → "
               f"{new:.2f} ({delta_gib:.2f} GiB back for the graphs; {what})")
    avail = c.fig.get("available_kv_gib")
    if c.bpt and avail is not None:
        left = float(avail) * GIB - delta_gib * GIB
        if left < c.floor_kv_bytes:
            return (f"utilisation {new:.2f} leaves {left / GIB:.2f} GiB of KV, below {c.min_concurrency} requests of "
                    f"the profile ({c.floor_kv_bytes / GIB:.2f} GiB)")
        why += f"; {left / GIB:.2f} GiB of KV left ≥ {c.min_concurrency} requests of the profile"
    return new, why


@_rule("kv-cache-memory-bytes")
def _kv_bytes(c: _Ctx) -> tuple[Any, str] | str:
    if c.lane != "cpu" or c.kind != "kv_too_small":
        return "not a CPU-lane KV failure"
    kv, block, length = c.engine.get("kv-cache-memory-bytes"), c.engine.get("block-size"), c.fig.get("max_model_len")
    if not (kv and block and length and c.bpt):
        return "the KV bytes, block size or length is unknown"
    block = int(block)
    page = c.bpt * block
    new = int(math.ceil((math.ceil(int(length) / block) + 1) * page / MIB) * MIB)  # + vLLM's null block, whole MiB
    return new, (f"one request of {length} tokens needs {math.ceil(int(length) / block) + 1} blocks of {page:.0f} B "
                 f"(with vLLM's null block): kv-cache-memory-bytes {int(kv)} → {new}")


@_rule("max-num-seqs")
def _max_num_seqs(c: _Ctx) -> tuple[Any, str] | str:
    seqs = c.engine.get("max-num-seqs")
    if seqs is None:
        return "max-num-seqs is not in the launch record"
    new = max(c.min_concurrency, int(seqs) // 2)
    if new >= int(seqs):
        return f"max-num-seqs {seqs} is already the profile's floor ({c.min_concurrency})"
    what = "CUDA graphs are captured up to this batch size" if c.kind == "oom_graph_capture" else \
        "the profiling run samples this many sequences"
    return new, f"{what}: max-num-seqs {seqs} → {new} (profile floor {c.min_concurrency})"


@_rule("max-num-batched-tokens")
def _max_num_batched_tokens(c: _Ctx) -> tuple[Any, str] | str:
    tokens = c.engine.get("max-num-batched-tokens")
    if tokens is None:
        return "max-num-batched-tokens is not in the launch record"
    # vLLM refuses fewer batched tokens than sequences; 2048 is its own default below the H100 memory tier
    # (vllm/engine/arg_utils.py:2894-2985; the refusal: vllm/config/scheduler.py:328).
    floor = max(int(c.engine.get("max-num-seqs") or 1), 2048)
    new = max(floor, int(tokens) // 2)
    if new >= int(tokens):
        return f"max-num-batched-tokens {tokens} is already at the floor ({floor})"
    return new, (f"the profiling run's activation peak grows with the batch's tokens: max-num-batched-tokens {tokens} "
                 f"→ {new} (chunked prefill splits longer prompts)")


def propose(failure: Mapping[str, Any], engine_args: Mapping[str, Any], *, request_tokens: int,
            min_concurrency: int, pinned: Sequence[str] = (), lane: str = "gpu",
            gpu_total_gib: float | None = None, autocorrect: bool = True,
            order: Mapping[str, Sequence[str]] | None = None, multinode_group: str | None = None) -> dict[str, Any]:
    """The correction of one failed start.

    :param failure: :func:`observe.startup_failure.classify`'s result.
    :param engine_args: the engine args the failed start used (kebab-case names, as the plan writes them).
    :param pinned: names the user set (never changed).
    :param gpu_total_gib: the GPU's memory (facts), used when vLLM's message did not print it.
    :param order: the policy's knob order per failure kind (default :data:`DEFAULT_ORDER`).
    :param multinode_group: the host's multi-node group, if any: its nodes start, pass the gate and fail as one
        instance, so one node is never re-planned alone: the fix is proposed for the whole group (``rollback``).
    :returns: ``{"kind", "action", "changes", "reasons", "skipped", "fix", "summary"}``: ``action`` is ``retry``
        (autocorrect on and a change found), ``rollback`` (autocorrect off, or a multi-node group: ``changes`` is the
        proposed fix) or ``give_up`` (nothing within the policy fixes it: ``fix`` says what a person should do).
    """
    kind = str(failure.get("kind"))
    knobs = tuple((order or DEFAULT_ORDER).get(kind, ()))
    ctx = _Ctx(failure, engine_args, int(request_tokens), int(min_concurrency), gpu_total_gib, lane)
    skipped: dict[str, str] = {}
    changes: dict[str, Any] = {}
    reasons: dict[str, str] = {}
    for knob in knobs:
        if knob in pinned:
            skipped[knob] = "set by you"
            continue
        rule = _RULES.get(knob)
        if rule is None:
            skipped[knob] = "no rule for this knob"
            continue
        got = rule(ctx)
        if isinstance(got, str):
            skipped[knob] = got
            continue
        changes[knob], reasons[knob] = got
        break
    if not changes:
        tried = "; ".join(f"{k}: {v}" for k, v in skipped.items())
        fix = _NOT_FIXABLE.get(kind, "nothing within the policy fixes it") + (f" (tried {tried})" if tried else "")
        return {"kind": kind, "action": "give_up", "changes": {}, "reasons": {}, "skipped": skipped, "fix": fix,
                "summary": f"{failure.get('message', kind)}: no automatic fix: {fix}"}
    fix = ", ".join(f"--{k} {v}" for k, v in changes.items())
    action = "retry" if autocorrect and not multinode_group else "rollback"
    if multinode_group:
        pins = ", ".join(f"{k.replace('-', '_')}: {v}" for k, v in changes.items())
        head = (f"multi-node group {multinode_group} is not re-planned automatically (its nodes start and fail as "
                f"one instance); proposed fix for every host of the group, in its vllm_fleet_engine_args "
                f"({pins})")
    else:
        head = "re-planned" if autocorrect else "autocorrect is off; proposed fix"
    summary = f"{failure.get('message', kind)}: {head}: {fix} ({'; '.join(reasons.values())})"
    return {"kind": kind, "action": action, "changes": changes, "reasons": reasons, "skipped": skipped,
            "fix": fix, "summary": summary}


def for_sku_group(correction: Mapping[str, Any], group_hosts: Sequence[str],
                  pinned_by_host: Mapping[str, Sequence[str]] | None = None) -> dict[str, dict[str, Any]]:
    """A canary's correction for every host of its SKU group (identical hosts fail identically).

    A host that pinned a changed knob keeps its pin (and is left out when nothing else changes).
    :returns: host → the changes it takes.
    """
    out: dict[str, dict[str, Any]] = {}
    for host in group_hosts:
        pins = set((pinned_by_host or {}).get(host, ()))
        changes = {k: v for k, v in (correction.get("changes") or {}).items() if k not in pins}
        if changes:
            out[host] = changes
    return out
