"""The planner's one error type: input that cannot be planned."""

from __future__ import annotations

from typing import Any


class PlanError(ValueError):
    """Input that cannot be planned. The message is one line and says what to change."""


def as_int(value: Any, name: str) -> int:
    """``value`` as an int (integral floats and numeric strings accepted); PlanError naming ``name`` if not."""
    if isinstance(value, bool):
        raise PlanError(f"{name} must be an integer, not {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PlanError(f"{name} must be an integer, not {value!r}") from None
    if number != int(number):
        raise PlanError(f"{name} must be an integer, not {value!r}")
    return int(number)
