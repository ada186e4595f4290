"""Make `ansible_collections.vllm_fleet.fleet` importable (the `make collections` symlink) for every unit test."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_COLLECTIONS = ROOT / "collections"
if not (_COLLECTIONS / "ansible_collections/vllm_fleet/fleet").exists():
    raise RuntimeError("collections/ansible_collections/vllm_fleet/fleet is missing: run `make collections`")
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))
