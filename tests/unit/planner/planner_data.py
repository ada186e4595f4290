"""Model configs and recorded GPU facts for the planner tests (from tests/fixtures)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
MODELS = FIXTURES / "planner" / "models"
GPU = FIXTURES / "gpu"


def model(name: str) -> dict[str, Any]:
    return json.loads((MODELS / name / "config.json").read_text())


def facts(name: str) -> dict[str, Any]:
    return json.loads((GPU / name / "expected_facts.json").read_text())
