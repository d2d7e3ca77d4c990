"""`kvbench sweep`: validate a suite, set the run up once, drive pytest, show progress.

The sweep itself is the grid pytest module (suites/grid): one test per config.
This module only prepares what must exist before workers start (run directory,
meta.json, the MLflow store and the parent run), starts pytest (with xdist
workers, pinned one per GPU on a multi-GPU machine), follows results.jsonl for
the progress bar, and afterwards fills the gaps: rows for configs whose worker
died, MLflow uploads that failed, plots, the summary.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import devices, hardware
from harness.bounds import check_jobs
from harness.causes import one_line
from harness.expect import PASSING
from harness.grid_filter import compile_filter
from harness.locks import hold_run, store_lock
from harness.mlflow_log import (client, ensure_experiment, ensure_parent, experiment_name,
                                finish_parent, git_commit, start_system_metrics, sync, tracking_uri)
from harness.results import (RunDir, append_row, check_store_root, create_run_dir, new_run_id, results_root,
                             resume_run_dir, tail)
from harness.suites import SUITES_DIR, Suite, SuiteError, load_suite
from mini_engine.errors import KVBenchError

GRID_TEST = SUITES_DIR / "grid" / "test_grid.py"
PROJECT = SUITES_DIR.parent
# pytest's exit status when the grid stopped because a result could not be written
# (set by the grid conftest): an error of the sweep, its unwritten configs stay undone.
WRITE_FAILED = 75


class SweepError(KVBenchError):
    """Bad sweep options (filter, jobs, resume target)."""


@dataclass
class SweepOptions:
    suite: str
    jobs: int | None = None
    resume: str | None = None
    filter: str | None = None
    mlflow_uri: str | None = None
    no_mlflow: bool = False
    run_id: str | None = None
    quiet: bool = False
    oversubscribe: bool = False


def filter_selects(expr: str):
    """The --filter expression (harness.grid_filter): test id [, config] -> selected."""
    return compile_filter(expr)


def check_filter(expr: str | None, suite: Suite | None = None) -> int | None:
    """Parse the -k expression as pytest will, and refuse one that selects nothing;
    how many configs of the suite it selects."""
    if expr is None:
        return None
    selects = filter_selects(expr)
    if suite is None:
        return None
    selected = sum(selects(gc.id, gc.config) for gc in suite.configs)
    if not selected:
        raise SweepError(f"--filter {expr!r} selects no config of suite {suite.name} (ids look like {suite.configs[0].id!r})")
    return selected


def prepare_run(suite: Suite, run_dir: RunDir, mlflow_uri: str | None, *, jobs: int, filter_expr: str | None,
                no_mlflow: bool = False, root: Path | None = None, hw: hardware.Hardware | None = None,
                warn=print) -> dict[str, Any]:
    """meta.json and, unless disabled, the MLflow store + parent run: once, before any worker."""
    root = root or results_root()
    if not no_mlflow and not (mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI")):
        check_store_root(root)
    meta = run_dir.meta()
    hw = hw or hardware.detect()
    meta.update(
        suite=suite.name, suite_path=str(suite.path), suite_hash=suite.digest, configs=len(suite.configs),
        repeat=suite.repeat, jobs=jobs, filter=filter_expr, hardware=meta.get("hardware") or hw.to_dict(),
        git_commit=meta.get("git_commit") or git_commit(PROJECT), created=meta.get("created") or time.time(),
    )
    meta.setdefault("mlflow_parent", None)
    if no_mlflow:
        meta["mlflow_uri"] = None
    else:
        uri = tracking_uri(mlflow_uri, root)
        if meta.get("mlflow_uri") and meta["mlflow_uri"] != uri:
            run_dir.reset_logged()  # a resume against another store: it has none of the rows
            meta["mlflow_parent"] = None
        meta["mlflow_uri"] = uri
        lock = store_lock(uri, note=warn)  # a fresh store is created and migrated by one sweep at a time
        try:
            cl = client(uri)
            exp = ensure_experiment(cl, experiment_name(suite.name), uri, root)
            meta["mlflow_parent"] = ensure_parent(cl, exp, run_dir.run_id, meta)
            meta["mlflow_experiment"] = exp
        except Exception as err:
            meta["mlflow_parent"] = None
            warn(f"kvbench: warning: {one_line(err)}; "
                 f"results stay in {run_dir.path}, upload them later with kvbench sync {run_dir.run_id}")
        finally:
            if lock is not None:
                lock.release()
    run_dir.write_meta(meta)
    return meta


def pytest_command(suite: Suite, run_dir: RunDir, jobs: int, filter_expr: str | None, pins: tuple[str, ...]) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", str(GRID_TEST), "-p", "no:cacheprovider", "-q", "-rfE",
           "--rootdir", str(PROJECT), "--kvbench-suite", str(suite.path), "--kvbench-run-dir", str(run_dir.path),
           "-m", ""]  # the suite's own marks decide; the default addopts deselect gpu/nightly
    if pins:
        # One worker per GPU, pinned before the worker process starts (CUDA reads it once).
        for pin in pins:
            cmd += ["--tx", f"popen//env:CUDA_VISIBLE_DEVICES={pin}"]
        cmd += ["--dist", "load"]
    elif jobs > 1:
        cmd += ["-n", str(jobs)]
    if filter_expr:  # applied by the grid conftest (exact name:value words), not as -k
        cmd += [f"--kvbench-filter={filter_expr}"]  # one argument: a leading '-' is not an option
    return cmd


def _copy_log(pipe, log) -> None:
    """pytest's output into pytest.log, best effort: through a pipe, pytest never sees a
    full disk on its stdout (it would stop with an internal error instead of telling
    the sweep that a result could not be written)."""
    writable = True
    for chunk in iter(lambda: pipe.read1(65536), b""):
        if writable:
            try:
                log.write(chunk)
                log.flush()
            except OSError:
                writable = False  # keep draining the pipe, or pytest would block on it


def _die_with_parent() -> None:
    # A SIGKILLed sweep must not leave pytest writing results behind it.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def run_sweep(opts: SweepOptions, *, root: Path | None = None) -> int:
    from rich.console import Console

    console = Console(highlight=False, quiet=opts.quiet)
    if not console.is_terminal:
        console = Console(highlight=False, quiet=opts.quiet, width=200)  # a log file: keep ids on one line
    err_console = Console(stderr=True, highlight=False)
    root = root or results_root()
    # Everything that can be wrong with the input is checked before any work.
    if not GRID_TEST.is_file():  # the grid module ships with the package: an install without it is broken
        raise SweepError(f"this kvbench install has no suites/ ({GRID_TEST} is missing); "
                         "reinstall it (pip install .) or run from a checkout")
    suite = load_suite(opts.suite, validate=False)
    selected = check_filter(opts.filter, suite)
    if opts.resume and opts.run_id:
        raise SweepError("--resume and --run-id are exclusive: --resume names the run to finish")
    if not opts.no_mlflow and not (opts.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI")):
        check_store_root(root)  # before the run directory exists: a refusal leaves nothing behind
    hw = hardware.detect()
    if suite.needs_gpu and hw.profile == "cpu":
        raise SuiteError(f"suite {suite.name} needs a CUDA GPU (marks {', '.join(suite.marks)}); this machine has none (profile cpu)")
    suite = load_suite(suite.path)  # validate every config now that the machine can run them
    plan = devices.plan_workers(opts.jobs, hw.gpu_ids, uses_gpu=suite.needs_gpu, oversubscribe=opts.oversubscribe)
    check_jobs(opts.jobs, hw.gpu_count)  # after the GPU plan: its refusal names --oversubscribe
    note = lambda m: err_console.print(m, markup=False)  # noqa: E731
    if opts.resume:
        run_dir = resume_run_dir(opts.resume, root=root)
        # One sweep per run: two resumes at once doubled every row (one refuses here).
        lock = hold_run(run_dir.path, f"kvbench sweep {suite.name} --resume", note)
    else:
        run_dir = create_run_dir(opts.run_id or new_run_id(suite.name), root=root)
        lock = hold_run(run_dir.path, f"kvbench sweep {suite.name}", note)
    try:
        if opts.resume:
            check_resumable(run_dir, suite)
        return _sweep(opts, suite, run_dir, hw, plan, selected, root, console, err_console)
    except OSError as err:  # a full disk or a read-only root under the sweep's own files
        where = err.filename or run_dir.path
        raise SweepError(f"cannot write {where}: {err.strerror or err}; rows already written are kept, "
                         f"finish with kvbench sweep {opts.suite} --resume {run_dir.run_id}") from None
    finally:
        lock.release()


def check_resumable(run_dir: RunDir, suite: Suite) -> None:
    prev = run_dir.meta()
    if prev.get("suite") and prev["suite"] != suite.name:
        raise SweepError(f"run {run_dir.run_id} is a sweep of suite {prev['suite']!r}, not {suite.name!r}")
    # Finished rows were expanded and judged by the file as it was; mixing them with
    # rows of an edited grid or rules would make one run of two suites.
    if prev.get("suite_hash") and prev["suite_hash"] != suite.digest:
        raise SweepError(f"suite {suite.name} changed since run {run_dir.run_id} began (hash {prev['suite_hash']}, "
                         f"now {suite.digest}); start a new run instead of --resume")


def _sweep(opts: SweepOptions, suite: Suite, run_dir: RunDir, hw: hardware.Hardware, plan: devices.WorkerPlan,
           selected: int | None, root: Path, console, err_console) -> int:
    jobs = plan.jobs
    meta = prepare_run(suite, run_dir, opts.mlflow_uri, jobs=jobs, filter_expr=opts.filter,
                       no_mlflow=opts.no_mlflow, root=root, hw=hw, warn=lambda m: err_console.print(m))
    run_dir.collected.unlink(missing_ok=True)
    start_system_metrics(meta.get("mlflow_uri"), meta.get("mlflow_parent"))
    env = dict(os.environ, KVBENCH_GRID_SUITE=str(suite.path), KVBENCH_GRID_RUN_DIR=str(run_dir.path),
               KVBENCH_GRID_MLFLOW_URI=meta.get("mlflow_uri") or "", KVBENCH_GRID_PARENT=meta.get("mlflow_parent") or "",
               KVBENCH_GRID_ROOT=str(root), PYTHONUNBUFFERED="1")
    if not meta.get("mlflow_parent"):
        env["KVBENCH_GRID_MLFLOW_URI"] = ""  # no parent: workers leave every row for sync
    done_before = len(run_dir.done_keys())
    cmd = pytest_command(suite, run_dir, jobs, opts.filter, plan.pins)
    chosen = f" ({selected} selected by --filter)" if selected is not None else ""
    console.print(f"kvbench sweep {suite.name}: {len(suite.configs)} configs{chosen}, {jobs} worker(s), profile {hw.profile}, "
                  f"run {run_dir.run_id}" + (f" (resuming, {done_before} done)" if opts.resume else ""))
    started = time.time()
    log = (run_dir.path / "pytest.log").open("ab")
    proc = subprocess.Popen(cmd, cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=_die_with_parent)
    copier = threading.Thread(target=_copy_log, args=(proc.stdout, log), daemon=True)
    copier.start()
    try:
        _follow(proc, run_dir, console)
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        err_console.print(f"kvbench: interrupted; finish it with kvbench sweep {opts.suite} --resume {run_dir.run_id}")
        raise
    finally:
        copier.join(timeout=10)
        try:
            log.close()
        except OSError:
            pass  # a full disk: the log is best effort
    rc = proc.returncode
    completed = rc in (0, 1, 5)  # 1: some config not as expected; 5: nothing left to run
    if rc == WRITE_FAILED:
        # Not a config's fault: no "worker died" rows, every unwritten config stays undone.
        raise SweepError(f"a result could not be written to {run_dir.results} (disk full, read-only or over quota), "
                         f"so the sweep stopped; {len(run_dir.done_keys())} config(s) are recorded; make room and "
                         f"finish with kvbench sweep {opts.suite} --resume {run_dir.run_id}")
    if completed:
        _record_lost(suite, run_dir)
    else:  # pytest itself broke (internal error, a kill): keep what finished, say where to look
        try:
            lines = (run_dir.path / "pytest.log").read_text(errors="replace").strip().splitlines()[-15:]
        except OSError:
            lines = []
        err_console.print("\n".join(lines))
        err_console.print(f"kvbench: pytest stopped with exit code {rc} before finishing; see {run_dir.path / 'pytest.log'}"
                          f"; finish it with kvbench sweep {opts.suite} --resume {run_dir.run_id}")
    from harness.results import load_rows
    from harness.summary import print_summary

    rows = load_rows(run_dir.path)
    wall = time.time() - started
    meta = run_dir.meta()
    meta["wall_s"] = meta.get("wall_s", 0.0) + wall
    run_dir.write_meta(meta)
    plots = write_run_plots(rows, run_dir, err_console.print)
    mlflow_note = finish_mlflow(run_dir, meta, rows, plots, root, err_console.print)
    print_summary(console, rows, run_dir, wall, mlflow_note, ran=len(rows) - done_before)
    return 0 if completed and all(r.get("verdict") in PASSING for r in rows) else 1


def _follow(proc: subprocess.Popen, run_dir: RunDir, console) -> None:
    """Follow the worker's files until pytest exits: a live bar on a terminal, a line
    per finished config in a log (CI), where a live display would print nothing."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("eta {task.fields[eta]}"), TextColumn("{task.fields[counts]}"))
    started = time.monotonic()
    # Only this attempt's rows count: a resumed run's earlier rows are not in the total.
    # Start after the last whole line: a torn tail of a killed run is cut by the next append.
    res_off, ev_off = tail(run_dir.results, 0)[1], tail(run_dir.events, 0)[1]
    running: dict[str, str] = {}
    counts = {"violated": 0, "unexpected": 0, "failed": 0}
    done = 0
    total = None
    live = console.is_terminal
    with Progress(*columns, console=console, transient=False, disable=not live) as progress:
        task = progress.add_task("collecting", total=None, counts="", eta="-")
        while True:
            finished = proc.poll() is not None
            if total is None and (ids := run_dir.collected_ids()) is not None:
                total = len(ids)
                progress.update(task, total=total)
            events, ev_off = tail(run_dir.events, ev_off)
            for ev in events:
                if ev.get("event") == "start":
                    running[ev.get("worker", "")] = ev.get("id", "")
                elif ev.get("event") == "done" and running.get(ev.get("worker", "")) == ev.get("id"):
                    running.pop(ev.get("worker", ""), None)
            rows, res_off = tail(run_dir.results, res_off)
            for row in rows:
                done += 1
                if any(v for v in (row.get("violations") or {}).values() if isinstance(v, (int, float))):
                    counts["violated"] += 1
                if row.get("verdict") == "failed":
                    counts["failed"] += 1
                elif row.get("verdict") not in PASSING:
                    counts["unexpected"] += 1
                if not live:
                    console.print(f"[{done}/{total or '?'}] {row.get('test_id') or row.get('key')}: "
                                  f"{row.get('status')}, {row.get('verdict')}, eta {eta(done, total, time.monotonic() - started)}",
                                  markup=False)
            summary = (f"with violations {counts['violated']} · unexpected {counts['unexpected']} · "
                       f"failed {counts['failed']}")
            current = ", ".join(sorted(running.values())[:2]) or ("starting" if total is None else "")
            progress.update(task, completed=done, description=current[:70], counts=summary,
                            eta=eta(done, total, time.monotonic() - started))
            if finished:
                if not live:
                    console.print(f"{done} configs run, {summary}")
                return
            time.sleep(0.25)


