"""Write the tiny model (plugins/module_utils/tiny_model.py) into a directory; idempotent.

Usage: tiny_model.py DIR    — prints one line per file: "written" or "unchanged".
Standard library only (the same pure code the Ansible module vllm_fleet.fleet.tiny_model uses).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load_builder():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("tiny_model", ROOT / "plugins/module_utils/tiny_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_tiny_model


def write_model(directory: Path, contents: dict[str, str]) -> list[str]:
    """Write every file whose content differs; return the names written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in contents.items():
        target = directory / name
        if target.is_file() and target.read_text(encoding="utf-8") == content:
            continue
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
        written.append(name)
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    directory = Path(argv[1])
    contents = _load_builder()()
    written = write_model(directory, contents)
    for name in sorted(contents):
        print(f"testbed: {directory / name}: {'written' if name in written else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
