"""Which way a figure moved: improved, regressed, or just changed.

Counters are compared exactly (any change is reported and judged), but a change is
not always bad: 12 -> 11 leaked pages is an improvement. Each metric declares which
way is better (harness/core/metrics.py ``better``); a figure without a direction (the
workload's own counts, the formula's prediction) that moves is "changed": the work
differs, nobody can say whether for the better. A run's status moves by its rank:
back to ok is an improvement, away from it a regression.
"""

from __future__ import annotations

from harness.core.metrics import lookup

# The label tells the truth; the gate stays exact. Compare fails on a regression, a
# directionless change and on an improved counter too: the baseline no longer holds and
# is blessed again on purpose. A timing that improved passes (its gate is the noise test).
GATING = ("regression", "changed")


def gates(verdict: str, metric: str) -> bool:
    if verdict in GATING:
        return True
    return verdict == "improvement" and (metric == "status" or lookup(metric).gate == "exact")
# Worse to the right: a config that stops running is worse than one that violates.
STATUS_RANK = {"ok": 0, "violated": 1, "pool_exhausted": 1, "failed": 2}


def counter_verdict(metric: str, before: float, now: float) -> str:
    """ok, improvement, regression or changed for an exactly compared figure."""
    if before == now:
        return "ok"
    better = lookup(metric).better
    if better == "none":
        return "changed"
    up = now > before
    return "improvement" if up == (better == "higher") else "regression"


def status_verdict(before: str, now: str) -> str:
    """A run's status moving: by rank, "changed" between two of the same rank."""
    b, n = STATUS_RANK.get(before, 2), STATUS_RANK.get(now, 2)
    if b == n:
        return "changed" if before != now else "ok"
    return "regression" if n > b else "improvement"


WORDS = {"regression": "regressed", "improvement": "improved", "changed": "changed"}
