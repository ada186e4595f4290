# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Pure rollout arithmetic for the ``vllm_serve`` role (standard library only, no I/O).

Everything the deploy playbook computes — health-gate timeouts sized from the model, retry counts,
``serial`` batches with a canary first, the sum of a Prometheus gauge read from ``/metrics`` — lives
here, so the YAML only formats and the rules have unit tests (``tests/unit/deploy``).
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = [
    "RolloutError",
    "health_gate",
    "metric_sum",
    "retries_for",
    "rollout_outcome",
    "rollout_units",
    "serial_batches",
]


class RolloutError(ValueError):
    """Bad rollout input; the message says what to change."""


# Seconds a vLLM server needs before it loads weights: Python imports, engine start, on CPU the torch
# inductor compile of the model. Measured on the 2-core CPU test bed: 71 s for the tiny model idle, over 240 s
# while other work shares the two cores (a CPU-lane host is rarely a quiet one: the gate passes as soon as the
# server answers, so the bound only has to hold on a busy host); on a GPU host CUDA-graph capture and
# torch.compile add about as much. Overridable per call (vllm_serve_health_timeout_s).
DEFAULT_BASE_S = {"cpu": 600, "cuda": 300}
# Conservative weight-load rate (local NVMe / page cache reach several GiB/s; network storage less).
DEFAULT_LOAD_GIB_PER_S = 0.5


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RolloutError(f"{what} must be a number, got {value!r}")
    if value < 0 or math.isnan(value) or math.isinf(value):
        raise RolloutError(f"{what} must be a finite number >= 0, got {value!r}")
    return float(value)


def retries_for(timeout_s: float, interval_s: float) -> int:
    """Number of polls at ``interval_s`` that cover ``timeout_s`` (at least 1).

    :param timeout_s: total time to wait, seconds
    :param interval_s: delay between two polls, seconds (> 0)
    """
    timeout = _number(timeout_s, "timeout_s")
    interval = _number(interval_s, "interval_s")
    if interval <= 0:
        raise RolloutError("interval_s must be > 0")
    return max(1, math.ceil(timeout / interval))


def _weights_gib(plan: dict[str, Any]) -> float:
    """Total weight bytes (GiB) one replica loads: per-GPU weights × GPUs per replica.

    Contract 2 gives ``memory_gib.weights`` per GPU and ``parallel.gpus_per_replica``; on the CPU lane
    ``gpus_per_replica`` is 0 or absent and the per-"device" figure is the whole model.
    """
    memory = plan.get("memory_gib") or {}
    weights = memory.get("weights", 0) or 0
    per_device = _number(weights, "plan.memory_gib.weights")
    parallel = plan.get("parallel") or {}
    gpus = parallel.get("gpus_per_replica", 1) or 1
    return per_device * _number(gpus, "plan.parallel.gpus_per_replica")


def health_gate(
    plan: dict[str, Any],
    *,
    interval_s: float = 5,
    base_s: float | None = None,
    load_gib_per_s: float = DEFAULT_LOAD_GIB_PER_S,
    timeout_s: float | None = None,
) -> dict[str, int]:
    """Timing of the health gate for one replica, sized from the model's load time.

    ``timeout = base(device) + weights_gib / load_gib_per_s``, unless ``timeout_s`` pins it.

    :param plan: the plan dict (Contract 2); reads ``device``, ``memory_gib.weights``,
        ``parallel.gpus_per_replica``
    :param interval_s: seconds between two probes
    :param base_s: start-up time without weights; default per device (:data:`DEFAULT_BASE_S`)
    :param load_gib_per_s: assumed weight-load rate
    :param timeout_s: explicit timeout (wins over the computed one)
    :returns: ``{"timeout_s", "interval_s", "retries", "weights_gib"}`` (weights rounded up)
    """
    if not isinstance(plan, dict):
        raise RolloutError("plan must be a dict (Contract 2)")
    device = plan.get("device", "cpu")
    if device not in DEFAULT_BASE_S:
        raise RolloutError(f"plan.device must be one of {sorted(DEFAULT_BASE_S)}, got {device!r}")
    interval = _number(interval_s, "interval_s")
    if interval <= 0:
        raise RolloutError("interval_s must be > 0")
    weights = _weights_gib(plan)
    if timeout_s is not None:
        timeout = _number(timeout_s, "timeout_s")
    else:
        base = DEFAULT_BASE_S[device] if base_s is None else _number(base_s, "base_s")
        rate = _number(load_gib_per_s, "load_gib_per_s")
        if rate <= 0:
            raise RolloutError("load_gib_per_s must be > 0")
        timeout = base + weights / rate
    timeout_int = max(1, math.ceil(timeout))
    return {
        "timeout_s": timeout_int,
        "interval_s": max(1, math.ceil(interval)),
        "retries": retries_for(timeout_int, interval),
        "weights_gib": math.ceil(weights),
    }


def rollout_units(groups: list[str | None], hosts: list[str] | None = None) -> list[int]:
    """The rollout's units in play order: 1 for a host of its own, N for the N hosts of a multi-node group, which
    start, pass the health gate and roll back together, so no batch may split them.

    :param groups: each host's ``vllm_fleet_multinode_group`` (None or "" for none), in play (inventory) order
    :param hosts: the host names, same order (for the message)
    :raises RolloutError: a group's hosts are not next to each other in the inventory
    """
    names = list(hosts) if hosts is not None else [f"host #{i + 1}" for i in range(len(groups))]
    units: list[int] = []
    seen: dict[str, int] = {}
    previous: str | None = None
    for position, group in enumerate(groups):
        group = str(group) if group else None
        if group is not None and group == previous:
            units[-1] += 1
            continue
        if group is not None and group in seen:
            members = [n for n, g in zip(names, groups, strict=False) if g == group]
            between = names[seen[group] + 1 : position]
            raise RolloutError(f"multi-node group {group}: its hosts {', '.join(members)} are not next to each other "
                               f"in the inventory ({', '.join(between[:3])} between them): list them together, so "
                               "the group rolls out as one batch")
        if group is not None:
            seen[group] = position
        units.append(1)
        previous = group
    return units


