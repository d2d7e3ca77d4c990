"""Expected outcomes: a suite says what a config must show, the row says what it did.

A config no rule matches must be clean: status ok, no violation, no leaked page.
A rule describes a known bug the suite reproduces on purpose, e.g.::

    [[expect]]
    name = "unaligned extents strand slots"
    when = { policy = "unaligned", page_size = { min = 2 } }
    status = ["violated", "pool_exhausted"]
    metrics = { peak_stranded_slots = { min = 1 } }
    violations = { K1 = { min = 1 } }

What a rule may say is declared in harness/schemas/suite.py (RuleFile).
``when`` and every condition take a value (equal), a list (one of), or a table
``{ min, max, equals }``; a string where a number is expected names another
metric of the same row (``leaked_pages = "predicted_leaked_pages"``: the leak the
DESIGN formula predicts). Violation ids a matching rule does not name must be 0.
Verdicts: ``ok`` (clean, every rule holds), ``as_expected`` (a rule expects a
bug, e.g. status violated, and every matching rule holds),
``unexpected`` (anything else), ``failed`` (the run crashed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.core.errors import HarnessError
from harness.core.options import option_names


PASSING = ("ok", "as_expected")
# What every config must show unless a rule says otherwise (where the engine counts it).
CLEAN = {"leaked_pages": 0, "leaked_swa_pages": 0}


class ExpectError(HarnessError):
    """An [[expect]] rule is malformed."""


@dataclass
class ExpectRule:
    name: str
    when: dict[str, Any]
    status: list[str] | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    violations: dict[str, Any] = field(default_factory=dict)

    def applies(self, config: dict[str, Any]) -> bool:
        return all(_holds(config.get(k), cond, {}) for k, cond in self.when.items())


def parse_rules(raw: Any, where: str) -> list[ExpectRule]:
    """[[expect]] tables (a suite's, or any list of them) checked by the declared model."""
    from harness.schemas import parse  # pydantic: optional, loaded only on this path
    from harness.schemas.suite import SuiteFile  # pydantic: optional, loaded only on this path

    context = {"options": frozenset(option_names()), "metrics": known_metrics()}
    rules = parse(SuiteFile, {"expect": raw}, where, ExpectError, context).expect
    return [rule_of(r, i) for i, r in enumerate(rules)]


def rule_of(r: Any, i: int) -> ExpectRule:
    """A validated rule (harness.schemas.suite.RuleFile) as the judge reads it."""
    from harness.schemas.suite import plain  # pydantic: optional, loaded only on this path

    return ExpectRule(r.name if r.name is not None else f"rule {i + 1}", {k: plain(c) for k, c in r.when.items()},
                      r.status, {k: plain(c) for k, c in r.metrics.items()},
                      {k: plain(c) for k, c in r.violations.items()})


def known_metrics() -> frozenset[str]:
    """The metric names a row can carry: the engine's statistics (asked from its own
    Stats, so a new figure is known at once) and the memory probe's mem_* figures."""
    from mini_engine.stats import Stats  # numpy: optional, loaded only on this path

    names = Stats(page_size=1, max_accept=1).finalize(wall_s=1.0, syncs=0, leaked_pages=0, leaked_swa_pages=0, requests=0,
                             finished=0, violations=0)
    return frozenset(names)


@dataclass
class Expectation:
    rules: list[str]
    status: list[str]
    metrics: dict[str, Any]
    violations: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"rules": self.rules, "status": self.status, "metrics": self.metrics, "violations": self.violations}


LEAK_METRICS = ("leaked_pages", "leaked_swa_pages")


def leak_verdict(row: dict[str, Any]) -> dict[str, Any]:
    """A run that leaked pages is not clean, whatever its audit mode. The leak is
    measured by pool conservation after the drain, not by the per-step checks, so
    with ``audit = "off"`` the engine says "ok" while pages are lost: mark it."""
    metrics = row.get("metrics") or {}
    leaked = {m: metrics[m] for m in LEAK_METRICS if isinstance(metrics.get(m), (int, float)) and metrics[m] > 0}
    if row.get("status") == "ok" and leaked:
        row["status"] = "violated"
        what = ", ".join(f"{v:g} {m.replace('_', ' ')}" for m, v in leaked.items())
        row["error"] = row.get("error") or f"{what} after the run drained (pool conservation)"
    return row


