# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Image filters: thin wrappers over plugins/plugin_utils/image/ (docs: one <filter>.yml each)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import backend as ibk
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import build as ib
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import compat as ic


def vllm_image_select(
    vllm_version: Any,
    driver_version: Any = None,
    compute_capabilities: Any = None,
    variant: str = "cuda",
    allow_fallback: bool = True,
    registry_mirror: str = "",
    cpu_base_image: str = "",
    cuda_base: str = "nvidia",
    gpu_names: Any = None,
    forward_compat: str = "false",
    project_base_present: bool = True,
) -> dict[str, Any]:
    try:
        decision = ic.select_image(
            str(vllm_version),
            str(driver_version) if driver_version else None,
            [str(c) for c in (compute_capabilities or [])],
            variant=str(variant),
            allow_fallback=bool(allow_fallback),
            gpu_names=[str(n) for n in (gpu_names or [])],
            forward_compat=str(forward_compat).lower(),
        ).as_dict()
        decision["profile"] = ib.for_cuda_base(decision["profile"], str(cuda_base), str(cpu_base_image or ""),
                                               bool(project_base_present))
        decision["base_kind"] = decision["profile"].get("base_kind") or (
            "nvidia" if decision["variant"] == "cuda" else "project")
        decision["base_image"] = ib.resolve_base_image(
            decision["profile"], str(registry_mirror or ""), str(cpu_base_image or "")
        )
    except ValueError as exc:
        raise AnsibleFilterError(f"vllm_image_select: {exc}") from exc
    return decision


def vllm_image_check(
    vllm_version: Any,
    driver_version: Any = None,
    compute_capabilities: Any = None,
    variant: str = "cuda",
    allow_fallback: bool = True,
) -> str | None:
    return ic.check_host(
        str(vllm_version),
        str(driver_version) if driver_version else None,
        [str(c) for c in (compute_capabilities or [])],
        variant=str(variant),
        allow_fallback=bool(allow_fallback),
    )


def vllm_image_plan(profile: Mapping[str, Any], **options: Any) -> dict[str, Any]:
    try:
        return ib.build_plan(profile, **options)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_image_plan: {exc}") from exc


def vllm_image_build_backend(probes: Any, requested: str = "auto") -> dict[str, Any]:
    try:
        return ibk.choose_backend(str(requested), [dict(p) for p in (probes or [])])
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_image_build_backend: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "vllm_image_select": vllm_image_select,
            "vllm_image_check": vllm_image_check,
            "vllm_image_plan": vllm_image_plan,
            "vllm_image_build_backend": vllm_image_build_backend,
        }
