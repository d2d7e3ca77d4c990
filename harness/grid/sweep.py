"""`kvbench sweep`: validate a suite, set the run up once, run pytest in-process, show progress.

The sweep itself is the grid plugin (harness.grid.plugin) on the grid pytest module
(suites/grid): one test per config. This module prepares what must exist before
workers start (run directory, meta.json, the MLflow store and the parent run),
then runs pytest in this process with the plugin's controller: xdist workers
(always, so a crashing config takes only its worker down; pinned one per GPU on a
multi-GPU machine) run the configs, the controller here writes every row and
draws the progress from pytest's reports. Afterwards: MLflow uploads that failed,
plots, the summary.
"""

from __future__ import annotations

import io
import os
from contextlib import nullcontext
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import HarnessError
from harness.core.safe_write import UnsafeTarget, open_regular
from harness.grid import sigint
from harness.grid.engines import skipped_line, unsupported, with_engine
from harness.grid.cost import model_seconds
from harness.grid.filter import compile_filter
from harness.grid.lifecycle import PROJECT, finish_mlflow, prepare_run, write_run_plots
from harness.grid.phases import (build_cpu_kernels, build_cpu_kernels_beside, has_accounting_configs,
                                 needs_cpu_kernels, phase)
from harness.grid.progress import Display
from harness.grid.shards import parse_shard, shard_meta
from harness.grid.suites import SUITES_DIR, Suite, SuiteError, load_suite
from harness.grid.verdict import judge_sweep
from harness.judge.expect import PASSING
from harness.run import devices, hardware
from harness.run.bounds import check_jobs
from harness.store.locks import hold_run
from harness.store.results import (
    RunDir,
    check_store_root,
    create_run_dir,
    load_rows,
    new_run_id,
    results_root,
    resume_run_dir,
)
from harness.view.mlflow_log import start_system_metrics
from harness.view.summary import print_summary


GRID_TEST = SUITES_DIR / "grid" / "test_grid.py"


class SweepError(HarnessError):
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
    fail_on_regression: bool = False  # exit 1 when the run regressed against its baseline or the run before
    nights: str | None = None  # where earlier runs of the suite are (default the results root's runs/)
    shard: str | None = None  # "I/N": this machine's share of the suite (harness.grid.shards)
    engine: str | None = None  # every config's engine (harness/grid/engines.py); None: each config's own


def filter_selects(expr: str):
    """The --filter expression (harness.grid.filter): test id [, config] -> selected."""
    return compile_filter(expr)


def _to_run(suite: Suite, expr: str | None, only: list[str] | None) -> list:
    """The configs this sweep runs: its shard's (or those not skipped), chosen by --filter."""
    selects = filter_selects(expr) if expr is not None else None
    return [gc for gc in suite.configs
            if (only is None or gc.id in only) and (selects is None or selects(gc.id, gc.config))]


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


def pytest_args(jobs: int, filter_expr: str | None, pins: tuple[str, ...]) -> list[str]:
    """pytest's arguments for the grid: always xdist workers, so a config that kills its
    process (segfault, OOM kill) takes a worker down, never the sweep."""
    args = [str(GRID_TEST), "-p", "no:cacheprovider", "-q", "-rfE", "--rootdir", str(PROJECT),
            "-m", "",  # the suite's own marks decide; the default addopts deselect gpu/nightly
            # This process imported MLflow (and its anyio) before pytest started: nothing to rewrite there.
            "-W", "ignore:Module already imported so cannot be rewritten:pytest.PytestAssertRewriteWarning"]
    if pins:
        # One worker per GPU, pinned before the worker process starts (CUDA reads it once).
        for pin in pins:
            args += ["--tx", f"popen//env:CUDA_VISIBLE_DEVICES={pin}"]
        args += ["--dist", "load"]
    else:
        args += ["-n", str(jobs)]
    if filter_expr:  # applied by the grid plugin (exact name:value words), not as -k
        args += [f"--kvbench-filter={filter_expr}"]  # one argument: a leading '-' is not an option
    return args


