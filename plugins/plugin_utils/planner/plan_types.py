"""The typed plan (CONTRACT 2 in docs/architecture.md) and how a lane's decisions become one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .candidate import Candidate
from .context import PlanInputs
from .decision import Decision
from .engine_args import ordered_engine_args, to_cli_args
from .engine_fields import negatable_names
from .hardware import GIB
from .inputs import Gpu
from .memory import MemoryGib
from .model import ModelSpec


@dataclass(frozen=True)
class GpuSummary:
    """The GPU the plan is for (CONTRACT 2 ``gpu``)."""

    name: str
    count: int
    memory_mib: int
    compute_capability: str
    interconnect: str

    @classmethod
    def of(cls, gpu: Gpu) -> GpuSummary:
        """The summary of a GPU view."""
        return cls(name=gpu.name, count=gpu.count, memory_mib=gpu.memory_mib,
                   compute_capability=gpu.compute_capability, interconnect=gpu.interconnect)

    def to_dict(self) -> dict[str, Any]:
        """The CONTRACT 2 mapping (the fields, in order)."""
        return asdict(self)


@dataclass(frozen=True)
class ModelSummary:
    """The model facts the plan used (CONTRACT 2 ``model``)."""

    architecture: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    moe: bool
    mla: bool
    max_model_len: int
    dtype: str
    quantization: str

    @classmethod
    def of(cls, spec: ModelSpec) -> ModelSummary:
        """The summary of a model spec."""
        return cls(architecture=spec.architecture, layers=spec.num_layers, heads=spec.num_heads,
                   kv_heads=spec.num_kv_heads, head_dim=spec.head_dim, moe=spec.is_moe, mla=spec.mla,
                   max_model_len=spec.max_model_len, dtype=spec.torch_dtype,
                   quantization=spec.quantization.method)

    def to_dict(self) -> dict[str, Any]:
        """The CONTRACT 2 mapping (the fields, in order)."""
        return asdict(self)


@dataclass(frozen=True)
class Parallel:
    """How one instance is laid out over GPUs and hosts (CONTRACT 2 ``parallel``)."""

    tensor_parallel_size: int
    pipeline_parallel_size: int
    replicas: int
    # DP x TP x PP: every data-parallel rank of a replica runs in its one container. With data parallelism across
    # ``nodes`` > 1 hosts it is ONE host's container: its DP / nodes local ranks x TP (PP is 1), not the group's GPUs.
    gpus_per_replica: int
    nodes: int
    data_parallel_size: int = 1  # engines per replica, each of TP x PP GPUs (vLLM balances between them)

    def to_dict(self) -> dict[str, Any]:
        """The CONTRACT 2 mapping (the fields, in order)."""
        return asdict(self)


@dataclass(frozen=True)
class Prediction:
    """What vLLM will log at start-up (CONTRACT 2 ``prediction``)."""

    kv_cache_tokens: int
    gpu_blocks: int
    block_size: int
    max_concurrency: float
    max_model_len: int
    kv_cache_gib: float

    @classmethod
    def of(cls, cand: Candidate) -> Prediction:
        """The prediction for a settled candidate."""
        return cls(kv_cache_tokens=cand.kv_tokens, gpu_blocks=cand.num_blocks, block_size=cand.layout.block_size,
                   max_concurrency=round(cand.concurrency, 2), max_model_len=cand.max_model_len,
                   kv_cache_gib=round(max(cand.memory.kv_cache, 0) / GIB, 3))

    def to_dict(self) -> dict[str, Any]:
        """The CONTRACT 2 mapping (the fields, in order)."""
        return asdict(self)


@dataclass(frozen=True)
class Plan:
    """A vLLM launch plan: engine args with reasons, layout, memory split and prediction."""

    vllm_version: str
    engine: str
    device: str  # "cuda" | "cpu"
    gpu: GpuSummary | None  # None on the CPU lane
    model: ModelSummary
    engine_args: Mapping[str, Any]  # in ENGINE_ARG_ORDER, then user args
    cli_args: tuple[str, ...]  # engine_args as vllm serve options, then extra_args
    extra_args: tuple[str, ...]  # the user's extra vllm serve args, verbatim (the launch record's command ends with them)
    env: Mapping[str, str]
    parallel: Parallel
    memory_gib: MemoryGib
    prediction: Prediction
    reasons: Mapping[str, str]
    warnings: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """CONTRACT 2: the plain mapping ``plan()`` returns (keys and order as documented)."""
        return {
            "vllm_version": self.vllm_version,
            "engine": self.engine,
            "device": self.device,
            "gpu": None if self.gpu is None else self.gpu.to_dict(),
            "model": self.model.to_dict(),
            "engine_args": dict(self.engine_args),
            "cli_args": list(self.cli_args),
            "extra_args": list(self.extra_args),
            "env": dict(self.env),
            "parallel": self.parallel.to_dict(),
            "memory_gib": self.memory_gib.to_dict(),
            "prediction": self.prediction.to_dict(),
            "reasons": dict(self.reasons),
            "warnings": list(self.warnings),
        }


def assemble_plan(ctx: PlanInputs, device: str, d: Decision, cand: Candidate, parallel: Parallel,
                  gpu: Gpu | None) -> Plan:
    """The lane's decisions and settled candidate -> a Plan (adds the uncharged-CUDA-graph warning)."""
    engine_args = ordered_engine_args(d.engine_args)
    mem, rules = cand.memory, ctx.rules
    mem_gib = mem.gib()
    if not mem.cuda_graph_charged and mem.cuda_graph:
        d.warnings.append(f"vLLM {rules.text} captures CUDA graphs ({mem_gib.cuda_graph} GiB) outside the budget")
    return Plan(
        vllm_version=rules.text, engine=rules.engine, device=device,
        gpu=None if gpu is None else GpuSummary.of(gpu), model=ModelSummary.of(ctx.spec),
        engine_args=engine_args, extra_args=ctx.extra_args, env=dict(d.env),
        cli_args=tuple(to_cli_args(engine_args, negatable_names(rules.text), ctx.extra_args)),
        parallel=parallel, memory_gib=mem_gib, prediction=Prediction.of(cand), reasons=dict(d.reasons),
        warnings=tuple(dict.fromkeys(d.warnings)),
    )
