"""Preflight for a model given as a reference (Hub, mirror, shared path): resolve once, plan from the cache, check.

:func:`resolve_for_host` turns a host's ``vllm_fleet_model`` reference into the controller cache directory the
planner reads, and the path the host serves: the staged revision's directory
``<vllm_fleet_model_root>/.revisions/<name>/<revision>`` (not the symlink ``<root>/<name>``, which follows the newest
staged revision: a container mounts the directory of the revision in its launch record, so a new revision changes
the record and reaches the replicas through the rollout, canary first), memoised per reference for the fleet.
:func:`fleet_stage_check` is the stage playbook's one controller step: the probes of every
host (free disk at the model root, the source reachable) against the manifest, the revision equal across a
multi-node group, a token for a gated repository; each refusal names the host and the fix.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import model_source as ms

#: Bytes kept free beside the checkpoint (logs, the image's layers are elsewhere): 1 GiB or 2 %, the larger.
_MARGIN_FIXED, _MARGIN_SHARE = 1 << 30, 0.02


def margin_bytes(total: int) -> int:
    """Free space the stage keeps beside a checkpoint of ``total`` bytes."""
    return max(_MARGIN_FIXED if total > (8 << 30) else 0, int(total * _MARGIN_SHARE))


@functools.lru_cache(maxsize=64)
def _resolve(ref_json: str, cache_dir: str | None, offline: bool | None, token: str | None) -> ms.Resolved:
    return ms.resolve(json.loads(ref_json), cache_dir=cache_dir, offline=offline, token=token)


def model_root(variables: Mapping[str, Any]) -> str:
    return str(variables.get("vllm_fleet_model_root") or ms.DEFAULT_ROOT).rstrip("/") or "/"


def resolve_for_host(variables: Mapping[str, Any]) -> dict[str, Any]:
    """``{"directory", "host_path", "source", "defaults"}`` for a reference (``source``: what the stage needs, no
    secret; ``defaults``: the host variables a reference implies unless the inventory sets them - the served path,
    and the served model name: the Hub repository id, as ``vllm serve org/name`` names it, or the mirror's name, not
    the revision directory's name).

    :raises ModelSourceError: a bad reference, or a source that cannot be read and is not cached.
    """
    value = variables["vllm_fleet_model"]
    ref = ms.parse_reference(value)
    offline = variables.get("vllm_fleet_offline")
    token = variables.get("vllm_fleet_hf_token")
    resolved = _resolve(json.dumps(dict(value), sort_keys=True), variables.get("vllm_fleet_model_cache"),
                        offline if isinstance(offline, bool) else None, str(token) if token else None)
    revision = resolved.manifest["revision"]
    host_path = ref.source if ref.kind == "path" else f"{model_root(variables)}/.revisions/{ref.name}/{revision}"
    files = ms.file_urls(ref, resolved.manifest) if ref.kind != "path" else []
    source = {"kind": ref.kind, "name": ref.name, "revision": revision, "asked": ref.revision,
              "pinned": ref.pinned, "gated": ref.gated, "root": model_root(variables), "host_path": host_path,
              "total_bytes": ms.total_bytes(resolved.manifest), "files": files, "note": resolved.note,
              "probe_url": (f"{ref.source}/{ref.manifest}" if ref.kind == "mirror" else (files[0]["url"] if files else None)),
              "warnings": ms.reference_warnings(ref)}
    defaults = {"vllm_fleet_served_model_path": host_path,
                "vllm_serve_served_model_name": ref.source if ref.kind == "hub" else ref.name}
    return {"directory": resolved.directory, "host_path": host_path, "source": source, "defaults": defaults}


def fleet_stage_check(hosts: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Check every host before any host changes: ``{"errors": [...], "warnings": [...], "bytes": N}``.

    ``hosts``: ``{name: {"source": resolve_for_host's source or None, "probe": model_stage's probe result or None,
    "group": multi-node group or None, "token": bool}}``.
    """
    errors: list[str] = []
    warnings: list[str] = []
    groups: dict[str, dict[str, list[str]]] = {}
    planned = 0
    for host, state in hosts.items():
        source = state.get("source")
        if not source or source.get("kind") == "path":
            continue
        warnings += [f"{host}: {line}" for line in source.get("warnings", [])]
        if source.get("gated") and not state.get("token"):
            errors.append(f"{host}: {source['name']} is a gated repository: set vllm_fleet_hf_token (ansible-vault) "
                          "to a token that accepted its licence")
        if state.get("group"):
            if not source.get("pinned"):
                errors.append(f"{host}: multi-node group {state['group']} needs one checkpoint on every node: pin "
                              f"vllm_fleet_model.revision to a commit hash, not the branch {source.get('asked')!r}")
            groups.setdefault(str(state["group"]), {}).setdefault(str(source["revision"]), []).append(host)
        probe = state.get("probe") or {}
        if probe.get("reachable") is False:
            errors.append(f"{host}: cannot reach the model source {source.get('probe_url')} from the host "
                          f"({probe.get('reach_error')}): open the route or set vllm_fleet_model to a mirror it reaches")
        if probe.get("current_revision") == source["revision"] and probe.get("verified"):
            continue
        total = int(source["total_bytes"])
        free = probe.get("free_bytes")
        need = total + margin_bytes(total)
        if isinstance(free, int) and free < need:
            errors.append(f"{host}: {source['name']} needs {need} bytes at {source['root']} ({total} of files + "
                          f"{need - total} margin), {free} are free: free space, or set vllm_fleet_model_root to a "
                          "larger disk")
        planned += total
    for group, revisions in sorted(groups.items()):
        if len(revisions) > 1:
            detail = "; ".join(f"{rev}: {', '.join(sorted(names))}" for rev, names in sorted(revisions.items()))
            errors.append(f"{sorted(n for names in revisions.values() for n in names)[0]}: multi-node group {group} "
                          f"would load different revisions ({detail}): pin one vllm_fleet_model.revision for the group")
    return {"errors": errors, "warnings": warnings, "bytes": planned}
