"""planner/releases/: one block per vLLM release, from which every stage derives its per-release facts.

Loops over the releases (a new block is tested by adding it, no copy of a test per release), the default version
written once (and checked where Ansible or the docs need it as a literal), and a hypothetical 0.34 block added in a
fresh interpreter: one block changes the rules, the option names, the image table and the dashboards pin.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import compat
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image.compat import select_image
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import upstream_dashboards
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import engine_fields, releases, rules

from ..image._image_render import plan_for, render

ROOT = Path(__file__).resolve().parents[3]
BLOCKS = {r.version: r for r in releases.RELEASES}


def test_the_blocks_are_the_verified_releases_oldest_first() -> None:
    assert [r.version for r in releases.RELEASES] == sorted(rules.VERIFIED, key=rules.parse_version)
    assert releases.NEWEST.version == rules.DEFAULT_VLLM_VERSION == rules.NEWEST_VERIFIED_VERSION
    assert len(BLOCKS) == len(releases.RELEASES)


@pytest.mark.parametrize("version", list(BLOCKS))
def test_a_block_is_consistent_with_itself(version: str) -> None:
    block = BLOCKS[version]
    assert block.sources, "a verified release cites its facts"
    assert version in block.archive.sdist and len(block.archive.sha256) == 64
    for row in block.images:
        assert row.vllm_version == version and any(version in req for req in row.requirements)
    for entry in (*block.added_args, *block.removed_args, *block.removed_env):
        assert entry.since == block.key, entry  # a block's changes are its own release's
    for name in block.changes:
        assert hasattr(rules.rules_for(version), name)


@pytest.mark.parametrize("version", list(BLOCKS))
def test_every_stage_reads_the_block(version: str) -> None:
    block = BLOCKS[version]
    assert rules.VERIFIED[version] == dict(block.sources)
    applied = rules.rules_for(version)
    for name, value in block.changes.items():
        assert getattr(applied, name) == value
    assert {a.name for a in block.added_args} <= engine_fields.engine_arg_names(version)
    assert block.added_serve_only <= engine_fields.serve_only_names(version)
    assert block.added_negatable <= engine_fields.negatable_names(version)
    assert {p.key for p in compat.profiles_for(version)} == {row.key for row in block.images}
    assert upstream_dashboards.release(version).sha256 == block.archive.sha256


@pytest.mark.parametrize(("version", "key"), [(r.version, row.key) for r in releases.RELEASES for row in r.images
                                              if row.variant == "cuda"])
def test_every_cuda_row_selects_renders_and_tags_for_its_release(version: str, key: str) -> None:
    profile = compat.get_profile(key, version)
    assert profile.min_driver is not None
    decision = select_image(version, profile.min_driver, [profile.compute_capabilities[-1]])
    assert (decision.profile.key, decision.profile.vllm_version, decision.fallback) == (key, version, False)
    plan = plan_for(decision, install_mode="index")
    assert plan["tag"].startswith(f"{version}-{key}-")
    text = render(plan)
    assert f'org.vllm-fleet.vllm.version="{version}"' in text
    assert " ".join(profile.requirements) in text


#: Where the default version must be written as a literal (Ansible and the docs cannot import it), and the pattern
#: that finds it there.
LITERALS = [
    ("roles/vllm_image/defaults/main.yml", r"vllm_fleet_vllm_version \| default\('([0-9.]+)', true\)"),
    ("roles/vllm_image/meta/argument_specs.yml", r"vllm_fleet_vllm_version \| default\('([0-9.]+)', true\)"),
    ("plugins/filter/vllm_plan.yml", r'default: "(\d+\.\d+\.\d+)"'),
    ("docs/sizing.md", r"the default target is ([0-9.]+)"),
    ("molecule/monitoring/tests/test_monitoring.py", r"the GPU hosts' default, ([0-9.]+)\)"),
]


@pytest.mark.parametrize(("path", "pattern"), LITERALS)
def test_the_default_version_is_the_newest_block_wherever_it_is_written(path: str, pattern: str) -> None:
    found = re.findall(pattern, (ROOT / path).read_text())
    assert found and set(found) == {rules.DEFAULT_VLLM_VERSION}, (path, found)


_NEW_RELEASE = textwrap.dedent('''
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import releases as R
    V = (0, 34, 0)
    row = R.ImageRow(key="cu130", variant="cuda", vllm_version="0.34.0", vllm_package="vllm", torch_version="2.15.0",
                     cuda_version="13.0", torch_cuda="13.0", compute_capabilities=R.CC_CU130,
                     base_image="nvidia/cuda:13.0.3-base-ubuntu24.04", python_version="3.12", glibc="2.39",
                     requirements=("vllm==0.34.0", "torch==2.15.0"), ray_requirements=("ray==2.56.0",))
    block = R.Release(version="0.34.0", sources={}, archive=R.Archive("vllm-0.34.0.tar.gz", 1, "0" * 64),
                      images=(row,), changes={"default_gpu_memory_utilization": 0.9},
                      added_args=(R.Added("brand_new", V, "a hypothetical new option"),),
                      removed_args=(R.Removed("seed", V, "a hypothetical removal"),),
                      removed_env=(R.Removed("VLLM_HOST_IP", V, "a hypothetical removal"),))
    R.RELEASES = (*R.RELEASES, block)  # the block's line in RELEASES
    R.NEWEST = block
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import engine_fields, rules
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import compat
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import upstream_dashboards
    new, old = rules.rules_for("0.34.0"), rules.rules_for("0.33.0")
    print(json.dumps({
        "default": rules.DEFAULT_VLLM_VERSION, "verified": sorted(rules.VERIFIED),
        "gmu": [old.default_gpu_memory_utilization, new.default_gpu_memory_utilization],
        "cublas": new.cublas_outside_budget, "removed": "seed" in new.removed_flags, "old_removed": "seed" in
        old.removed_flags, "not_yet": "brand-new" in old.not_yet_args,
        "env": [e.name for e in new.removed_env if e.name == "VLLM_HOST_IP"],
        "names": ["brand_new" in engine_fields.engine_arg_names("0.34.0"), "seed" in engine_fields.engine_arg_names(
            "0.34.0"), "seed" in engine_fields.engine_arg_names("0.33.0")],
        "image": [p.key for p in compat.profiles_for("0.34.0")],
        "dashboards": upstream_dashboards.release("0.34.0").sdist,
    }))
''')


def test_a_new_release_is_one_block() -> None:
    """A hypothetical 0.34 (a new default, a removed flag and variable, a new option, an image row), added as one
    block in a fresh interpreter, reaches the rules, the option names, the image table and the dashboards pin."""
    proc = subprocess.run([sys.executable, "-c", _NEW_RELEASE, str(ROOT / "collections")], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    assert got["default"] == "0.34.0" and got["verified"][-1] == "0.34.0"
    assert got["gmu"] == [0.92, 0.9] and got["cublas"] is True  # its own change; 0.33's carried forward
    assert got["removed"] and not got["old_removed"] and got["not_yet"]
    assert got["env"] == ["VLLM_HOST_IP"]
    assert got["names"] == [True, False, True]
    assert got["image"] == ["cu130"] and got["dashboards"] == "vllm-0.34.0.tar.gz"


def test_a_block_carries_the_previous_citations_it_does_not_move() -> None:
    """0.33 starts from 0.32's citations (releases.carried) and lists only what is new or moved; a fact it drops
    must be one 0.32 cites (a typo would silently keep the fact)."""
    old, new = releases.RELEASES[0].sources, releases.RELEASES[1].sources
    carried = {key for key in new if key in old and new[key] == old[key]}
    assert len(carried) >= 30 and "env:VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE" not in new
    assert set(old) - set(new) == {"env:VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE"}
    with pytest.raises(ValueError, match="cites no"):
        releases.carried(releases.RELEASES[0], dropped=("env:NO_SUCH_FACT",))
