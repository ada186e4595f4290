"""The inventory of vLLM's start-up rules (preflight/startup_rules.py): every rule has a check that exists or a
reason, its words are at the cited line of each version's source, and the counts docs/preflight.md gives."""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import startup
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.startup_rules import (
    KINDS,
    RULES,
    counts,
)

ROOT = Path(__file__).resolve().parents[3]
SRC = Path(os.environ.get("VLLM_FLEET_VLLM_SRC", ROOT / ".cache" / "vllm-src"))
VERSIONS = ("0.32.0", "0.33.0")
PACKAGE = "ansible_collections.vllm_fleet.fleet.plugins.plugin_utils"


def test_every_rule_has_a_check_or_a_reason_not_both() -> None:
    for rule in RULES:
        assert bool(rule.check) != bool(rule.reason), rule.id
        assert (rule.kind in KINDS) == bool(rule.reason), rule.id
        assert set(rule.where) == set(VERSIONS), rule.id
        assert rule.words.strip(), rule.id
    assert len({rule.id for rule in RULES}) == len(RULES)


@pytest.mark.parametrize("rule", [r for r in RULES if r.check], ids=lambda r: r.id)
def test_a_named_check_exists(rule) -> None:  # type: ignore[no-untyped-def]
    module, function = rule.check.split(":", 1)
    assert callable(getattr(importlib.import_module(f"{PACKAGE}.{module}"), function, None)), rule.check
    if module == "preflight.startup" and function not in ("check_plan", "check_groups"):
        assert function in startup.CHECKS, f"{function} is not run by startup.check_host"


def test_every_startup_check_is_listed() -> None:
    listed = {r.check.partition(":")[2] for r in RULES if r.check.startswith("preflight.startup:")}
    assert set(startup.CHECKS) <= listed, sorted(set(startup.CHECKS) - listed)


@pytest.mark.parametrize("version", VERSIONS)
def test_vllms_words_are_at_the_cited_line(version: str) -> None:
    root = SRC / version
    if not (root / "vllm").is_dir():
        pytest.skip(f"no vLLM {version} source in {root}: run `make vllm-src`")
    for rule in RULES:
        path, line = rule.where[version].rsplit(":", 1)
        lines = (root / path).read_text(encoding="utf-8").splitlines()
        assert rule.words in lines[int(line) - 1], f"{rule.id}: {rule.where[version]}"


@pytest.mark.parametrize("version", VERSIONS)
def test_counts_per_version_match_the_docs(version: str) -> None:
    found = counts(version)
    assert found["scanned"] >= 50
    assert found["mirrored"] + sum(found[kind] for kind in KINDS) == found["scanned"]
    doc = (ROOT / "docs" / "preflight.md").read_text(encoding="utf-8")
    row = re.search(rf"\| {re.escape(version)} \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|", doc)
    assert row, f"docs/preflight.md has no counts row for {version}"
    assert tuple(map(int, row.groups())) == (found["scanned"], found["mirrored"], *(found[kind] for kind in KINDS))