def expectation(config: dict[str, Any], rules: list[ExpectRule]) -> Expectation:
    exp = Expectation(rules=[], status=["ok"], metrics=dict(CLEAN), violations={})
    for rule in rules:
        if not rule.applies(config):
            continue
        exp.rules.append(rule.name)
        if rule.status is not None:
            exp.status = list(rule.status)
        exp.metrics.update(rule.metrics)
        exp.violations.update(rule.violations)
    return exp


def judge(row: dict[str, Any], exp: Expectation) -> tuple[str, list[str]]:
    """(verdict, reasons): each reason names what was measured and what was expected."""
    if row.get("status") == "failed":
        return "failed", [f"run failed: {row.get('error') or 'no error text'}"]
    metrics = dict(row.get("metrics") or {})
    counts = {k: v for k, v in (row.get("violations") or {}).items() if isinstance(v, (int, float))}
    reasons, unjudged = [], []
    engine = row.get("engine", "mini")
    if row.get("status") not in exp.status:
        reasons.append(f"status {row.get('status')!r}, expected {' or '.join(exp.status)}")
    for name, cond in exp.metrics.items():
        if name not in metrics:
            if name in CLEAN and cond == CLEAN[name]:
                continue  # the clean default only applies where the engine counts it
            if engine != "mini":  # the reference measures fewer figures (docs/reference.md): said, not failed
                unjudged.append(f"not judged: metric {name} (engine {engine} does not measure it)")
                continue
            reasons.append(f"metric {name} missing from the row")
            continue
        if not _holds_safely(metrics[name], cond, metrics):
            reasons.append(f"{name}={metrics[name]}, expected {_describe(cond, metrics)}")
    for vid in sorted(set(counts) | set(exp.violations)):
        cond = exp.violations.get(vid, 0)
        have = counts.get(vid, 0)
        if not _holds_safely(have, cond, metrics):
            reasons.append(f"{vid} violations={have}, expected {_describe(cond, metrics)}")
    if reasons:
        return "unexpected", reasons
    # "as expected" is for a config that reproduces a known bug on purpose (a rule
    # expects a status other than ok); rules that only pin a clean config keep it "ok".
    return ("as_expected" if exp.status != ["ok"] else "ok"), unjudged


def _value(ref: Any, metrics: dict[str, Any]) -> Any:
    # A string where a number belongs names another metric of the row.
    if isinstance(ref, str) and ref in metrics:
        return metrics[ref]
    return ref


def _holds_safely(have: Any, cond: Any, metrics: dict[str, Any]) -> bool:
    # A bound the loader could not see through (a reference to a metric this row lacks):
    # the rule does not hold, said as a reason, rather than a crash that loses the row.
    try:
        return _holds(have, cond, metrics)
    except TypeError:
        return False


def _holds(have: Any, cond: Any, metrics: dict[str, Any]) -> bool:
    if isinstance(cond, dict):
        if "equals" in cond and have != _value(cond["equals"], metrics):
            return False
        if have is None or isinstance(have, str):
            return not ({"min", "max"} & set(cond))
        if "min" in cond and have < _value(cond["min"], metrics):
            return False
        if "max" in cond and have > _value(cond["max"], metrics):
            return False
        return True
    if isinstance(cond, list):
        return have in cond
    if cond == "none":
        return have is None
    return have == _value(cond, metrics)


def _describe(cond: Any, metrics: dict[str, Any]) -> str:
    def ref(v: Any) -> str:
        return f"{v}={metrics[v]}" if isinstance(v, str) and v in metrics else repr(v)

    if isinstance(cond, dict):
        parts = []
        if "equals" in cond:
            parts.append(f"== {ref(cond['equals'])}")
        if "min" in cond:
            parts.append(f">= {ref(cond['min'])}")
        if "max" in cond:
            parts.append(f"<= {ref(cond['max'])}")
        return " and ".join(parts)
    if isinstance(cond, list):
        return f"one of {cond}"
    return f"== {ref(cond)}"
