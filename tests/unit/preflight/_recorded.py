"""Recorded facts and the example model the preflight unit tests share (two 8x H100 hosts, llama-3.1-8b)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FACTS = ROOT / "tests" / "fixtures" / "preflight" / "recorded_facts"
H100 = json.loads((FACTS / "h100-a.json").read_text())
H100_B = json.loads((FACTS / "h100-b.json").read_text())
MODEL_8B = str(ROOT / "inventories" / "example" / "models" / "llama-3.1-8b")
