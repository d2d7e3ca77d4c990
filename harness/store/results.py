"""The run directory and its results file: one JSON line per finished config.

``results.jsonl`` is the truth of a sweep. Every other view (the progress bar, the
summary table, MLflow, plots, baselines) is derived from it, so it is written first,
one whole line per config. The sweep's controller is its only writer; the append
still takes an exclusive lock, so two processes that share a run (a mistaken second
writer, a test) cannot interleave lines.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.figures import figure_problem
from harness.core.kv_units import fill_units
from harness.core.numbers import check_numbers
from harness.core.safe_write import open_regular, write_text
from harness.store.run_files import META_LIMIT, RESULTS_LIMIT, read_run_file


RESULTS = "results.jsonl"
LOGGED = "mlflow_logged.txt"
META = "meta.json"

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ResultsError(HarnessError):
    """A run directory or results file is missing or unreadable."""


def results_root() -> Path:
    """Where runs and the local MLflow store live: $KVBENCH_RESULTS or ./results."""
    raw = os.environ.get("KVBENCH_RESULTS", "results")
    if not raw.strip():  # set but empty (an unset shell variable): it would put runs/ in the current directory
        raise ResultsError("KVBENCH_RESULTS is set but empty; give a directory, or unset it for ./results")
    try:
        return Path(raw).resolve()
    except (RuntimeError, OSError):  # a symlink loop (RuntimeError before Python 3.13, OSError after)
        raise ResultsError(f"KVBENCH_RESULTS {raw!r} is a loop of symbolic links; give a directory") from None


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise ResultsError(
            f"run id must be 1-128 characters of letters, digits, '.', '_' or '-' (got {run_id!r})"
        )
    return run_id


def new_run_id(suite: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"{re.sub(r'[^A-Za-z0-9._-]', '_', suite)}-{stamp}-{os.getpid() % 10000:04d}"


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def results(self) -> Path:
        return self.path / RESULTS

    @property
    def logged(self) -> Path:
        return self.path / LOGGED

    @property
    def meta_path(self) -> Path:
        return self.path / META

    @property
    def plots(self) -> Path:
        return self.path / "plots"

    def meta(self) -> dict[str, Any]:
        meta = read_run_file(self.path, META, "run meta", ResultsError, fmt="json", limit=META_LIMIT, default={})
        if not isinstance(meta, dict):
            raise ResultsError(f"{self.meta_path} is not a JSON object")
        check_numbers(meta, str(self.meta_path))
        _check_meta_shape(meta, self.meta_path)
        return meta

    def write_meta(self, meta: dict[str, Any]) -> None:
        replace_text(self.meta_path, json.dumps(meta, indent=2, sort_keys=True) + "\n")

    def rows(self) -> list[dict[str, Any]]:
        return read_jsonl(self.results)

    def done_keys(self) -> set[str]:
        return {row["key"] for row in self.rows() if "key" in row}

    def logged_keys(self) -> set[str]:
        text = read_run_file(self.path, LOGGED, "MLflow log of the run", ResultsError, limit=RESULTS_LIMIT,
                             default="")
        return {line.strip() for line in text.splitlines() if line.strip()}

    def mark_logged(self, key: str) -> None:
        append_line(self.logged, key)

    def reset_logged(self) -> None:
        """Forget what was logged: the run now logs to another tracking store."""
        self.logged.unlink(missing_ok=True)


LAST_TIME = 253402300799  # 9999-12-31: a start time past it (or before 1970) is damage, and gmtime fails on it


def _check_meta_shape(meta: dict[str, Any], path: Path) -> None:
    """The fields of meta.json that readers index or format, in the shape they expect."""
    for name in ("hardware",):
        if meta.get(name) is not None and not isinstance(meta[name], dict):
            raise ResultsError(f"{path}: field {name} must be an object (got {type(meta[name]).__name__})")
    created = meta.get("created")
    if created is not None and (isinstance(created, bool) or not isinstance(created, (int, float))
                                or not 0 <= created <= LAST_TIME):
        raise ResultsError(f"{path}: field created must be a start time in seconds since 1970, from 0 to "
                           f"{LAST_TIME} (got {created!r})")


def replace_text(path: Path, text: str) -> None:
    """Write ``path`` atomically: a reader (or a SIGKILL) never sees half a file, and
    only a regular file or a new path is replaced (safe_write)."""

    write_text(path, text, path.name)


def open_run_dir(run: str | os.PathLike[str], *, root: Path | None = None) -> RunDir:
    """A run given by id (under results/runs/) or by path; it must exist."""
    p = Path(run)
    if not p.is_dir():
        q = (root or results_root()) / "runs" / str(run)
        if not q.is_dir():
            raise ResultsError(f"no run {str(run)!r}: not a directory and not in {q.parent}")
        _not_a_link(q)
        p = q
    return RunDir(p.resolve())


def run_rows(run: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """load_rows for a command that judges a run: a run without a row is an error, or
    compare would pass (and baseline would bless) a sweep that measured nothing; so is a
    row whose figures are damaged (check_figures)."""
    rows = load_rows(run)
    if not rows:
        raise ResultsError(f"run {str(run)!r} has no results (its results.jsonl is missing or empty)")
    check_figures(rows, f"run {str(run)!r}")
    return rows


def check_figures(rows: list[dict[str, Any]], where: str) -> None:
    """Refuse rows a gate cannot judge (harness/core/figures.py): compare, baseline and the
    sweep's verdict read their runs through here, so damaged figures are never judged or
    blessed. The views (history, triage) show rows as they are."""
    for row in rows:
        why = figure_problem(row)
        if why:
            raise ResultsError(f"{where}: config {row['key']!r} {why}; a gate cannot judge it")


def run_dir_of(run: str | os.PathLike[str]) -> RunDir:
    """The run directory of a run id, a run directory or its results.jsonl."""
    p = Path(run)
    return RunDir(p.resolve().parent) if p.is_file() else open_run_dir(run)


def create_run_dir(run_id: str, *, root: Path | None = None) -> RunDir:
    check_run_id(run_id)
    p = (root or results_root()) / "runs" / run_id
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.mkdir()  # not exist_ok: of two sweeps naming one run, exactly one creates it
    except FileExistsError:
        raise ResultsError(f"run {run_id!r} already exists at {p}; pass --resume {run_id} to finish it") from None
    except OSError as err:
        raise ResultsError(f"cannot create the run directory {p}: {err.strerror}") from None
    return RunDir(p.resolve())


def resume_run_dir(run: str, *, root: Path | None = None) -> RunDir:
    """The run --resume names: a run id, or a path to a run directory inside the
    results root. Nothing else: a resume writes into the directory it is given."""
    runs = ((root or results_root()) / "runs").resolve()
    p = Path(run)
    if _RUN_ID.match(run) and (runs / run).is_dir():
        p = _not_a_link(runs / run)
    elif p.is_dir() and p.resolve().parent == runs:
        p = p.resolve()
    else:
        raise ResultsError(f"--resume takes the id of a run in {runs} (or that run's directory); got {run!r}")
    if not (p / META).is_file():
        raise ResultsError(f"--resume: {p} is not a kvbench run (it has no {META})")
    return RunDir(p)


def _not_a_link(p: Path) -> Path:
    # A run id names a directory of the root; a link there would take the run's writes
    # (meta.json, results, plots, the lock) to wherever it points.
    if p.is_symlink():
        raise ResultsError(f"run {p.name!r} in {p.parent} is a symbolic link; a run id must name a directory "
                           f"of the results root (give the run's real path instead)")
    return p


STORE_METACHARACTERS = "?#%"


def check_store_root(root: Path) -> None:
    """The local MLflow store is a sqlite URI of a path under the root; '?', '#' and '%'
    in that path are read as URI syntax and move the database (or stall it)."""
    bad = sorted({c for c in str(root) if c in STORE_METACHARACTERS})
    if bad:
        raise ResultsError(f"the results root {str(root)!r} contains {' '.join(bad)}, which the MLflow sqlite URI "
                           f"would misread; use a path without ?, # or % ($KVBENCH_RESULTS), or --no-mlflow")


def append_line(path: Path, line: str) -> None:
    """Append one line atomically with respect to other appenders (flock + one write)."""
    data = (line.rstrip("\n") + "\n").encode()

    fd = open_regular(path, path.name, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            _drop_torn_tail(fd)
            start = os.fstat(fd).st_size
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(fd, view):]
            except OSError:
                # A full disk or quota mid-line: take the part back, so the file holds
                # whole rows only and the config stays undone (resume reruns it).
                try:
                    os.ftruncate(fd, start)
                except OSError:
                    pass  # the next append cuts the torn tail (_drop_torn_tail)
                raise
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _drop_torn_tail(fd: int) -> None:
    """Cut a last line a killed writer left without its newline. Appended to, it would
    fuse with the next row into one bad line in the middle of the file: the resumed
    config's row lost and the file unreadable. Cut, its config is simply not done."""
    end = os.fstat(fd).st_size
    if end == 0 or os.pread(fd, 1, end - 1) == b"\n":
        return
    pos = end
    while pos > 0:
        start = max(0, pos - 65536)
        newline = os.pread(fd, pos - start, start).rfind(b"\n")
        if newline >= 0:
            os.ftruncate(fd, start + newline + 1)
            return
        pos = start
    os.ftruncate(fd, 0)


