"""The inputs one planning run shares, bundled: the plan-wide ones and the GPU lane's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .inputs import Gpu, Policy, Profile
from .model import ModelSpec
from .precision import Precision
from .rules import VersionRules


@dataclass(frozen=True)
class PlanInputs:
    """Everything resolved before a lane runs: model, workload, policy, version rules, user args, formats."""

    spec: ModelSpec
    profile: Profile
    policy: Policy
    rules: VersionRules
    user: dict[str, Any]  # normalised user engine args (dash-form keys, typed values)
    precision: Precision
    weights_total_bytes: int | None = None  # the checkpoint's real size, when known


@dataclass(frozen=True)
class GpuInputs:
    """The GPU lane's fixed inputs: the plan inputs plus the GPU and the choices made before layouts."""

    plan: PlanInputs
    gpu: Gpu
    block_size: int
    eager: bool  # --enforce-eager: no CUDA graphs
    want_len: int  # the user's max_model_len, else the model's limit
    forced_tp: int | None  # --tensor-parallel-size, when the user set it
    forced_pp: int | None  # --pipeline-parallel-size, when the user set it

    @property
    def forced(self) -> bool:
        """Whether the user fixed the layout (TP or PP)."""
        return self.forced_tp is not None or self.forced_pp is not None
