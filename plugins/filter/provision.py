# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Provision filters: thin wrappers over plugins/plugin_utils/provision/ (docs: one <filter>.yml each)."""
from __future__ import annotations

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


def nvidia_cuda_repo_source(facts: dict[str, Any], base_url: str, key: str = "") -> dict[str, str]:
    try:
        return dc.cuda_repo_source(
            str(base_url),
            str(key or ""),
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
            "nvidia_cuda_repo_source": nvidia_cuda_repo_source,
            "nvidia_smi_state": nvidia_smi_state,
            "nvidia_loaded_driver_version": nvidia_loaded_driver_version,
        }