def row_json(row: dict[str, Any]) -> str:
    """A row as the one JSON line results.jsonl holds (and a test report carries)."""
    return json.dumps(row, sort_keys=True, default=_jsonable)


def append_row(path: Path, row: dict[str, Any]) -> None:
    append_line(path, row_json(row))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file. A torn last line (the writer was killed mid-write) is
    ignored; a bad line anywhere else means the file is damaged, which is an error. The file is
    read as a run directory's (harness/store/run_files.py): never through a link, never a FIFO."""
    path = Path(path)
    text = read_run_file(path.parent, path.name, "results file", ResultsError, limit=RESULTS_LIMIT, default=None)
    if text is None:
        return []
    lines = text.split("\n")
    rows: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line, parse_constant=_no_constant)
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
            if i == len(lines) - 1:  # no newline after it: the write never finished
                continue
            raise ResultsError(f"{path}: line {i + 1} is not valid JSON (or nested too deeply, "
                               f"or holds NaN or Infinity)") from None
        if isinstance(obj, dict):
            check_numbers(obj, f"{path}: line {i + 1}")  # int64 and finite, named, before any reader
            rows.append(obj)
    return rows


def _no_constant(name: str) -> Any:
    # json reads NaN and Infinity, which no row holds: a non-finite figure is damage.
    raise ValueError(f"{name} is not a number a result holds")


def load_rows(path_or_run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The result rows of a run: a results.jsonl file, a run directory or a run id.

    A config that appears twice (a rerun of one test id into the same run) counts
    once, with its latest row."""
    p = Path(path_or_run_dir)
    if p.is_file():
        rows = read_jsonl(p)
    else:
        rows = open_run_dir(p).rows()
    # older nights get their token figures too
    return [fill_units(row) for row in latest_rows(rows, p)]


def latest_rows(rows: list[dict[str, Any]], p: Path) -> list[dict[str, Any]]:
    """The latest row of each key, in first-seen order, each checked for the fields readers index."""
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        if not isinstance(row.get("key"), str):
            raise ResultsError(f"{p}: every row needs a string 'key' (got {type(row.get('key')).__name__})")
        for field in ("metrics", "violations", "config", "samples"):
            if not isinstance(row.get(field, {}), dict):
                raise ResultsError(f"{p}: row {row['key']!r} has a '{field}' that is not an object")
        latest.pop(row["key"], None)  # keep first-seen order of the latest rows
        latest[row["key"]] = row
    return list(latest.values())


def _jsonable(value: Any) -> Any:
    # numpy scalars and arrays, paths: whatever a row may carry that json cannot.
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")

