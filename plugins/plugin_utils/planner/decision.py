"""The decision log a lane fills in: engine args with their one-line reasons, warnings and env."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Decision:
    """Engine args chosen so far, a reason per arg (insertion order is the output order), warnings, env."""

    engine_args: dict[str, Any] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def set(self, key: str, value: Any, reason: str) -> None:
        """Emit engine arg ``key`` with ``value`` and say why."""
        self.engine_args[key] = value
        self.reasons[key] = reason

    def note(self, key: str, reason: str) -> None:
        """Explain a value left to vLLM (no engine arg emitted)."""
        self.reasons[key] = reason

    def keep_user_args(self, user: dict[str, Any]) -> None:
        """Pass through every user engine arg the lane did not decide (dtype is always the lane's call)."""
        for key, value in user.items():
            if key not in self.engine_args and key != "dtype":
                self.set(key, value, "set by you")