def eta(done: int, total: int | None, elapsed: float) -> str:
    """Time left at the mean pace so far ('-' until a config has finished)."""
    if not total or not done:
        return "-"
    left = max(0.0, elapsed / done * (total - done))
    minutes, seconds = divmod(int(round(left)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


def _record_lost(suite: Suite, run_dir: RunDir) -> None:
    """A config whose worker died (segfault, OOM kill) has no row: record it as failed."""
    from harness.runner import config_key

    ids = run_dir.collected_ids()
    if ids is None:
        return
    done = run_dir.done_keys()
    by_id = suite.by_id()
    for cid in ids:
        gc = by_id.get(cid)
        if gc is None:
            continue
        key = config_key(gc.config)
        if key not in done:
            append_row(run_dir.results, {
                "key": key, "config": gc.config, "metrics": {}, "series": {}, "violations": {},
                "violation_samples": [], "status": "failed", "verdict": "failed", "test_id": cid,
                "error": "the worker running this config died (see pytest.log)", "reasons": ["worker died"],
                "suite": suite.name, "run_id": run_dir.run_id})


def write_run_plots(rows: list[dict[str, Any]], run_dir: RunDir, warn) -> list[Path]:
    try:
        from harness.plots import write_plots

        return write_plots(rows, run_dir.plots)
    except Exception as err:  # a plot is a view; it must never cost the results
        warn(f"kvbench: warning: plots failed: {type(err).__name__}: {err}")
        return []


def finish_mlflow(run_dir: RunDir, meta: dict[str, Any], rows: list[dict[str, Any]], plots: list[Path],
                  root: Path, warn) -> str:
    """Upload what is missing, close the parent run; a one-line note of where things are."""
    uri = meta.get("mlflow_uri")
    if not uri:
        return "MLflow: off"
    pending = run_dir.done_keys() - run_dir.logged_keys()
    try:
        if pending or not meta.get("mlflow_parent"):
            sync(run_dir, uri, root=root)
        meta = run_dir.meta()
        finish_parent(uri, meta["mlflow_parent"], rows, plots)
    except Exception as err:  # MLflow is a view: the rows are safe on disk whatever it says
        missing = len(run_dir.done_keys() - run_dir.logged_keys())
        warn(f"kvbench: warning: MLflow at {uri}: {one_line(err)}")
        return (f"MLflow: {missing} config(s) not uploaded yet; run kvbench sync {run_dir.run_id}" if missing
                else f"MLflow: every config is uploaded but the parent run was not closed ({uri})")
    return f"MLflow: {uri} experiment {experiment_name(meta['suite'])}, parent run {meta['mlflow_parent']}"
