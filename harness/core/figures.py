"""What a result row's figures may be: the one check of them, where rows are read.

A gate judges figures; damaged ones must not reach it. A row whose metrics are ``{}``
(and that did not fail) reads as "every figure vanished", which compare once called
"only improvements: bless it" and ``baseline`` blessed, after which every run passed
against it. A negative or boolean count compares as a move, or as 0; an unknown status
is blessed as a reference. So a row is refused where a gate reads it (results.run_rows and
check_figures: compare, baseline, the sweep's verdict; the bot's artifact) if:

- its status is not one a run writes (``STATUSES``);
- it did not fail yet holds no figure at all;
- a counter (an exact-gated metric, a violation count) is not a number >= 0;
- any other metric is not a number (bool, null, text; non-finite numbers and ints past
  int64 are refused earlier for every number of a file, harness/core/numbers.py).

A figure the schema does not declare is left to the readers that use it (compare names
it as undeclared): an old night may carry one since renamed.
"""

from __future__ import annotations

from typing import Any

from harness.core.metrics import METRICS, STATUSES
from harness.core.numbers import counter_problem, is_number


def figure_problem(row: dict[str, Any]) -> str | None:
    """Why ``row``'s figures cannot be judged, in a few words naming the field; None when they can."""
    status = row.get("status")
    if status not in STATUSES:
        return f"has status {_short(status)}, not one of {', '.join(STATUSES)}"
    metrics, violations = row.get("metrics") or {}, row.get("violations") or {}
    if not isinstance(metrics, dict) or not isinstance(violations, dict):
        return "has metrics or violations that are not objects"
    if status != "failed" and not metrics:
        return f"ran ({status}) but holds no figure (its metrics are empty)"
    for name, value in metrics.items():
        declared = METRICS.get(name)
        if declared is not None and declared.gate == "exact":
            why = counter_problem(value)
        else:
            why = None if is_number(value) else f"is not a number (got {_short(value)})"
        if why:
            return f"metrics.{name} {why}"
    for vid, count in violations.items():
        why = counter_problem(count)
        if why:
            return f"violations.{vid} {why}"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
