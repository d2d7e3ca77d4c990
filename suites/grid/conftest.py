"""The grid suite: one pytest test per config of a TOML suite.

Options (all optional; `kvbench sweep` passes them):
  --kvbench-suite NAME|FILE     which grid (default smoke)
  --kvbench-run-dir DIR         where results.jsonl goes (default: a fresh temporary dir);
                                configs already in its results.jsonl are deselected (resume)
  --kvbench-mlflow-uri URI      log each config to MLflow ("default" = the local sqlite store)
  --kvbench-parent-run ID       the sweep's parent run (kvbench sweep creates it once)
  --kvbench-filter EXPR         keep the configs this kvbench --filter expression selects
                                (name:value words match an option exactly; see harness.grid_filter)

Set-up that must happen once (run dir, MLflow store and parent run) happens in the
controller before xdist starts its workers; workers read it from the environment.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

GRID_DIR = Path(__file__).resolve().parent


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvbench", "kvbench grid suites")
    group.addoption("--kvbench-suite", default=None, help="suite name or TOML file (default smoke)")
    group.addoption("--kvbench-run-dir", default=None, help="run directory for results.jsonl")
    group.addoption("--kvbench-mlflow-uri", default=None, help="log configs to MLflow at URI ('default': local store)")
    group.addoption("--kvbench-parent-run", default=None, help="MLflow parent run id of the sweep")
    group.addoption("--kvbench-filter", default=None, help="kvbench --filter expression (ps:16 matches exactly)")


def _opt(config: pytest.Config, name: str) -> str | None:
    # The options exist only when this conftest was loaded at start-up (pytest suites/grid);
    # from a plain `pytest` they fall back to their defaults.
    try:
        return config.getoption(name)
    except ValueError:
        return None


def _suite_name(config: pytest.Config) -> str:
    return _opt(config, "--kvbench-suite") or os.environ.get("KVBENCH_GRID_SUITE") or "smoke"


def _load(name: str):
    """The suite, validated where its configs can run; a bad suite is a usage error (one line)."""
    import torch

    from harness.suites import load_suite
    from mini_engine.errors import KVBenchError

    try:
        suite = load_suite(name, validate=False)
        if not suite.needs_gpu or torch.cuda.is_available():  # GPU configs are skipped, not run, here
            suite = load_suite(name)
    except KVBenchError as err:
        raise pytest.UsageError(str(err)) from None
    return suite


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("KVBENCH_GRID_RUN_DIR"):
        return  # set up already: by kvbench sweep, or by the xdist controller before the workers
    from harness.results import RunDir
    from harness.sweep import prepare_run

    suite = _load(_suite_name(config))
    run_dir_opt = _opt(config, "--kvbench-run-dir")
    if run_dir_opt:
        from harness.locks import hold_run
        from mini_engine.errors import KVBenchError

        path = Path(run_dir_opt).resolve()
        try:
            path.mkdir(parents=True, exist_ok=True)
            # Not under kvbench sweep (which holds it): own the run dir for this session.
            config._kvbench_lock = hold_run(path, "pytest suites/grid", print)  # type: ignore[attr-defined]
        except (OSError, KVBenchError) as err:
            raise pytest.UsageError(f"--kvbench-run-dir {run_dir_opt}: {getattr(err, 'strerror', None) or err}") from None
    else:  # a throwaway run: the test verdicts are the output
        path = Path(tempfile.mkdtemp(prefix=f"kvbench-{suite.name}-"))
        config._kvbench_tmp_run = path  # type: ignore[attr-defined]
    run_dir = RunDir(path)
    uri = _opt(config, "--kvbench-mlflow-uri")
    parent = _opt(config, "--kvbench-parent-run")
    if uri and not parent:
        meta = prepare_run(suite, run_dir, None if uri == "default" else uri, jobs=1, filter_expr=None)
        uri, parent = meta.get("mlflow_uri"), meta.get("mlflow_parent")
        config._kvbench_owns_parent = True  # type: ignore[attr-defined]  # close it at session end
    elif run_dir_opt and not run_dir.meta():
        # A named run dir gets its meta.json, so kvbench sync/compare/baseline work on it later.
        prepare_run(suite, run_dir, None, jobs=1, filter_expr=None, no_mlflow=True)
    os.environ["KVBENCH_GRID_SUITE"] = str(suite.path)
    os.environ["KVBENCH_GRID_RUN_DIR"] = str(run_dir.path)
    os.environ["KVBENCH_GRID_MLFLOW_URI"] = uri or ""
    os.environ["KVBENCH_GRID_PARENT"] = parent or ""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
    # A row that could not be written (disk full, read-only): stop the grid at once,
    # every config after it would be lost the same way.
    if call.excinfo is not None and call.excinfo.typename == "ResultWriteError":
        item.session.shouldstop = f"kvbench: result not written: {call.excinfo.value}"
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # In the controller too (xdist sends the workers' reports): remember the failure.
    if report.failed and "ResultWriteError" in (report.longreprtext or ""):
        global _write_failed
        _write_failed = True


_write_failed = False


def pytest_unconfigure(config: pytest.Config) -> None:
    lock = getattr(config, "_kvbench_lock", None)
    if lock is not None:
        lock.release()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _write_failed and not hasattr(session.config, "workerinput"):
        from harness.sweep import WRITE_FAILED

        session.exitstatus = WRITE_FAILED  # kvbench sweep: an error of the sweep, no "worker died" rows
    tmp = getattr(session.config, "_kvbench_tmp_run", None)
    if tmp is not None and not getattr(session.config, "_kvbench_owns_parent", False):
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    # A pytest run that created its own parent run closes it, as kvbench sweep does:
    # upload what workers could not, then mark the parent finished.
    if not getattr(session.config, "_kvbench_owns_parent", False) or hasattr(session.config, "workerinput"):
        return
    from harness.results import RunDir, load_rows, results_root
    from harness.sweep import finish_mlflow, write_run_plots

    run_dir = RunDir(Path(os.environ["KVBENCH_GRID_RUN_DIR"]))
    rows = load_rows(run_dir.path)
    plots = write_run_plots(rows, run_dir, print)  # on the parent run too, as kvbench sweep does
    note = finish_mlflow(run_dir, run_dir.meta(), rows, plots, results_root(), print)
    print(f"\nkvbench: {note}")


@pytest.fixture(scope="session")
def kvbench_grid():
    from harness.execute import session_from_env
    from harness.suites import load_suite

    return session_from_env(load_suite(os.environ["KVBENCH_GRID_SUITE"], validate=False))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "grid_config" not in metafunc.fixturenames:
        return
    from harness.suites import load_suite

    suite = load_suite(os.environ.get("KVBENCH_GRID_SUITE") or _suite_name(metafunc.config), validate=False)
    marks = [getattr(pytest.mark, m) for m in suite.marks]
    metafunc.parametrize("grid_config", [pytest.param(gc, id=gc.id, marks=marks) for gc in suite.configs])


def _grid_items(items: list[pytest.Item]) -> list[pytest.Item]:
    return [it for it in items if "grid_config" in getattr(it, "fixturenames", ()) and GRID_DIR in Path(str(it.path)).parents]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Resume: a config whose row is already in results.jsonl is done. Every worker
    # collects before any test runs, so all of them see the same file.
    run_dir = os.environ.get("KVBENCH_GRID_RUN_DIR")
    if not run_dir:
        return
    from harness.results import RunDir
    from harness.runner import config_key

    done = RunDir(Path(run_dir)).done_keys()
    expr = _opt(config, "--kvbench-filter") or os.environ.get("KVBENCH_GRID_FILTER")
    if not done and not expr:
        return
    from harness.grid_filter import compile_filter

    try:
        selects = compile_filter(expr) if expr else None
    except Exception as err:
        raise pytest.UsageError(str(err)) from None
    keep, drop = [], []
    for item in items:
        if item not in _grid_items([item]):
            keep.append(item)
            continue
        gc = item.callspec.params["grid_config"]
        if (selects is not None and not selects(gc.id, gc.config)) or config_key(gc.config) in done:
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    # What this sweep will run, for the progress bar of kvbench sweep (same on every worker).
    run_dir = os.environ.get("KVBENCH_GRID_RUN_DIR")
    if not run_dir or not session.items:
        return
    ids = [it.callspec.id for it in _grid_items(session.items)]
    from harness.results import RunDir

    try:
        RunDir(Path(run_dir)).write_collected(ids)
    except OSError:
        pass  # the progress bar goes without a total; the first row write stops the grid
