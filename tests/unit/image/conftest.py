"""Make `ansible_collections.vllm_fleet.fleet` importable (the `make collections` symlink)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_COLLECTIONS = ROOT / "collections"
if not (_COLLECTIONS / "ansible_collections/vllm_fleet/fleet").exists():
    raise RuntimeError("collections/ansible_collections/vllm_fleet/fleet is missing: run `make collections`")
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))

# The render helper next to this file (_image_render.py) is imported by name.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
