"""One line per metric and direction instead of one row per config.

One rule change moves the same figure in dozens of configs: 131 flat rows hide
that it is one move. The roll-up groups the moved figures by metric and verdict
and names what the moved configs have in common, against every config the
comparison knows (the run's and the reference's of the same suite, so a run
filtered to DFLASH still says ``spec=dflash``):

    peak_reserved_slots regressed +50.0% in 27 configs: spec=dflash, block_size=16

An axis is an option whose value differs between those configs (read from the
result keys, harness/core/options.py). Where every moved config shares one value it
is named (``spec=dflash``); an axis the group spans whole says nothing and is left
out (it was 14 clauses of ``all X`` burying the one that mattered); a partial span
lists its values. An algorithm's own option that is unset (``topk=none`` for
DFLASH) is not named either.
"""

from __future__ import annotations

from typing import Any, Iterable

from harness.core.direction import WORDS
from harness.core.markdown import code, prose
from harness.core.options import options_of_key
from mini_engine.algos import ALGORITHMS

ORDER = ("regression", "changed", "improvement")
MAX_VALUES = 4  # values of an axis listed before "n values"
DRAFT_OPTIONS = {o.name for a in ALGORITHMS.values() for o in a.options}  # unset for the other algorithms


def rollup_lines(findings: Iterable[Any], configs: dict[str, dict], fmt: str = "text") -> list[str]:
    """Roll-up lines of the moved figures (regressed, changed, improved), worst first.
    A finding needs ``key``, ``metric``, ``verdict`` and ``baseline`` / ``now`` (a history
    Move's ``before`` / ``after``)."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for f in findings:
        if f.verdict in ORDER:
            groups.setdefault((f.metric, f.verdict), []).append(f)
    if not groups:
        return []
    known = {k: options_of_key(k) for k in {*configs, *(f.key for f in findings if f.verdict in ORDER)}}
    axes = _axes(known.values())
    ordered = sorted(groups.items(), key=lambda kv: (ORDER.index(kv[0][1]), -len(kv[1]), kv[0][0]))
    lines = []
    for (metric, verdict), group in ordered:
        keys = list(dict.fromkeys(f.key for f in group))
        where = _where([known[k] for k in keys], axes)
        change = _change(group)
        text = (f"{metric} {WORDS[verdict]}{' ' + change if change else ''} in {len(keys)} "
                f"config{'s' if len(keys) != 1 else ''}{': ' + where if where else ''}")
        # Metric names and axis values come from the rows: untrusted in GitHub Markdown.
        lines.append(f"- {code(metric)} {prose(text[len(metric) + 1:])}" if fmt == "markdown" else f"  {text}")
    head = "By metric (moved figures rolled up over the configs):"
    return [f"**{head}**" if fmt == "markdown" else head, *lines]


def _axes(configs: Iterable[dict[str, str]]) -> dict[str, list[str]]:
    """Options whose value differs between configs, with their values in first-seen order."""
    seen: dict[str, dict[str, None]] = {}
    for cfg in configs:
        for name, value in cfg.items():
            seen.setdefault(name, {})[value] = None
    return {name: list(vals) for name, vals in seen.items() if len(vals) > 1}


def _where(configs: list[dict[str, str]], axes: dict[str, list[str]]) -> str:
    """What the moved configs share, then the axes they span in part; "every config" when
    they share nothing and span every axis whole."""
    if not configs:
        return ""
    fixed, spans = [], []
    for name, values in axes.items():
        mine = list(dict.fromkeys(c[name] for c in configs))
        if len(mine) == 1:
            if not (name in DRAFT_OPTIONS and mine[0] == "none"):
                fixed.append(f"{name}={mine[0]}")
        elif len(mine) == len(values):
            continue
        elif len(mine) <= MAX_VALUES:
            spans.append(f"{name} {'/'.join(mine)}")
        else:
            spans.append(f"{len(mine)} of {len(values)} {name}")
    return "; ".join(p for p in (", ".join(fixed), ", ".join(spans)) if p) or "every config"


def _nums(f: Any) -> tuple[Any, Any]:
    """(before, now) of a compare Finding or a history Move."""
    if hasattr(f, "baseline"):
        return f.baseline, f.now
    return f.before, f.after


def _change(group: list[Any]) -> str:
    """The relative change when every config moved alike, else its range; deltas from 0."""
    pairs = [_nums(f) for f in group]
    pairs = [(b, n) for b, n in pairs if isinstance(b, (int, float)) and isinstance(n, (int, float))]
    if not pairs:
        return ""
    if all(b for b, _ in pairs):
        rel = sorted({round(100 * (n - b) / abs(b), 1) for b, n in pairs})
        return f"{rel[0]:+.1f}%" if len(rel) == 1 else f"{rel[0]:+.1f}%..{rel[-1]:+.1f}%"
    deltas = sorted({n - b for b, n in pairs})
    return f"{deltas[0]:+g}" if len(deltas) == 1 else f"{deltas[0]:+g}..{deltas[-1]:+g}"
