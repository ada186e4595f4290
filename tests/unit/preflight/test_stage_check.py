"""The stage's fleet check (preflight/staging.py) and preflight planning from a model reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.filter.preflight import _host_state
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.fleet import fleet_preflight
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.staging import (
    fleet_stage_check,
    margin_bytes,
)

ROOT = Path(__file__).resolve().parents[3]
GIB = 1 << 30
COMMIT = "6cee5e81ee83917806bbde320786a8fb61efebee"


def _source(**over: Any) -> dict[str, Any]:
    base = {"kind": "hub", "name": "big", "revision": COMMIT, "asked": COMMIT, "pinned": True, "gated": False,
            "root": "/srv/models", "total_bytes": 100 * GIB, "files": [], "probe_url": "https://hub/x", "warnings": []}
    return {**base, **over}


def _host(free: int = 500 * GIB, **over: Any) -> dict[str, Any]:
    probe = {"free_bytes": free, "reachable": True, "current_revision": None, "verified": False}
    probe.update(over.pop("probe", {}))
    return {"source": _source(**over.pop("source", {})), "probe": probe, "group": over.get("group"),
            "token": over.get("token", False)}


def test_free_disk_below_the_checkpoint_and_its_margin_is_refused_with_host_and_fix() -> None:
    need = 100 * GIB + margin_bytes(100 * GIB)
    assert margin_bytes(100 * GIB) == 2 * GIB  # 2 % of the checkpoint (over the 1 GiB floor)
    result = fleet_stage_check({"ok": _host(free=need), "small": _host(free=need - 1)})
    assert result["errors"] == [f"small: big needs {need} bytes at /srv/models ({100 * GIB} of files + {2 * GIB} "
                                f"margin), {need - 1} are free: free space, or set vllm_fleet_model_root to a larger disk"]
    assert result["bytes"] == 200 * GIB


def test_a_host_that_already_has_the_verified_revision_needs_no_space_and_no_bytes() -> None:
    result = fleet_stage_check({"h": _host(free=0, probe={"current_revision": COMMIT, "verified": True})})
    assert result == {"errors": [], "warnings": [], "bytes": 0}


def test_an_unreachable_source_and_a_gated_repo_without_token_are_refused() -> None:
    result = fleet_stage_check({"a": _host(probe={"reachable": False, "reach_error": "timed out"}),
                                "b": _host(source={"gated": True}), "c": _host(source={"gated": True}, token=True)})
    text = " | ".join(result["errors"])
    assert "a: cannot reach the model source https://hub/x from the host (timed out)" in text
    assert "b: big is a gated repository: set vllm_fleet_hf_token" in text
    assert "c:" not in text


def test_a_multi_node_group_needs_a_pinned_and_equal_revision() -> None:
    branch = fleet_stage_check({"n1": _host(group="g", source={"pinned": False, "asked": "main"}),
                                "n2": _host(group="g")})
    assert any(e.startswith("n1: multi-node group g needs one checkpoint") and "'main'" in e for e in branch["errors"])
    split = fleet_stage_check({"n1": _host(group="g"), "n2": _host(group="g", source={"revision": "f" * 40})})
    assert any("multi-node group g would load different revisions" in e for e in split["errors"]), split
    assert fleet_stage_check({"n1": _host(group="g"), "n2": _host(group="g")})["errors"] == []
    warned = fleet_stage_check({"s": _host(source={"warnings": ["revision 'main' is a branch"]})})
    assert warned["warnings"] == ["s: revision 'main' is a branch"]


def test_preflight_plans_a_mirror_reference_from_the_cache_and_serves_the_staged_path(
        model_mirror: str, tmp_path: Path) -> None:
    facts_dir = ROOT / "inventories" / "example" / "recorded_facts"
    hv = {"group_names": ["vllm_servers", "gpu_h200"], "vllm_fleet_vllm_version": "0.32.0",
          "vllm_fleet_model": {"url": model_mirror}, "vllm_fleet_model_cache": str(tmp_path / "cache"),
          "vllm_fleet_model_root": "/data/models", "vllm_fleet_recorded_facts_dir": str(facts_dir)}
    state = _host_state("h200-01", hv, str(facts_dir), str(tmp_path / "artifacts"))
    # The staged revision's directory (the mirror manifest's revision r7), not the symlink that follows the newest one.
    staged = "/data/models/.revisions/gpt-oss-20b/r7"
    assert state["model_error"] is None and state["model_dir"] == staged
    result = fleet_preflight({"h200-01": state}, recorded=True, planning=True)
    assert result["errors"] == [], result["errors"]
    record = result["records"]["h200-01"]
    assert record["plan"]["engine_args"]["model"] == staged
    assert record["launch"]["model_dir"] == staged
    # The API's model name is the reference's name, not the revision directory's; an inventory's own name wins.
    assert record["launch"]["served_model_name"] == "gpt-oss-20b"
    hv["vllm_serve_served_model_name"] = "chat"
    named = fleet_preflight({"h200-01": _host_state("h200-01", hv, str(facts_dir), str(tmp_path / "artifacts"))},
                            recorded=True, planning=True)
    assert named["records"]["h200-01"]["launch"]["served_model_name"] == "chat"
    # The mirror gone and the cache empty: one line that names the host and the fix.
    hv["vllm_fleet_model"] = {"url": model_mirror + "-gone"}
    gone = fleet_preflight({"h200-01": _host_state("h200-01", hv, str(facts_dir), str(tmp_path))}, recorded=True,
                           planning=True)
    assert any(e.startswith("h200-01: ") and "answered HTTP 404" in e for e in gone["errors"]), gone["errors"]
