# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""How preflight's messages name a value, shared by every check module: its type word (``string``, ``dict``,
``null``), the hint for a quoted number, the nearest known name, and the type tests behind them.

Pure (stdlib only, typed, no I/O).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "dict"
    if isinstance(value, (list, tuple)):
        return "list"
    if value is None:
        return "null"
    return type(value).__name__


def is_name_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def string_hint(value: Any) -> str:
    if isinstance(value, str):
        return " (a quoted string; on the command line pass JSON: -e '{\"key\": 0.9}')"
    return ""


def did_you_mean(name: str, names: Iterable[str], show: Callable[[str], str] = str) -> str:
    close = difflib.get_close_matches(name, sorted(names), n=1)
    return f" (did you mean {show(close[0])}?)" if close else ""
