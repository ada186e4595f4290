"""Every plugin documents itself: `ansible-doc` renders each module and each documented filter cleanly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_DOC = Path(sys.executable).parent / "ansible-doc"


def _documented(kind: str) -> list[str]:
    names = []
    for path in sorted((ROOT / "plugins" / kind).glob("*.py")):
        text = path.read_text()
        if "DOCUMENTATION" not in text:
            continue
        if kind == "modules":
            names.append(path.stem)
        else:
            match = re.search(r'DOCUMENTATION\s*=\s*r?"""\s*\nname:\s*(\S+)', text)
            if match:
                names.append(match.group(1))
    return names


@pytest.mark.parametrize(("kind", "name"), [("module", n) for n in _documented("modules")]
                         + [("filter", n) for n in _documented("filter")])
def test_ansible_doc_renders(kind: str, name: str) -> None:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    proc = subprocess.run([str(ANSIBLE_DOC), "-t", kind, f"vllm_fleet.fleet.{name}"], capture_output=True,
                          text=True, cwd=ROOT, env=env, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ERROR" not in proc.stderr, proc.stderr
    assert f"vllm_fleet.fleet.{name}" in proc.stdout


def test_the_core_plugins_are_documented() -> None:
    assert {"gpu_facts", "tiny_model"} <= set(_documented("modules"))
    assert "vllm_plan" in _documented("filter")
