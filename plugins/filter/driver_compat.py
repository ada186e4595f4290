# Thin filter wrappers around plugins/plugin_utils/provision/driver.py (the logic and its tests live there).
from __future__ import annotations

DOCUMENTATION = r"""
name: nvidia_driver_cuda_check
short_description: Check an NVIDIA driver branch against the CUDA version of the planned image
description:
  - Returns a dict C(ok) (bool) and C(msg) (one line) saying whether driver branch I(_input) can run
    an image built for CUDA I(cuda) (R535 → CUDA ≤ 12.2, R575 → 12.9, R580 → 13.x).
  - The same file also provides C(nvidia_driver_packages), C(nvidia_fabricmanager_package),
    C(nvidia_driver_branch), C(nvidia_cuda_repo_path), C(nvidia_smi_state) and C(nvidia_loaded_driver_version); see EXAMPLES.
positional: cuda
options:
  _input:
    description: Driver branch (V(535)) or version (V(535.261.03)).
    type: raw
    required: true
  cuda:
    description: CUDA version the planned image is built with, e.g. V(12.2).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Refuse a driver too old for the image
  ansible.builtin.assert:
    that: (nvidia_driver_branch | vllm_fleet.fleet.nvidia_driver_cuda_check('12.2')).ok
- name: Packages for the branch
  ansible.builtin.debug:
    msg: "{{ 'Ubuntu' | vllm_fleet.fleet.nvidia_driver_packages('distro', '535') }}"
    # → ['nvidia-driver-535-server', 'nvidia-utils-535-server']
- name: Fabric manager pinned to the installed driver
  ansible.builtin.debug:
    msg: "{{ '580' | vllm_fleet.fleet.nvidia_fabricmanager_package('580.95.05-1') }}"
- name: Classify nvidia-smi
  ansible.builtin.debug:
    msg: "{{ smi.rc | vllm_fleet.fleet.nvidia_smi_state(smi.stdout ~ smi.stderr) }}"
"""

RETURN = r"""
_value:
  description: C(ok) and C(msg).
  type: dict
"""

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.provision import driver as dc


def nvidia_driver_cuda_check(branch: Any, cuda: str) -> dict[str, Any]:
    try:
        ok, msg = dc.check_branch_supports_cuda(branch, str(cuda))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return {"ok": ok, "msg": msg}


def nvidia_driver_packages(distribution: str, source: str, branch: Any, version: str = "") -> list[str]:
    try:
        return dc.driver_packages(str(distribution), str(source), branch, str(version or ""))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def nvidia_fabricmanager_package(branch: Any, driver_version: str) -> str:
    try:
        return dc.fabricmanager_package(branch, str(driver_version or ""))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def nvidia_cuda_repo_path(facts: dict[str, Any]) -> str:
    try:
        return dc.cuda_repo_path(
            str(facts.get("distribution", "")),
            str(facts.get("distribution_major_version", "")),
            str(facts.get("distribution_version", "")),
            str(facts.get("architecture", "")),
        )
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def nvidia_driver_branch(value: Any) -> int:
    try:
        return dc.parse_branch(value)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def nvidia_smi_state(rc: Any, output: str) -> str:
    return dc.classify_nvidia_smi(int(rc), str(output or ""))


def nvidia_loaded_driver_version(text: str) -> str:
    return dc.loaded_driver_version(str(text or ""))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "nvidia_driver_cuda_check": nvidia_driver_cuda_check,
            "nvidia_driver_packages": nvidia_driver_packages,
            "nvidia_fabricmanager_package": nvidia_fabricmanager_package,
            "nvidia_driver_branch": nvidia_driver_branch,
            "nvidia_cuda_repo_path": nvidia_cuda_repo_path,
            "nvidia_smi_state": nvidia_smi_state,
            "nvidia_loaded_driver_version": nvidia_loaded_driver_version,
        }
