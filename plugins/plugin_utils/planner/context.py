"""The inputs one planning run shares, bundled: the plan-wide ones and the GPU lane's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .inputs import Gpu, Policy, Profile
from .lora import LoraSlots
from .model import ModelSpec
from .observed import Observed
from .precision import Precision
from .rules import VersionRules
from .speculative import SpecDecode


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
    extra_args: tuple[str, ...] = ()  # the user's extra vllm serve args (checked), verbatim after the engine args
    speculative: SpecDecode | None = None  # the user's speculative_config, resolved (speculative.resolve_speculative)
    lora: LoraSlots | None = None  # --enable-lora's preallocated adapter slots (lora.resolve_lora)
    # max_num_seqs and max_num_batched_tokens chosen for the profile's service targets, with their reasons
    # (targets.choose; scheduler.schedule returns them): (seqs, tokens, seqs reason, tokens reason)
    targeted: tuple[int, int, str, str] | None = None
    # an identical host's last good start (observed.py): its logged components replace the estimate on its layout
    observed: Observed | None = None


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
    dp: int = 1  # --data-parallel-size: engines of TP x PP GPUs each (in one host's container when dp_nodes is 1)
    dp_nodes: int = 1  # hosts the data-parallel ranks are spread over (a multi-node group's size), dp // dp_nodes each
    # The MoE layout comparison that picked data parallelism (gpu_lane.compare_moe_layouts), "" when dp is the user's
    dp_picked: str = ""
    # --enable-eplb (set by the user): redundant experts (eplb_config.num_redundant_experts) and the migration buffers
    # of one MoE layer's local experts that vLLM allocates before its memory profile (gpu_lane.eplb_inputs)
    eplb: bool = False
    redundant_experts: int = 0
    eplb_buffers: int = 0
    # Why the layout's TP was chosen for the profile's service targets (targets.choose); "" otherwise. When set,
    # forced_tp holds that TP so no other layout is tried.
    tp_reason: str = ""

    @property
    def dp_local(self) -> int:
        """Data-parallel ranks on one host (``--data-parallel-size-local`` across a multi-node group)."""
        return self.dp // self.dp_nodes

    @property
    def forced(self) -> bool:
        """Whether the user fixed the layout (TP or PP)."""
        return self.forced_tp is not None or self.forced_pp is not None
