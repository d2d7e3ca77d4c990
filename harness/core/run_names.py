"""Short, distinct MLflow run names: the axes a config varies, values first.

A config run's test id spells every axis of its suite in full
(``spec:dflash-bs:16-profile:sglang-0.5.23-ps:16-window:none``); MLflow's runs
table cuts it at about thirty characters, where every DFLASH config reads the same
``spec:dflash-bs:…``. The short name keeps the same axes, distinct as the test ids
are, with the ones that tell configs apart first and the option names dropped where
the value says it: ``dflash ps16 bs16 0.5.23 nowin``. The full test id stays in the
run's tags (``kvbench.test_id``) and its description.
"""

from __future__ import annotations

import re

_PART = re.compile(r"(?:^|-)([A-Za-z_]+):")
_FIRST = ("spec", "ps", "page_size")  # what a reader scans by: the algorithm, then the page size
_PROFILE_PREFIX = "sglang-"


def parts(test_id: str) -> list[tuple[str, str]]:
    """(id, value) pairs of a test id, in its order."""
    marks = list(_PART.finditer(test_id))
    out = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(test_id)
        out.append((m.group(1), test_id[m.end():end]))
    return out


def _word(name: str, value: str) -> str:
    if name == "spec":
        return value
    if name == "profile":  # sglang-0.5.23 -> 0.5.23, sglang-pre-35265 -> pre-35265
        return value[len(_PROFILE_PREFIX):] if value.startswith(_PROFILE_PREFIX) else value
    if name in ("window", "win"):
        return "nowin" if value == "none" else f"w{value}"
    if re.fullmatch(r"[0-9.]+", value):
        return f"{name}{value}"
    return f"{name}={value}"


def short_name(test_id: str) -> str:
    """The run name of a config (its test id when it cannot be parsed)."""
    pairs = parts(test_id)
    if not pairs:
        return test_id
    pairs.sort(key=lambda p: _FIRST.index(p[0]) if p[0] in _FIRST else len(_FIRST))  # stable: the rest in order
    return " ".join(_word(n, v) for n, v in pairs)