class _Log(io.TextIOBase):
    """pytest's output into pytest.log, best effort: a full disk there must not stop
    pytest with an internal error (the row write is where a full disk is reported)."""

    def __init__(self, path: Path):
        # never appended through a link out of the run (open_regular)
        self._fh = open(open_regular(path, "pytest.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a",
                        encoding="utf-8", errors="replace")
        self._ok = True

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self._ok:
            try:
                self._fh.write(text)
            except OSError:
                self._ok = False
        return len(text)

    def flush(self) -> None:
        if self._ok:
            try:
                self._fh.flush()
            except OSError:
                self._ok = False

    def close(self) -> None:
        self.flush()
        self._ok = False
        try:
            self._fh.close()
        except OSError:
            pass
        super().close()


def run_sweep(opts: SweepOptions, *, root: Path | None = None) -> int:
    from rich.console import Console  # rich: optional, loaded only on this path

    # The streams as they are now: pytest's own output goes to pytest.log meanwhile.
    console = Console(file=sys.stdout, highlight=False, quiet=opts.quiet)
    if not console.is_terminal:
        console = Console(file=sys.stdout, highlight=False, quiet=opts.quiet, width=200)  # a log: ids on one line
    err_console = Console(file=sys.stderr, highlight=False)
    root = root or results_root()
    # Everything that can be wrong with the input is checked before any work.
    if not GRID_TEST.is_file():  # the grid module ships with the package: an install without it is broken
        raise SweepError(f"this kvbench install has no suites/ ({GRID_TEST} is missing); "
                         "reinstall it (pip install .) or run from a checkout")
    shard = parse_shard(opts.shard) if opts.shard is not None else None
    if shard is not None and not (opts.run_id or opts.resume):
        raise SweepError(f"--shard {shard} needs --run-id: the night's id, the same on every shard, "
                         "so that kvbench merge can join them")
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
    check_engine(suite, opts.engine)
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
            check_resumable(run_dir, suite, shard)
            part = run_dir.meta().get("shard")  # a shard resumes its own share, not a new plan
        elif shard is not None:
            nights = [Path(opts.nights)] if opts.nights else [root / "runs"]
            part = shard_meta(suite, shard, nights, hw.profile, opts.filter, run_dir.run_id)
        else:
            part = None
        return _sweep(opts, suite, run_dir, hw, plan, selected, root, console, err_console, part)
    except (OSError, UnsafeTarget) as err:  # a full disk or a read-only root under the sweep's own files
        if not opts.resume and not run_dir.meta_path.exists():
            lock.release()
            _forget(run_dir)  # a resume needs meta.json: a run that never got one keeps nothing
            raise SweepError(f"cannot write {getattr(err, 'filename', None) or run_dir.meta_path}: "
                             f"{getattr(err, 'strerror', None) or err}; nothing was kept, run the sweep again "
                             f"(run id {run_dir.run_id} is free)") from None
        where = getattr(err, "filename", None) or run_dir.path
        raise SweepError(f"cannot write {where}: {getattr(err, 'strerror', None) or err}; rows already written are kept, "
                         f"finish with kvbench sweep {opts.suite} --resume {run_dir.run_id}") from None
    finally:
        lock.release()


def check_engine(suite: Suite, engine: str | None) -> None:
    """Refuse, before a run directory exists, an engine that can run none of the suite's configs."""
    on = with_engine(suite, engine)
    skipped = unsupported(on)
    if on.configs and len(skipped) == len(on.configs):
        raise SweepError(skipped_line(skipped, len(on.configs)) + "; nothing is left to run")


def _forget(run_dir: RunDir) -> None:
    """Remove a fresh run directory the sweep made before it could write meta.json, so
    its id is not stuck: neither --resume (no meta.json) nor --run-id (it exists) took it."""
    for name in ("lock", "pytest.log", "mlflow_logged.txt", "results.jsonl"):
        p = run_dir.path / name
        if name != "results.jsonl" or (p.is_file() and p.stat().st_size == 0):
            p.unlink(missing_ok=True)
    try:
        run_dir.path.rmdir()
    except OSError:
        pass  # something else is in it: left for a person to look at


def check_resumable(run_dir: RunDir, suite: Suite, shard=None) -> None:
    prev = run_dir.meta()
    if prev.get("suite") and prev["suite"] != suite.name:
        raise SweepError(f"run {run_dir.run_id} is a sweep of suite {prev['suite']!r}, not {suite.name!r}")
    was = prev.get("shard")
    was_text = f"{was.get('index')}/{was.get('count')}" if isinstance(was, dict) else None
    if shard is not None and str(shard) != was_text:
        raise SweepError(f"run {run_dir.run_id} is " + (f"shard {was_text}" if was_text else "not a shard")
                         + f", not --shard {shard}; leave --shard out to resume it as it began")
    # Finished rows were expanded and judged by the file as it was; mixing them with
    # rows of an edited grid or rules would make one run of two suites.
    if prev.get("suite_hash") and prev["suite_hash"] != suite.digest:
        raise SweepError(f"suite {suite.name} changed since run {run_dir.run_id} began (hash {prev['suite_hash']}, "
                         f"now {suite.digest}); start a new run instead of --resume")


def _sweep(opts: SweepOptions, suite: Suite, run_dir: RunDir, hw: hardware.Hardware, plan: devices.WorkerPlan,
           selected: int | None, root: Path, console, err_console, part: dict | None = None) -> int:
    from harness.grid.plugin import GridController  # pytest: optional, loaded only on this path

    # A resumed run goes on with the engine it started on.
    engine = opts.engine or (run_dir.meta().get("engine") if opts.resume else None)
    suite = with_engine(suite, engine)
    meta, only = _prepare(opts, suite, run_dir, hw, plan, root, err_console, engine, part)
    display = Display(console, {gc.id: model_seconds(gc.config, suite.repeat) for gc in suite.configs})
    # No parent run: the controller leaves every row for sync (finish_mlflow below).
    controller = GridController(suite, run_dir, uri=meta.get("mlflow_uri"), parent=meta.get("mlflow_parent"),
                                root=root, filter_expr=opts.filter, display=display, only=only, engine=engine)
    done_before = len(controller.done)
    chosen = f" ({selected} selected by --filter)" if selected is not None else ""
    if part is not None:
        chosen += (f", shard {part['index']}/{part['count']}: {len(only)} configs, expected {part['expected_s']:.1f} s "
                   f"by {part['source']}")
    console.print(f"kvbench sweep {suite.name}: {len(suite.configs)} configs{chosen}, {plan.jobs} worker(s), "
                  f"hardware {hw.profile}, run {run_dir.run_id}"
                  + (f" (resuming, {done_before} done)" if opts.resume else ""))
    if order := devices.check_order():  # before the live progress, which would overdraw it
        err_console.print(order, markup=False, soft_wrap=True)
    kernels, to_run = None, _to_run(suite, opts.filter, only)
    if engine in (None, "mini") and needs_cpu_kernels(to_run, hw.profile):
        if has_accounting_configs(to_run):  # built beside them: only the real-model configs wait for it
            kernels = build_cpu_kernels_beside(console, display.aside)
        else:
            console.print(build_cpu_kernels(console), markup=False)
    started = time.time()
    rc = _run_grid(opts, run_dir, plan, controller, display, err_console)
    if kernels is not None and kernels.is_alive():  # no real-model config waited for it (resumed, filtered, failed)
        with phase(console, "CPU kernels: the build begun beside the grid, finishing"):
            kernels.join()  # its line before the summary; an unfinished build would be left for the next run
    completed = _completed(opts, run_dir, controller, rc, err_console)
    return _finish(opts, run_dir, rows=load_rows(run_dir.path), wall=time.time() - started, root=root,
                   console=console, err_console=err_console, ran_before=done_before, completed=completed)


def _prepare(opts: SweepOptions, suite: Suite, run_dir: RunDir, hw: hardware.Hardware, plan: devices.WorkerPlan,
             root: Path, err_console, engine: str | None, part: dict | None) -> tuple[dict, list[str] | None]:
    """The run's meta.json before any row (its share, its engine, what it plans to run), the
    system metrics started, and which configs this run takes (None: all of the suite)."""
    skipped = unsupported(suite)
    meta = prepare_run(suite, run_dir, opts.mlflow_uri, jobs=plan.jobs, filter_expr=opts.filter,
                       no_mlflow=opts.no_mlflow, root=root, hw=hw, warn=lambda m: err_console.print(m))
    if part is not None and meta.get("shard") != part:
        meta["shard"] = part  # before any row: a shard's meta.json names its share (kvbench merge checks it)
        run_dir.write_meta(meta)
    if engine is not None and meta.get("engine") != engine:
        meta["engine"] = engine  # before any row: --resume goes on with it
        run_dir.write_meta(meta)
    start_system_metrics(meta.get("mlflow_uri"), meta.get("mlflow_parent"))
    only = list(part["configs"]) if part is not None else None
    if skipped:  # the configs the reference cannot run are left out, each reason counted in one line
        only = [c.id for c in suite.configs if c.id not in skipped and (only is None or c.id in only)]
        err_console.print(skipped_line(skipped, len(suite.configs)), markup=False, soft_wrap=True)
    if only is not None and meta.get("planned") != len(only):
        meta["planned"] = len(only)  # what this run sets out to measure: sync's check that every config ran
        run_dir.write_meta(meta)
    return meta, only


def _run_grid(opts: SweepOptions, run_dir: RunDir, plan: devices.WorkerPlan, controller, display, err_console) -> int:
    """pytest in this process with the controller as its plugin; its report goes to pytest.log
    while the console shows the progress. A Ctrl-C comes back as KeyboardInterrupt."""
    import pytest  # pytest: optional, loaded only on this path

    log = _Log(run_dir.path / "pytest.log")
    streams = sys.stdout, sys.stderr
    display.start()
    sigints: list[int] = []  # a Ctrl-C is a SIGINT here; pytest's INTERRUPTED alone is not one (harness/grid/sigint.py)
    try:
        sys.stdout = sys.stderr = log  # pytest's terminal report is the log, the console is the progress
        try:
            with devices.pci_bus_order(), sigint.watch(sigints, controller.interrupt):
                rc = int(pytest.main(pytest_args(plan.jobs, opts.filter, plan.pins), plugins=[controller]))
        finally:
            sys.stdout, sys.stderr = streams
            display.stop()
            log.close()
    except KeyboardInterrupt:  # outside pytest's own handling (which returns INTERRUPTED)
        rc = int(pytest.ExitCode.INTERRUPTED)
        sigints.append(2)
    if rc == pytest.ExitCode.INTERRUPTED and sigints:
        err_console.print(f"kvbench: interrupted; finish it with kvbench sweep {opts.suite} --resume {run_dir.run_id}")
        raise KeyboardInterrupt
    return rc


def _completed(opts: SweepOptions, run_dir: RunDir, controller, rc: int, err_console) -> bool:
    """Whether pytest ran the grid to its end; a disk that refused a row stops the sweep here."""
    from harness.grid.plugin import WRITE_FAILED  # pytest: optional, loaded only on this path

    if controller.write_error is not None or rc == WRITE_FAILED:
        # Not a config's fault: no "worker died" rows, every unwritten config stays undone.
        raise SweepError(f"a result could not be written to {run_dir.results} (disk full, read-only or over quota), "
                         f"so the sweep stopped; {len(run_dir.done_keys())} config(s) are recorded; make room and "
                         f"finish with kvbench sweep {opts.suite} --resume {run_dir.run_id}")
    completed = rc in (0, 1, 5)  # 1: some config not as expected; 5: nothing left to run
    if completed and controller.collected is None:  # no worker started (a plugin it could not import): nothing ran
        completed, controller.stop_reason = False, "no worker collected the grid"
    if not completed:  # pytest itself broke (internal error): keep what finished, say where to look
        try:
            lines = (run_dir.path / "pytest.log").read_text(errors="replace").strip().splitlines()[-15:]
        except OSError:
            lines = []
        err_console.print("\n".join(lines), markup=False)
        why = f" ({controller.stop_reason})" if controller.stop_reason else ""
        err_console.print(f"kvbench: pytest stopped with exit code {rc}{why} before finishing; see {run_dir.path / 'pytest.log'}"
                          f"; finish it with kvbench sweep {opts.suite} --resume {run_dir.run_id}")
    return completed


def _finish(opts: SweepOptions, run_dir: RunDir, *, rows: list[dict], wall: float, root: Path, console,
            err_console, ran_before: int, completed: bool) -> int:
    """After the grid, each phase labelled: plots, MLflow's last uploads, the summary, the
    judgement; the exit code."""
    meta = run_dir.meta()
    meta["wall_s"] = meta.get("wall_s", 0.0) + wall
    run_dir.write_meta(meta)
    with phase(console, "plots of the run"):
        plots = write_run_plots(rows, run_dir, err_console.print)
    with (phase(console, "MLflow: the last uploads, the parent run's figures and plots, then closed")
          if meta.get("mlflow_uri") else nullcontext()):
        mlflow_note = finish_mlflow(run_dir, meta, rows, plots, root, err_console.print)
    print_summary(console, rows, run_dir, wall, mlflow_note, ran=len(rows) - ran_before)

    with phase(console, "compare against the baseline and the previous run, and the report"):
        gate = judge_sweep(run_dir, rows, root, opts, console, err_console.print)  # 0 without --fail-on-regression
    if gate:
        return gate
    return 0 if completed and all(r.get("verdict") in PASSING for r in rows) else 1
