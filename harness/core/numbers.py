"""The one rule for numbers kvbench reads from files (result rows, meta.json, baselines,
suite and config TOML): integers within int64, floats finite.

Python reads any integer and `1e400` (as inf) from JSON, and TOML has `inf` and `nan`.
A number past int64 or a non-finite one is damage or a typo, never a measurement, and
met later it crashes (OverflowError in a float conversion, a NaN that no comparison
can order) or poisons what is written next (a row holding Infinity is no longer JSON).
So it is refused where it is read, in one line naming the file and the field.
"""

from __future__ import annotations

import math
from typing import Any

from harness.core.errors import HarnessError


INT64_MIN, INT64_MAX = -2**63, 2**63 - 1


class NumberError(HarnessError):
    """A number in a file is outside int64 or not finite."""


def bad_number(value: Any) -> str | None:
    """Why ``value`` is not a number kvbench reads, or None if it is one (or not a number)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return None
        return f"must be an integer within int64 (got one of {len(str(abs(value)))} digits)"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number (got {value})"
    return None


def check_numbers(obj: Any, where: str) -> None:
    """Walk a parsed document (without recursion: it may be deep) and refuse the first
    bad number: ``<where>: field a.b[2] must be ...``."""
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(value))
        else:
            why = bad_number(value)
            if why:
                raise NumberError(f"{where}: field {_short(path) or '(the document)'} {why}")


def is_number(value: Any) -> bool:
    """A number a figure may be: int or float, not bool, within the rule."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and bad_number(value) is None


def _short(path: str) -> str:
    return path if len(path) <= 120 else path[:117] + "..."


def counter_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a counter (a count of pages, slots, violations, or a ratio
    of counts such as syncs_per_step): None when it is a number >= 0."""
    if not is_number(value):
        return f"is not a number (got {_kind(value)})"
    if value < 0:
        return f"must be a number >= 0 (got {value!r})"
    return None


def vanished(row: dict[str, Any], name: str) -> str:
    """What became of a figure the reference has and this row does not give as a number."""
    where = row.get("violations") or {} if name.startswith("violations.") else row.get("metrics") or {}
    key = name.removeprefix("violations.")
    if not isinstance(where, dict) or key not in where:
        return "not measured now"
    return f"not a number now ({_kind(where[key])})"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"string {value[:20]!r}"
    return type(value).__name__
