# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Model staging filters: thin wrappers over plugins/plugin_utils/preflight/staging.py (docs: one <filter>.yml each)."""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_source import (
    ModelSourceError,
    is_reference,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.staging import (
    fleet_stage_check,
    resolve_for_host,
)


def _data(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _vars(hv: Any) -> dict[str, Any]:
    return _data({str(k): hv[k] for k in hv if str(k).startswith("vllm_fleet_")})


def model_stage_sources(names: Sequence[str], hostvars: Any) -> dict[str, Any]:
    """``{host: source or None}`` (None: a controller path or shared storage, nothing to stage); no secret inside."""
    out: dict[str, Any] = {}
    errors = []
    for name in names:
        variables = _vars(hostvars[name])
        if not is_reference(variables.get("vllm_fleet_model")):
            out[str(name)] = None
            continue
        try:
            source = resolve_for_host(variables)["source"]
        except ModelSourceError as exc:
            errors.append(f"{name}: {exc}")
            continue
        out[str(name)] = None if source["kind"] == "path" else source
    if errors:
        raise AnsibleFilterError(" | ".join(errors))
    return out


def model_stage_check(names: Sequence[str], hostvars: Any, sources: Mapping[str, Any],
                      probes: Mapping[str, Any]) -> dict[str, Any]:
    """The fleet's staging check: ``{"errors", "warnings", "bytes"}`` (each error names host and fix)."""
    if not isinstance(sources, Mapping) or not isinstance(probes, Mapping):
        raise AnsibleFilterError("model_stage_check expects the sources and the probes as dicts host -> result")
    hosts = {}
    for name in names:
        hv = hostvars[name]
        hosts[str(name)] = {"source": _data(sources.get(name)), "probe": _data(probes.get(name)),
                            "group": hv.get("vllm_fleet_multinode_group"), "token": bool(hv.get("vllm_fleet_hf_token"))}
    return fleet_stage_check(hosts)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"model_stage_sources": model_stage_sources, "model_stage_check": model_stage_check}
