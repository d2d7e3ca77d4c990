"""Baselines: per hardware profile, what each config measured when it was last blessed.

    {"profile", "created", "git_commit", "configs": {key: {"counters": {...},
     "timings": {metric: {"median", "spread", "samples" (when repeated)}}, "status", "test_id", "suite"}}}

Figures gated exactly (counters: a change is a regression) and those gated on
noise (timings, memory: kept with their samples so compare can run a noise test)
are told apart by the metric's declared gate (harness/core/metrics.py). Baselines are written from real runs
only (`kvbench baseline RUN`), never by hand; the format is declared in
harness/schemas/baseline.py and checked on every load.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.metrics import lookup
from harness.core.numbers import NumberError, check_numbers, counter_problem
from harness.core.safe_write import write_text
from harness.schemas import parse
from harness.schemas.baseline import BaselineFile
from mini_engine.files import parse_document, read_document


class BaselineError(HarnessError):
    """A baseline file is missing, malformed, or of another hardware profile."""


def default_path(profile: str, root: Path) -> Path:
    return root / "baselines" / f"{profile}.json"


def counters_of(row: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in (row.get("metrics") or {}).items():
        if lookup(name).gate == "exact" and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    for vid, count in (row.get("violations") or {}).items():
        if isinstance(count, (int, float)) and not isinstance(count, bool):
            out[f"violations.{vid}"] = count
    return out


def timings_of(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    samples = row.get("samples") or {}
    for name, value in (row.get("metrics") or {}).items():
        if lookup(name).gate != "noise" or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        s = [float(x) for x in samples.get(name, [value])]
        out[name] = {"median": float(value), "spread": (max(s) - min(s)) if s else 0.0}
        if len(s) > 1:  # one sample is the median itself
            out[name]["samples"] = s
    return out


def entry(row: dict[str, Any]) -> dict[str, Any]:
    return {"counters": counters_of(row), "timings": timings_of(row), "status": row.get("status"),
            "test_id": row.get("test_id"), "suite": row.get("suite")}


def build(rows: list[dict[str, Any]], profile: str, git_commit: str,
          existing: dict[str, Any] | None = None) -> tuple[dict[str, Any], int, int, list[str]]:
    """(baseline, added, updated, skipped keys). A crashed config is not blessed; a row
    judged unexpected or holding a non-finite number refuses the whole baseline: blessing
    it would make a bug (or a broken measurement) the reference every later run passes."""
    check_blessable(rows)
    base = existing or {"profile": profile, "configs": {}}
    configs = dict(base.get("configs") or {})
    added = updated = 0
    skipped = []
    for row in rows:
        if row.get("status") == "failed":
            skipped.append(row["key"])
            continue
        if row["key"] in configs:
            updated += 1
        else:
            added += 1
        configs[row["key"]] = entry(row)
    if not configs:  # nothing blessed: a baseline without configs would pass any run
        raise BaselineError(f"no config of the run can be blessed ({len(skipped)} failed, none ran); "
                            f"a baseline holds at least one config that ran")
    out = {"profile": profile, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "git_commit": git_commit, "configs": dict(sorted(configs.items()))}
    return out, added, updated, skipped


def check_blessable(rows: list[dict[str, Any]]) -> None:
    unexpected = [r["key"] for r in rows if r.get("verdict") not in (None, "ok", "as_expected", "failed")]
    if unexpected:
        raise BaselineError(f"{len(unexpected)} config(s) of the run were judged {_verdicts(rows, unexpected)} "
                            f"(first: {unexpected[0]!r}); a baseline blesses only ok and as_expected rows")
    for row in rows:
        if row.get("status") == "failed":
            continue
        bad = non_finite(entry(row))
        if bad:
            raise BaselineError(f"config {row['key']!r} has a non-finite {bad}; a baseline holds finite numbers only")
        bad = bad_counter(row)
        if bad:
            raise BaselineError(f"config {row['key']!r}: {bad}; a baseline blesses counts only")


def bad_counter(row: dict[str, Any]) -> str | None:
    """The first counter (an exact-gated metric, a violation count) of a row that is not a
    count: counters_of would drop a string silently and bless a negative one."""

    figures = [(f"metrics.{name}", v) for name, v in (row.get("metrics") or {}).items() if lookup(name).gate == "exact"]
    figures += [(f"violations.{vid}", v) for vid, v in (row.get("violations") or {}).items()]
    for name, value in figures:
        why = counter_problem(value)
        if why:
            return f"{name} {why}"
    return None


def _verdicts(rows: list[dict[str, Any]], keys: list[str]) -> str:
    found = sorted({str(r.get("verdict")) for r in rows if r["key"] in set(keys)})
    return " or ".join(repr(v) for v in found)


def non_finite(config: dict[str, Any]) -> str | None:
    """The first counter or timing of a baseline entry that is NaN, infinite or not a number."""
    for name, value in (config.get("counters") or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"counter {name} ({value!r})"
    for name, t in (config.get("timings") or {}).items():
        values = [t.get("median"), t.get("spread"), *(t.get("samples") or [])] if isinstance(t, dict) else [t]
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in values):
            return f"timing {name}"
    return None


def load_baseline(path: str | os.PathLike[str], expected_profile: str | None = None) -> dict[str, Any]:
    p = Path(path)
    text = read_document(p, "baseline", BaselineError, missing="create it with kvbench baseline RUN")
    data = parse_document(text, p, "baseline", BaselineError, fmt="json")
    twice = _key_twice(text)
    if twice is not None:
        raise BaselineError(f"baseline {str(p)!r}: key {twice!r} is given twice in one object, and JSON keeps only "
                            f"the last; write the baseline with kvbench baseline RUN, not by hand or by a merge")

    try:
        check_numbers(data, f"baseline {str(p)!r}")
    except NumberError as err:
        raise BaselineError(str(err)) from None
    parse(BaselineFile, data, f"baseline {str(p)!r}", BaselineError, tables="object")
    if expected_profile is not None and data["profile"] != expected_profile:
        raise BaselineError(
            f"baseline {str(p)!r} is for profile {data['profile']!r}, but the run is on {expected_profile!r}; "
            f"pass --baseline with a {expected_profile} baseline")
    return data


class _Twice(Exception):
    def __init__(self, key: str):
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Twice(key)
        out[key] = value
    return out


def _key_twice(text: str) -> str | None:
    """A key some object of the (valid) JSON ``text`` gives twice: json.loads keeps the last
    silently, so one config's entry would hide another's (a bad merge of two baselines)."""
    try:
        json.loads(text, object_pairs_hook=_unique)
    except _Twice as twice:
        return twice.key
    return None


def write_baseline(path: Path, baseline: dict[str, Any]) -> None:
    write_text(path, _dumps(baseline), "baseline", mkdir=True)  # the old baseline stays whole until the new one is


def _dumps(baseline: dict[str, Any]) -> str:
    """JSON with one config per line: a change to one config is a one-line diff."""
    head = {k: v for k, v in baseline.items() if k != "configs"}
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}," for k, v in sorted(head.items())]
    configs = sorted((baseline.get("configs") or {}).items())
    lines.append(' "configs": {')
    lines += [f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}{',' if i < len(configs) - 1 else ''}"
              for i, (k, v) in enumerate(configs)]
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"
