"""The gpu_facts tests' fixture folders (tests/fixtures/gpu/<name>/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "gpu"


def fixture_names(kind: str) -> list[str]:
    """Fixture folders that hold ``expected_facts.json`` (kind "facts") or ``expected_error.json`` ("error")."""
    wanted = "expected_facts.json" if kind == "facts" else "expected_error.json"
    return sorted(path.parent.name for path in FIXTURES.glob("*/" + wanted))


def read(name: str, filename: str) -> str | None:
    """A fixture file's text, or None when the fixture has no such file."""
    path = FIXTURES / name / filename
    return path.read_text(encoding="utf-8") if path.exists() else None


def load_json(name: str, filename: str) -> Any:
    text = read(name, filename)
    assert text is not None, f"{name}/{filename} is missing"
    return json.loads(text)


# Per-GPU keys added after the h200_device capture (2026-11-30): the PCIe link and the kernel's Xid lines.
NEW_GPU_KEYS = ("pcie_link_gen_max", "pcie_link_gen_current", "pcie_link_width_max", "pcie_link_width_current",
                "pcie_replays", "xid_errors", "xid_codes")
