"""No dead filters: every registered filter is called by a playbook, a role, site.yml or a molecule scenario, or is
public API a user calls in their own plays (the PUBLIC set below, each with the README line that makes it so).

A filter nothing calls is code and documentation without a caller (issue 34 removed nineteen of them); the tests
of what it wraps belong to the core function in plugins/plugin_utils/, not to a wrapper.
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = "vllm_fleet.fleet"
#: Where a filter counts as used: what the collection runs.
CALLERS = ("playbooks", "roles", "site.yml", "molecule")

#: Filters a user calls in their own plays, whether or not the collection's plays do. Each names the line of
#: README.md (or docs/) that presents it, which the test checks is still there.
PUBLIC: dict[str, tuple[str, str]] = {
    # README.md: "- **Plan** (`vllm-fleet plan`, filter `vllm_fleet.fleet.vllm_plan`): GPU facts + the model's ..."
    "vllm_plan": ("README.md", "filter `vllm_fleet.fleet.vllm_plan`"),
}


def _registered() -> dict[str, str]:
    """Filter name -> its stage file under plugins/filter/."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        if path.stem == "__init__":
            continue
        module = importlib.import_module(f"ansible_collections.vllm_fleet.fleet.plugins.filter.{path.stem}")
        found.update(dict.fromkeys(module.FilterModule().filters(), path.name))
    return found


@cache
def _caller_text() -> str:
    texts = []
    for name in CALLERS:
        top = ROOT / name
        for path in sorted([top] if top.is_file() else top.rglob("*")):
            if path.is_file():
                try:
                    texts.append(path.read_text(encoding="utf-8"))
                except UnicodeDecodeError:
                    continue
    return "\n".join(texts)


def _called(name: str) -> bool:
    """``vllm_fleet.fleet.NAME`` anywhere, or the bare name as a filter: ``| NAME`` or ``map('NAME')``."""
    pattern = rf"{re.escape(COLLECTION)}\.{name}\b|\|[ \t]*{name}\b|\b(?:map|select|reject)\(\s*['\"]{name}['\"]"
    return re.search(pattern, _caller_text()) is not None


REGISTERED = _registered()


def test_the_callers_are_there() -> None:
    assert all((ROOT / name).exists() for name in CALLERS)
    assert _called("fleet_preflight") and not _called("no_such_filter")
    assert not _called("fleet_errors")  # removed in issue 34: its name is in no caller


@pytest.mark.parametrize("name", sorted(REGISTERED))
def test_every_filter_is_called_or_public(name: str) -> None:
    assert name in PUBLIC or _called(name), (
        f"filter {name} (plugins/filter/{REGISTERED[name]}) is called by no playbook, role, site.yml or molecule "
        f"scenario: remove it with plugins/filter/{name}.yml (keep its core function's tests, aimed at the core), "
        f"or, if users call it in their own plays, add it to PUBLIC with the README line that says so")


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_filters_are_registered_and_documented_as_public(name: str) -> None:
    doc, line = PUBLIC[name]
    assert name in REGISTERED, f"PUBLIC names {name}, which is no registered filter"
    assert line in (ROOT / doc).read_text(encoding="utf-8"), f"{doc} no longer says {line!r}: is {name} public?"
