"""Every plugin documents itself: `ansible-doc` renders each module and each filter cleanly.

Modules carry DOCUMENTATION in their Python file; filters are grouped one file per stage in plugins/filter/*.py
and each filter has a YAML sidecar plugins/filter/<filter name>.yml (DOCUMENTATION, EXAMPLES, RETURN), the way
ansible.builtin documents its filters. ansible-doc runs once per plugin type for all names (one call takes
~1.5 s, so one call per plugin is too slow) and each parametrised case checks its own name in the result.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_DOC = Path(sys.executable).parent / "ansible-doc"
COLLECTION = "vllm_fleet.fleet"
FILTER_DIR = ROOT / "plugins" / "filter"


def _filters() -> dict[str, str]:
    """Filter name -> the stage file (stem) whose FilterModule provides it."""
    found: dict[str, str] = {}
    for path in sorted(FILTER_DIR.glob("*.py")):
        if path.stem == "__init__":
            continue
        module = importlib.import_module(f"ansible_collections.vllm_fleet.fleet.plugins.filter.{path.stem}")
        for name in module.FilterModule().filters():
            assert name not in found, f"filter {name} is defined in both {found[name]}.py and {path.name}"
            found[name] = path.stem
    return found


def _modules() -> list[str]:
    return sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py")
                  if p.stem != "__init__" and "DOCUMENTATION" in p.read_text())


FILTERS = _filters()
MODULES = _modules()


@dataclass
class _Rendered:
    rc: int  # of the last --json call
    docs: dict[str, Any]  # fqcn -> ansible-doc --json entry
    text: str  # the text rendering of every name that did not fail
    failed: dict[str, str]  # name -> stderr of the call that named it
    stderr: str


@cache
def _ansible_doc(kind: str, names: tuple[str, ...]) -> _Rendered:
    """ansible-doc once for all names (one call per plugin would take over a minute), --json and text.

    ansible-doc renders nothing when one plugin of the call is broken, so the names its stderr blames are set
    aside (their own test case fails with that stderr) and the call is repeated for the others.
    """
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    todo, failed = list(names), {}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(ANSIBLE_DOC), "-t", kind, *args, *(f"{COLLECTION}.{n}" for n in todo)],
                              capture_output=True, text=True, cwd=ROOT, env=env, check=False, timeout=300)

    while True:
        as_json = run("--json")
        blamed = [n for n in todo if f"{COLLECTION}.{n} " in as_json.stderr]
        if as_json.returncode == 0 or not blamed:
            break
        failed.update(dict.fromkeys(blamed, as_json.stderr))
        todo = [n for n in todo if n not in blamed]
    docs = json.loads(as_json.stdout) if as_json.returncode == 0 and as_json.stdout.strip() else {}
    as_text = run()
    return _Rendered(as_json.returncode, docs, as_text.stdout, failed, as_json.stderr + as_text.stderr)


def _names(kind: str) -> tuple[str, ...]:
    return tuple(MODULES) if kind == "module" else tuple(sorted(FILTERS))


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_every_filter_has_a_sidecar(name: str) -> None:
    sidecar = FILTER_DIR / f"{name}.yml"
    assert sidecar.is_file(), f"filter {name} ({FILTERS[name]}.py) has no plugins/filter/{name}.yml"
    data = yaml.safe_load(sidecar.read_text())
    assert set(data) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, sidecar
    doc = data["DOCUMENTATION"]
    assert doc["name"] == name
    assert doc["version_added"] == "0.1.0"
    assert doc["short_description"] and doc["description"] and doc["author"]
    assert "_input" in doc["options"], f"{sidecar}: document the filter's input as option _input"
    assert all(opt.get("type") and opt.get("description") for opt in doc["options"].values()), sidecar
    assert "_value" in data["RETURN"] and f"{COLLECTION}.{name}" in data["EXAMPLES"]


def test_no_sidecar_without_a_filter() -> None:
    assert {p.stem for p in FILTER_DIR.glob("*.yml")} == set(FILTERS)


@pytest.mark.parametrize(("kind", "name"), [("module", n) for n in MODULES] + [("filter", n) for n in sorted(FILTERS)])
def test_ansible_doc_renders(kind: str, name: str) -> None:
    result = _ansible_doc(kind, _names(kind))
    fqcn = f"{COLLECTION}.{name}"
    assert name not in result.failed, result.failed.get(name)
    assert result.rc == 0, result.stderr
    assert result.docs[fqcn]["doc"].get("module" if kind == "module" else "name") == name
    assert f"> {kind.upper()} {fqcn} (" in result.text, f"ansible-doc did not render {fqcn}: {result.stderr}"


@pytest.mark.parametrize("kind", ["module", "filter"])
def test_ansible_doc_is_clean(kind: str) -> None:
    result = _ansible_doc(kind, _names(kind))
    assert not result.failed and result.rc == 0, result.failed or result.stderr
    assert "ERROR" not in result.stderr and "WARNING" not in result.stderr, result.stderr
    assert set(result.docs) == {f"{COLLECTION}.{n}" for n in _names(kind)}


def test_the_core_plugins_are_documented() -> None:
    assert {"gpu_facts", "tiny_model"} <= set(MODULES)
    assert "vllm_plan" in FILTERS and (FILTER_DIR / "vllm_plan.yml").is_file()
