# Thin filter wrappers around plugins/plugin_utils/image/compat.py, image_build.py and image_tag.py
# (the logic and its tests live there).
from __future__ import annotations

DOCUMENTATION = r"""
name: vllm_image_select
short_description: Choose the vLLM image profile (vLLM → torch → CUDA → base image) a host can run
description:
  - Looks the planned vLLM version up in the compatibility table of C(image_compat.py) and returns the
    profile whose minimum driver and compute capabilities fit the host, newest CUDA first; an older
    vLLM/PyTorch pair when allowed and needed (R535 fleets). Raises a one-line refusal when nothing fits.
  - The same file provides C(vllm_image_plan) (tag, render context, build args for the role),
    C(vllm_image_tag) (content-addressed tag from build inputs) and C(vllm_image_check) (for preflight,
    C(None) or the refusal message); see EXAMPLES.
options:
  _input:
    description: The planned vLLM version, e.g. V(0.32.0).
    type: str
    required: true
  driver_version:
    description: NVIDIA driver version (CONTRACT 1 C(driver_version)); ignored for the cpu variant.
    type: str
  compute_capabilities:
    description: Compute capabilities of the host's GPUs, e.g. V(['9.0']).
    type: list
    elements: str
  variant:
    description: V(cuda) or V(cpu).
    type: str
    default: cuda
  allow_fallback:
    description: Allow an older vLLM/PyTorch pair when the planned version cannot run on the driver.
    type: bool
    default: true
  registry_mirror:
    description: Prefix for the CUDA base image (a registry mirror), e.g. V(mirror.example.com/).
    type: str
    default: ""
  cpu_base_image:
    description: Base image of the cpu variant (overrides the table's).
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Choose the image for this host
  ansible.builtin.set_fact:
    __vllm_image_decision: "{{ '0.32.0' | vllm_fleet.fleet.vllm_image_select(driver_version='535.261.03',
      compute_capabilities=['8.0']) }}"
    # → key cu121 (vLLM 0.6.3.post1, torch 2.4.0, nvidia/cuda:12.2.2-base-ubuntu22.04), fallback true
- name: Preflight refusal
  ansible.builtin.assert:
    that: __msg is none
    fail_msg: "{{ __msg }}"
  vars:
    __msg: "{{ '0.32.0' | vllm_fleet.fleet.vllm_image_check(driver_version='470.82.01') }}"
- name: Build plan (tag, render context)
  ansible.builtin.set_fact:
    __vllm_image_plan: "{{ __vllm_image_decision.profile | vllm_fleet.fleet.vllm_image_plan(
      repository='vllm-fleet/vllm', base_image=__base, base_image_id=__base_id, template_sha256=__sha) }}"
- name: Tag from raw inputs
  ansible.builtin.debug:
    msg: "{{ inputs | vllm_fleet.fleet.vllm_image_tag }}"
"""

RETURN = r"""
_value:
  description: >-
    C(profile) (the table row), C(key), C(variant), C(vllm_version), C(requested_vllm_version),
    C(fallback), C(reason), C(warnings), C(base_image).
  type: dict
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import build as ib
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import compat as ic
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import tag as it


def vllm_image_select(
    vllm_version: Any,
    driver_version: Any = None,
    compute_capabilities: Any = None,
    variant: str = "cuda",
    allow_fallback: bool = True,
    registry_mirror: str = "",
    cpu_base_image: str = "",
) -> dict[str, Any]:
    try:
        decision = ic.select_image(
            str(vllm_version),
            str(driver_version) if driver_version else None,
            [str(c) for c in (compute_capabilities or [])],
            variant=str(variant),
            allow_fallback=bool(allow_fallback),
        ).as_dict()
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


def vllm_image_tag(inputs: Mapping[str, Any]) -> str:
    try:
        return it.image_tag(inputs)
    except ValueError as exc:
        raise AnsibleFilterError(f"vllm_image_tag: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "vllm_image_select": vllm_image_select,
            "vllm_image_check": vllm_image_check,
            "vllm_image_plan": vllm_image_plan,
            "vllm_image_tag": vllm_image_tag,
        }
