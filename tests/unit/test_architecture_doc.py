"""docs/architecture.md draws the tree as it is: every stage package and module, every filter file."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text()
TREE = DOC.split("## The tree, by pipeline stage", 1)[1].split("```", 2)[1]
PLUGIN_UTILS = ROOT / "plugins" / "plugin_utils"
STAGES = sorted(p.name for p in PLUGIN_UTILS.iterdir() if p.is_dir() and (p / "__init__.py").exists())


def _stage_block(stage: str) -> str:
    """The tree lines from ``<stage>/`` to the next stage (or the filter folder)."""
    lines = TREE.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^\s+{stage}/\s", line))
    indent = len(lines[start]) - len(lines[start].lstrip())
    block = [lines[start]]
    for line in lines[start + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent and re.match(r"^\s+[\w.]+/", line):
            break
        block.append(line)
    return "\n".join(block)


def test_every_stage_is_drawn() -> None:
    assert STAGES == ["deploy", "image", "observe", "planner", "preflight", "provision"]
    for stage in STAGES:
        assert re.search(rf"^\s+{stage}/\s", TREE, flags=re.M), f"{stage}/ missing from the tree"


def test_every_module_is_named_under_its_stage() -> None:
    for stage in STAGES:
        block = _stage_block(stage)
        for path in sorted((PLUGIN_UTILS / stage).glob("*.py")):
            if path.name != "__init__.py":
                assert re.search(rf"\b{re.escape(path.name)}\b", block), f"{stage}/{path.name} not in the tree"


def test_every_named_module_exists() -> None:
    for stage in STAGES:
        for name in re.findall(r"\b(\w+\.py)\b", _stage_block(stage)):
            assert (PLUGIN_UTILS / stage / name).exists(), f"the tree names {stage}/{name}, which does not exist"


def test_filter_files_and_host_side_code() -> None:
    filters = sorted(p.name for p in (ROOT / "plugins" / "filter").glob("*.py"))
    for name in filters:
        assert name in TREE, f"plugins/filter/{name} not in the tree"
    host_side = sorted(p.name for p in (ROOT / "plugins" / "module_utils").glob("*.py") if p.name != "__init__.py")
    line = next(line for line in TREE.splitlines() if line.strip().startswith("module_utils/"))
    assert host_side == sorted(re.findall(r"\b(\w+\.py)\b", line))
