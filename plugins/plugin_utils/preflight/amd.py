# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Preflight for a host whose facts show AMD GPUs: one line saying vllm-fleet deploys NVIDIA only.

The planner plans AMD Instinct GPUs (planner/hardware.py, the ``vendor: amd`` / ``gfx`` facts of CONTRACT 1), but
provisioning (the NVIDIA driver and container toolkit), the image (CUDA builds of vLLM) and deploy (``--gpus``
device requests) are NVIDIA. A host whose facts name an AMD GPU is refused here, at the facts stage, instead of
failing later in a role. Pure: reads the facts mapping only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.hardware import lookup_gpu

__all__ = ["amd_gpu_in_facts", "check_amd_host"]


def _is_amd(entry: Mapping[str, Any]) -> bool:
    """One GPU (or the host block of facts) says AMD: ``vendor: amd``, a ``gfx`` target, or an AMD catalogue name."""
    if str(entry.get("vendor") or "").lower() == "amd" or entry.get("gfx"):
        return True
    name = str(entry.get("name") or entry.get("gpu_name") or "")
    sku = lookup_gpu(name) if name else None
    return (sku is not None and sku.vendor == "amd") or name.upper().startswith("AMD")


def amd_gpu_in_facts(facts: Any) -> str | None:
    """The AMD GPU the facts name (its name, with the gfx target when given), or None for an NVIDIA/CPU host."""
    if not isinstance(facts, Mapping):
        return None
    entries = [g for g in facts.get("gpus") or [] if isinstance(g, Mapping)]
    for entry in (*entries, facts):
        if _is_amd(entry):
            name = str(entry.get("name") or entry.get("gpu_name") or facts.get("gpu_name") or "AMD GPU")
            gfx = entry.get("gfx") or facts.get("gfx")
            return f"{name} ({gfx})" if gfx else name
    return None


def check_amd_host(host: str, facts: Any) -> list[str]:
    """One error for a host with AMD GPUs (none otherwise): what is supported and what to do instead."""
    found = amd_gpu_in_facts(facts)
    if found is None:
        return []
    return [f"{host}: {found} is AMD: vllm-fleet plans AMD Instinct GPUs (vllm-fleet plan --facts) but provisions, "
            "builds and deploys NVIDIA hosts only; run the plan with your own ROCm vLLM image, or remove the host "
            "from the inventory"]
