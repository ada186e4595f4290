"""What an identical host's vLLM logged at its last good start, used instead of the estimate (issue 30, item 3).

Pure Python, stdlib only, no I/O. Preflight passes one observation per host as data (``plan(..., observed=...)``):
the memory components vLLM printed at a good start of a host of the same GPU SKU group and model
(``observe/learned.py`` ``observation`` reads them from the log and keeps them in the host's plan feedback), the
vLLM version, the layout it ran and what that plan had estimated for each component. The planner then sizes every
candidate of the same layout (TP, PP, DP, eager or not) with

    component = this candidate's estimate + (observed - the estimate the observed start was planned with)

so the layout that ran gets exactly vLLM's figures and a neighbour (another max_num_seqs, another
max_num_batched_tokens) keeps the estimate's slope with vLLM's offset. An observation of another vLLM version or
another layout is not used (the reason says so); the user's pins still win (they are engine args, not components).

Components (GiB), as ``observe/learned.py`` documents where vLLM prints each: ``weights``, ``activation``,
``non_torch``, ``cuda_graph``; ``kv_gib`` / ``kv_tokens`` are shown, never substituted (the KV pool is what the
budget leaves).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import PlanError
from .hardware import GIB

#: The components that replace the estimate, in the order the reasons list them.
COMPONENTS = ("weights", "activation", "non_torch", "cuda_graph")
_NAMES = {"weights": "weights", "activation": "activation peak", "non_torch": "non-torch",
          "cuda_graph": "CUDA graphs"}


@dataclass(frozen=True)
class Observed:
    """One good start: where and when, the vLLM version and layout, vLLM's figures and the estimate it ran with."""

    host: str
    at: str
    vllm_version: str
    tp: int
    pp: int
    dp: int
    eager: bool
    observed: Mapping[str, float]  # component -> GiB vLLM logged
    estimated: Mapping[str, float]  # component -> GiB the observed start's plan estimated
    kv_gib: float | None = None
    kv_tokens: int | None = None

    def applies(self, version: str, tp: int, pp: int, dp: int, eager: bool) -> bool:
        """Whether this observation sizes a candidate of that version and layout."""
        return (version, tp, pp, dp, eager) == (self.vllm_version, self.tp, self.pp, self.dp, self.eager)

    def offset(self, component: str) -> int | None:
        """Bytes to add to this component's estimate (None: vLLM did not log it, or no estimate to compare)."""
        obs, est = self.observed.get(component), self.estimated.get(component)
        if obs is None or est is None:
            return None
        return round((float(obs) - float(est)) * GIB)

    def where(self) -> str:
        """``observed on <host> at <time>``."""
        return f"observed on {self.host} at {self.at}"

    def kv_line(self) -> str:
        """What vLLM's KV pool was, when logged."""
        parts = []
        if self.kv_gib is not None:
            parts.append(f"{self.kv_gib:g} GiB")
        if self.kv_tokens is not None:
            parts.append(f"{self.kv_tokens:,} tokens")
        return "KV cache " + " = ".join(parts) if parts else ""


def _num(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanError(f"observed: {what} must be a number, got {value!r}")
    return float(value)


def resolve_observed(data: Mapping[str, Any] | None) -> Observed | None:
    """The observation as preflight passes it (``observe/learned.py`` ``observation``), checked; None when absent.

    :raises PlanError: a malformed observation (one line).
    """
    if not data:
        return None
    if not isinstance(data, Mapping):
        raise PlanError(f"observed must be a mapping, got {type(data).__name__}")
    layout = data.get("layout") or {}
    try:
        figures = {k: _num(v, k) for k, v in (data.get("observed") or {}).items() if k in COMPONENTS and v is not None}
        estimated = {k: _num(v, k) for k, v in (data.get("estimated") or {}).items()
                     if k in COMPONENTS and v is not None}
        kv_gib = data.get("kv_gib")
        kv_tokens = data.get("kv_tokens")
        return Observed(host=str(data["host"]), at=str(data.get("at") or "an unknown time"),
                        vllm_version=str(data["vllm_version"]), tp=int(layout.get("tp", 1)),
                        pp=int(layout.get("pp", 1)), dp=int(layout.get("dp", 1)), eager=bool(layout.get("eager")),
                        observed=figures, estimated=estimated,
                        kv_gib=None if kv_gib is None else _num(kv_gib, "kv_gib"),
                        kv_tokens=None if kv_tokens is None else int(kv_tokens))
    except (KeyError, TypeError, ValueError) as exc:
        raise PlanError(f"observed: malformed observation ({exc})") from None


def reasons(obs: Observed, used: Mapping[str, tuple[int, int]]) -> dict[str, str]:
    """One reason per component replaced (``observed.<component>``) and a summary (``observed``).

    :param used: component -> (the estimate in bytes, the value used in bytes) on the chosen layout.
    """
    out: dict[str, str] = {}
    for comp in COMPONENTS:
        if comp not in used:
            continue
        estimate, value = used[comp]
        out[f"observed.{comp}"] = (f"{obs.where()}: {_NAMES[comp]} {obs.observed[comp]:.2f} GiB (its plan estimated "
                                   f"{obs.estimated[comp]:.2f}); used {value / GIB:.2f} GiB here instead of the "
                                   f"estimate {estimate / GIB:.2f} GiB")
    shown = ", ".join(f"{_NAMES[c]} {obs.observed[c]:.2f}" for c in COMPONENTS if c in obs.observed)
    kv = obs.kv_line()
    what = "; ".join(p for p in (shown and f"{shown} GiB", kv) if p)
    if used:
        out["observed"] = (f"{obs.where()} (same GPU SKU group, model and vLLM {obs.vllm_version}, TP {obs.tp} x "
                           f"PP {obs.pp} x DP {obs.dp}): {what}; the memory split uses vLLM's figures instead of the "
                           "estimate")
    else:
        out["observed"] = f"{obs.where()} (vLLM {obs.vllm_version}): {what}"
    return out
