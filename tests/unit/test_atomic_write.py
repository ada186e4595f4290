"""module_utils/atomic_write.py: the action plugins' file write is whole or nothing."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.atomic_write import write_atomic


def test_writes_the_file_and_its_folder_with_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "report" / "fleet" / "index.html"
    write_atomic(str(target), b"<html>", 0o640)
    assert target.read_bytes() == b"<html>"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    write_atomic(str(target), b"<html>2")
    assert target.read_bytes() == b"<html>2"
    assert sorted(p.name for p in target.parent.iterdir()) == ["index.html"]  # no temporary file left


def test_a_failed_write_keeps_the_old_file_and_leaves_no_partial(tmp_path: Path) -> None:
    target = tmp_path / "plans.json"
    target.write_bytes(b"old")
    with pytest.raises(TypeError):
        write_atomic(str(target), "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["plans.json"]