def serial_batches(n_hosts: int, canary: int = 1, batch: int | str = "50%", units: list[int] | None = None
                   ) -> list[int]:
    """Batch sizes for the play's ``serial`` keyword: a canary batch first, then equal batches.

    The list is explicit and sums to ``n_hosts`` (Ansible would repeat the last size anyway). With ``units``
    (:func:`rollout_units`) a batch ends only between units: a multi-node group goes whole, in the batch where
    its first host falls, even when that makes the batch larger than asked.

    :param n_hosts: hosts in the rollout
    :param canary: hosts in the first batch (>= 1)
    :param batch: later batch size, an int or a percentage of ``n_hosts`` like ``"25%"`` (rounded up)
    :param units: the sizes of the rollout's units in play order (they sum to ``n_hosts``)
    """
    if isinstance(n_hosts, bool) or not isinstance(n_hosts, int) or n_hosts < 0:
        raise RolloutError(f"n_hosts must be an int >= 0, got {n_hosts!r}")
    if isinstance(canary, bool) or not isinstance(canary, int) or canary < 1:
        raise RolloutError(f"canary must be an int >= 1, got {canary!r}")
    if isinstance(batch, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%\s*", batch)
        if match:
            pct = float(match.group(1))
            if not 0 < pct <= 100:
                raise RolloutError(f"batch percentage must be in (0, 100], got {batch!r}")
            size = max(1, math.ceil(n_hosts * pct / 100))
        elif batch.strip().isdigit():
            size = int(batch)
        else:
            raise RolloutError(f"batch must be an int or a percentage like '25%', got {batch!r}")
    elif isinstance(batch, int) and not isinstance(batch, bool):
        size = batch
    else:
        raise RolloutError(f"batch must be an int or a percentage like '25%', got {batch!r}")
    if size < 1:
        raise RolloutError(f"batch must be >= 1, got {batch!r}")
    if n_hosts == 0:
        return [1]
    if units is None:
        units = [1] * n_hosts
    if any(isinstance(u, bool) or not isinstance(u, int) or u < 1 for u in units) or sum(units) != n_hosts:
        raise RolloutError(f"units must be ints >= 1 that sum to the {n_hosts} hosts, got {units!r}")
    batches: list[int] = []
    want = canary
    current = 0
    for unit in units:
        current += unit
        if current >= want:
            batches.append(current)
            current, want = 0, size
    if current:
        batches.append(current)
    return batches


def rollout_outcome(batches: list[int], failing: set[int] | frozenset[int], max_fail_percentage: float = 0
                    ) -> dict[str, Any]:
    """What a ``serial`` rollout does when the hosts at positions ``failing`` fail its gate, as ansible-core's
    linear strategy decides it (``plugins/strategy/linear.py``, ``executor/playbook_executor.py``, 2.19):

    - after each task, the play stops when ``failed / batch_size > max_fail_percentage / 100``, where ``failed``
      counts the hosts of this batch that failed (the task queue manager clears its list at each batch): the rest
      of the batch is marked failed and no later batch starts;
    - a batch in which every host failed stops the play too (whatever the percentage).

    :param batches: the ``serial`` list (:func:`serial_batches`)
    :param failing: 0-based positions, in rollout order, of the hosts whose gate fails
    :param max_fail_percentage: the play's ``max_fail_percentage``
    :returns: ``{"stopped_in_batch": index or None, "completed": hosts that finished, "failed": hosts that
        failed or were marked failed, "not_started": hosts of later batches}``
    """
    if not 0 <= max_fail_percentage <= 100:
        raise RolloutError(f"max_fail_percentage must be in [0, 100], got {max_fail_percentage!r}")
    start = failed = completed = 0
    total = sum(batches)
    for index, size in enumerate(batches):
        here = sum(1 for position in failing if start <= position < start + size)
        failed += here
        if here and (here / size > max_fail_percentage / 100 or here == size):
            return {"stopped_in_batch": index, "completed": completed, "failed": failed + (size - here),
                    "not_started": total - start - size}
        completed += size - here
        start += size
    return {"stopped_in_batch": None, "completed": completed, "failed": failed, "not_started": 0}


_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)(?:\s+\S+)?\s*$"
)


def metric_sum(text: str, name: str) -> float | None:
    """Sum of every sample of ``name`` in a Prometheus text exposition (all label sets).

    ``vllm:num_requests_running`` has one sample per ``model_name``/``engine``; the drain waits for
    the sum to reach 0. Returns ``None`` when the metric is absent (a server that is not vLLM, or not
    started), so the caller can tell "0" from "unknown".

    :param text: the body of ``GET /metrics``
    :param name: exact metric name, e.g. ``vllm:num_requests_running``
    """
    if not isinstance(text, str):
        raise RolloutError("metrics text must be a string")
    total = 0.0
    found = False
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match or match.group("name") != name:
            continue
        try:
            value = float(match.group("value"))
        except ValueError as exc:
            raise RolloutError(f"bad sample value in metrics line: {line!r}") from exc
        if math.isnan(value):
            continue
        total += value
        found = True
    return total if found else None
