"""gpu_memory_utilization from an absolute headroom per GPU (CUDA context, NCCL, co-located, margin)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .decision import Decision
from .errors import PlanError
from .hardware import CUBLAS_HANDLES_MIB, CUDA_CONTEXT_MIB, GIB, MIB, NCCL_COMMUNICATOR_MIB
from .inputs import Gpu, Policy
from .rules import VersionRules

MAX_UTILIZATION = 0.98  # never plan closer to the whole GPU than this
MIN_UTILIZATION = 0.3  # below this the headroom leaves too little for vLLM: refuse
UNCHARGED_GRAPH_MARGIN = 512 * MIB  # extra margin when CUDA graphs land outside the budget (vLLM < 0.21)


@dataclass(frozen=True)
class Utilization:
    """The gpu_memory_utilization fraction, the bytes per GPU outside vLLM's budget, and why."""

    value: float
    outside: int  # CUDA context (+ cuBLAS from 0.33) + NCCL + co-located, allocated before vLLM's snapshot
    reason: str

    def record(self, d: Decision) -> None:
        """Emit gpu-memory-utilization."""
        d.set("gpu-memory-utilization", self.value, self.reason)


def safety_margin(gpu: Gpu, pol: Policy) -> int:
    """The policy's margin, else 2% of the GPU clamped to [1 GiB, 3 GiB]."""
    if pol.safety_margin_mib is not None:
        return pol.safety_margin_mib * MIB
    return int(min(max(gpu.memory_mib * MIB * 0.02, 1 * GIB), 3 * GIB))


def _user_utilization(gpu: Gpu, world: int, n: int, outside: int, util: float, cublas: bool) -> Utilization:
    """Check the user's fraction against the memory free after what sits outside the budget."""
    total = gpu.memory_mib * MIB
    free = total - outside
    if math.ceil(total * util) * n > free:
        raise PlanError(f"--gpu-memory-utilization {util} asks for {total * util / GIB:.1f} GiB per instance "
                        f"but only {free / GIB / n:.1f} GiB per instance is free after CUDA context"
                        f"{', cuBLAS handles' if cublas else ''}{', NCCL' if world > 1 else ''} and co-located "
                        f"memory: use at most {math.floor(free / n / total * 1000) / 1000}")
    return Utilization(value=util, outside=outside, reason="set by you; checked against free memory after the "
                       "CUDA context" + (", cuBLAS handles" if cublas else "") + (" and NCCL" if world > 1 else ""))


def utilization(gpu: Gpu, world: int, pol: Policy, rules: VersionRules, user: dict[str, Any]) -> Utilization:
    """gpu_memory_utilization from an absolute headroom per GPU (``world``: GPUs of this host in the layout)."""
    total = gpu.memory_mib * MIB
    cublas = rules.cublas_outside_budget  # 0.33: cuBLAS handles created before vLLM's snapshot
    per_instance_outside = (CUDA_CONTEXT_MIB * MIB + (CUBLAS_HANDLES_MIB * MIB if cublas else 0)
                            + (NCCL_COMMUNICATOR_MIB * MIB if world > 1 else 0))
    n = pol.instances_per_gpu
    outside = n * per_instance_outside + pol.co_located_mib * MIB + gpu.used_mib * MIB
    margin = safety_margin(gpu, pol)
    if not rules.cudagraph_charged_to_budget:
        margin += UNCHARGED_GRAPH_MARGIN  # graphs captured after profiling land outside the budget
    if "gpu-memory-utilization" in user:
        return _user_utilization(gpu, world, n, outside, float(user["gpu-memory-utilization"]), cublas)
    util = (total - outside - margin) / total / n
    util = math.floor(util * 1000) / 1000
    util = min(util, MAX_UTILIZATION)
    if util < MIN_UTILIZATION:
        raise PlanError(f"{gpu.name}: only {util:.2f} of each GPU would be left for vLLM after "
                        f"{(outside + margin) / GIB:.1f} GiB of headroom: lower co_located_mib/instances_per_gpu")
    context = ("HIP context (the CUDA figure: no public ROCm measurement)" if gpu.amd else "CUDA context")
    reason = (f"{total / GIB:.1f} GiB GPU minus {CUDA_CONTEXT_MIB} MiB {context}"
              + (f", {CUBLAS_HANDLES_MIB} MiB cuBLAS handles (created before vLLM {rules.series}'s snapshot)"
                 if cublas else "")
              + (f", {NCCL_COMMUNICATOR_MIB} MiB {'RCCL' if gpu.amd else 'NCCL'}" if world > 1 else "")
              + (f", {pol.co_located_mib + gpu.used_mib} MiB co-located" if pol.co_located_mib + gpu.used_mib else "")
              + f", {margin // MIB} MiB safety margin"
              + (f", shared by {n} instances" if n > 1 else "")
              + f" (vLLM default {rules.default_gpu_memory_utilization} would leave "
              f"{total * (1 - rules.default_gpu_memory_utilization) / GIB:.1f} GiB idle)")
    return Utilization(value=util, outside=outside, reason=reason)
