"""The violation record and the Auditor that counts the violations the checks report.

Two kinds of checks report here: event checks at the writers (K4 at prepare, K5 at
frees, K6 at cursor writes) as they happen, and the state checks over a KVManager
after a step (pool_checks.py, tree_checks.py, run together by check_all.py). This
module is the leaf of the audit: every writer imports it, so it imports no check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mini_engine.errors import InvariantViolation, check_choice
from mini_engine.memory.rules import AUDIT_MODES

MAX_RECORDS = 100


@dataclass
class Violation:
    id: str
    rid: object
    step: int
    values: dict = field(default_factory=dict)

    def __str__(self) -> str:
        vals = ", ".join(f"{k}={v}" for k, v in self.values.items())
        who = "" if self.rid is None else f" request {self.rid}"
        return f"{self.id} violated at step {self.step}{who}: {vals}"


class Auditor:
    def __init__(self, mode: str = "record"):
        self.mode = check_choice("audit mode", mode, AUDIT_MODES)
        self.counts: dict[str, int] = {}
        self.records: list[Violation] = []
        self.total = 0
        self.step = -1  # stamped on event violations that do not know their step

    def report(self, v: Violation) -> None:
        """Count v; in raise mode stop at it."""
        self.record(v)
        if self.mode == "raise":
            raise InvariantViolation(v)

    def record(self, v: Violation) -> None:
        """Count v without raising (the caller raises its own error, e.g. EvictFloorError)."""
        if self.mode == "off":
            return
        if v.step < 0:
            v.step = self.step
        self.counts[v.id] = self.counts.get(v.id, 0) + 1
        self.total += 1
        if len(self.records) < MAX_RECORDS:
            self.records.append(v)


