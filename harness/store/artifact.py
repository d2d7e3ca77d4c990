"""Read a rerun's results artifact, which the pull request's code wrote.

The bot must survive anything in it: a binary or huge results.jsonl, JSON nested
ten thousand deep, a meta.json that is a list, names holding markdown, mentions or
HTML. Every row is read and checked here; anything off is one ArtifactError, which
the bot shows as "failed: artifact unreadable", never a crash that leaves the reply
"running" for good. Names that reach a reply are plain tokens (no markdown), so the
compare table can print them as they are.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.figures import figure_problem
from harness.store.results import META, RESULTS
from harness.store.run_files import read_run_file

MAX_BYTES = 64 << 20  # a real rerun writes a few MB at most
MAX_ROWS = 20000
NAME_RE = re.compile(r"[A-Za-z0-9_.:=,+/-]{1,400}\Z", re.ASCII)  # keys, test ids (no markdown, no '@')
METRIC_RE = re.compile(r"[A-Za-z0-9_./-]{1,100}\Z", re.ASCII)
WORD_RE = re.compile(r"[a-z_]{1,40}\Z", re.ASCII)  # status, verdict
MAX_INT = 2**63  # no counter of a run comes near; a larger one is damage


class ArtifactError(HarnessError):
    """The results artifact cannot be read or holds something a run never writes."""


def read_text(run_dir: Path, name: str) -> str:
    """The text of one of the artifact's files (at most MAX_BYTES), or a one-line ArtifactError;
    read as any run directory is (harness/store/run_files.py): no link followed, no FIFO or device opened."""
    return read_run_file(run_dir, name, "results artifact", ArtifactError, limit=MAX_BYTES)


def _loads(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise ArtifactError(f"{where} is nested too deeply") from None
    except ValueError:
        raise ArtifactError(f"{where} is not valid JSON") from None


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The checked rows of an artifact's results.jsonl (the latest row of each key)."""
    lines = read_text(Path(run_dir), RESULTS).split("\n")
    if len(lines) > MAX_ROWS + 1:
        raise ArtifactError(f"{RESULTS} has {len(lines)} lines (at most {MAX_ROWS})")
    latest: dict[str, dict[str, Any]] = {}
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row = _loads(line, f"{RESULTS} line {i}")
        check_row(row, f"{RESULTS} line {i}")
        latest.pop(row["key"], None)
        latest[row["key"]] = row
    return list(latest.values())


def check_row(row: Any, where: str) -> None:
    if not isinstance(row, dict):
        raise ArtifactError(f"{where} is not an object")
    for field in ("key", "test_id", "suite"):
        value = row.get(field)
        if value is None and field != "key":
            continue
        if not isinstance(value, str) or not NAME_RE.match(value):
            raise ArtifactError(f"{where}: {field} is not a plain name")
    for field in ("status", "verdict"):
        value = row.get(field)
        if value is not None and not (isinstance(value, str) and WORD_RE.match(value)):
            raise ArtifactError(f"{where}: {field} is not a plain word")
    for field in ("metrics", "violations"):
        table = row.get(field, {})
        if not isinstance(table, dict):
            raise ArtifactError(f"{where}: {field} is not an object")
        for name, value in table.items():
            if not METRIC_RE.match(name):
                raise ArtifactError(f"{where}: a {field} name is not a plain name")
            if value is not None and not _number(value):
                raise ArtifactError(f"{where}: {field} value of {name} is not a finite number")
    why = figure_problem(row)  # the rule every reader of rows applies (harness/core/figures.py)
    if why:
        raise ArtifactError(f"{where}: {why}")
    samples = row.get("samples", {})
    if not isinstance(samples, dict) or not all(
            METRIC_RE.match(k) and isinstance(v, list) and all(_number(x) for x in v) for k, v in samples.items()):
        raise ArtifactError(f"{where}: samples is not a table of number lists")


def _number(value: Any) -> bool:
    # An int is checked by size, never converted: math.isfinite(10**400) raises OverflowError.
    if isinstance(value, int):
        return abs(value) <= MAX_INT
    return isinstance(value, float) and math.isfinite(value)


def huge_figure(row: Any) -> str | None:
    """The name of a metric or violation count of ``row`` that is an integer too large for
    any counter (compare would overflow converting it), else None."""
    for field in ("metrics", "violations"):
        table = row.get(field) if isinstance(row, dict) else None
        for name, value in (table.items() if isinstance(table, dict) else ()):
            if isinstance(value, int) and abs(value) > MAX_INT:
                return str(name)
    return None


def read_meta(run_dir: Path) -> dict[str, Any]:
    """The artifact's meta.json as an object ({} when absent)."""
    meta = read_run_file(run_dir, META, "results artifact", ArtifactError, fmt="json", limit=MAX_BYTES, default={})
    if not isinstance(meta, dict):
        raise ArtifactError(f"{META} is not an object")
    return meta
