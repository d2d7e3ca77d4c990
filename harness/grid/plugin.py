"""The grid as one pytest plugin: a test per config of a suite, one writer of its rows.

Two roles, in one process or split by pytest-xdist:
  * where tests run (an xdist worker, or the single pytest process), the suite's
    configs are collected as test items, configs already done or left out by the
    filter are deselected, and each config is run and judged (harness.grid.execute); its
    row rides on the test's call report, which xdist carries to the controller;
  * the controller (the process that started pytest: `kvbench sweep`, or a plain
    `pytest suites/grid`) is the only writer: it appends each reported row to
    results.jsonl, then logs it to MLflow, and gives a config whose worker crashed a
    failed row. Progress is the reports themselves (GridController.display).

What a worker needs of the controller's set-up (the suite file, the run id, the
configs already done) travels in xdist's workerinput, never the environment.
`kvbench sweep` prepares the run itself and hands pytest its GridController;
without one, pytest_configure builds it from the options below.

Options (all optional; `kvbench sweep` needs none of them):
  --kvbench-suite NAME|FILE     which grid (default smoke)
  --kvbench-run-dir DIR         where results.jsonl goes (default: a fresh temporary dir);
                                configs already in its results.jsonl are deselected (resume)
  --kvbench-mlflow-uri URI      log each config to MLflow ("default" = the local sqlite store)
  --kvbench-parent-run ID       the parent run to log under (else one is created and closed)
  --kvbench-filter EXPR         keep the configs this kvbench --filter expression selects
                                (name:value words match an option exactly; see harness.grid.filter)
A shard of a night (`kvbench sweep --shard`) keeps only its share of the configs: the
test ids the controller hands the workers as ``only`` (harness.grid.shards).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import HarnessError
from harness.grid.engines import with_engine
from harness.grid.execute import GridSession, ResultWriteError
from harness.grid import sigint
from harness.grid.filter import compile_filter
from harness.grid.lifecycle import finish_mlflow, prepare_run, write_run_plots
from harness.grid.suites import SUITES_DIR, load_suite
from harness.store.locks import hold_run
from harness.store.results import RunDir, load_rows, results_root, row_json
from harness.view.mlflow_log import Logger, experiment_for
from harness.view.mlflow_store import tracking_uri
from mini_engine.errors import KVBenchError

GRID_DIR = SUITES_DIR / "grid"
ROW = pytest.StashKey[dict]()
VIEW = pytest.StashKey["WorkerView"]()
# pytest's exit status when the grid stopped because a result could not be written:
# an error of the sweep, not of a config; its unwritten configs stay undone.
WRITE_FAILED = 75
WORKER_DIED = "the worker running this config died (see pytest.log)"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvbench", "kvbench grid suites")
    group.addoption("--kvbench-suite", default=None, help="suite name or TOML file (default smoke)")
    group.addoption("--kvbench-run-dir", default=None, help="run directory for results.jsonl")
    group.addoption("--kvbench-mlflow-uri", default=None, help="log configs to MLflow at URI ('default': local store)")
    group.addoption("--kvbench-parent-run", default=None, help="MLflow parent run id to log configs under")
    group.addoption("--kvbench-filter", default=None, help="kvbench --filter expression (ps:16 matches exactly)")


def _opt(config: pytest.Config, name: str) -> str | None:
    # The options exist only when the grid conftest was loaded at start-up (pytest
    # suites/grid, kvbench sweep); from a plain `pytest` they fall back to their defaults.
    try:
        return config.getoption(name)
    except ValueError:
        return None


class WorkerView:
    """What the test-running side knows: the suite, the run, what to deselect."""
    def __init__(self, suite_path: str, run_dir: str, done: list[str], filter_expr: str | None, worker: str,
                 only: list[str] | None = None, engine: str | None = None):

        # Validated by the controller already; collection only needs the configs.
        self.suite = with_engine(load_suite(suite_path, validate=False), engine)  # kvbench sweep --engine
        self.session = GridSession(self.suite, RunDir(Path(run_dir)), None, worker)
        self.done = set(done)
        self.filter = filter_expr
        self.only = None if only is None else set(only)  # a shard's configs (test ids); None: every config


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # an xdist worker: the controller set the run up
        sigint.die_on_sigint()
        grid = workerinput.get("kvbench")
        if grid is None:  # a plain `pytest -n N` that met the grid late: its controller has no set-up
            suite = _load(_opt(config, "--kvbench-suite") or "smoke", validate=False)
            grid = {"suite": str(suite.path), "run_dir": str(Path(tempfile.gettempdir()) / "kvbench-pytest"),
                    "done": [], "filter": _opt(config, "--kvbench-filter")}
        config.stash[VIEW] = WorkerView(grid["suite"], grid["run_dir"], grid["done"], grid["filter"],
                                        workerinput.get("workerid", "main"), grid.get("only"), grid.get("engine"))
        return
    controller = next((p for p in config.pluginmanager.get_plugins() if isinstance(p, GridController)), None)
    if controller is None:
        controller = GridController.from_options(config)
        config.pluginmanager.register(controller, "kvbench-grid-controller")
    grid = controller.worker_input()
    config.stash[VIEW] = WorkerView(grid["suite"], grid["run_dir"], grid["done"], grid["filter"], "main", grid["only"],
                                    grid.get("engine"))


def _load(name: str, validate: bool = True):
    """The suite, validated where its configs can run; a bad suite is a usage error (one line)."""
    try:
        suite = load_suite(name, validate=False)
        if validate:
            import torch  # torch only here: whether this machine has CUDA for the GPU configs

            if not suite.needs_gpu or torch.cuda.is_available():  # GPU configs are skipped, not run, here
                suite = load_suite(name)
    except (KVBenchError, HarnessError) as err:  # the engine's (an option) or the suite's own
        raise pytest.UsageError(str(err)) from None
    return suite


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "grid_config" not in metafunc.fixturenames:
        return
    suite = metafunc.config.stash[VIEW].suite
    marks = [getattr(pytest.mark, m) for m in suite.marks]
    metafunc.parametrize("grid_config", [pytest.param(gc, id=gc.id, marks=marks) for gc in suite.configs])


def _is_grid(item: pytest.Item) -> bool:
    return "grid_config" in getattr(item, "fixturenames", ()) and GRID_DIR in Path(str(item.path)).parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Resume: a config whose row is already in results.jsonl is done. Every worker
    # deselects by the same list (the controller read it once), so all collect alike.
    view = config.stash.get(VIEW, None)
    if view is None or not (view.done or view.filter or view.only is not None):
        return

    try:
        selects = compile_filter(view.filter) if view.filter else None
    except Exception as err:
        raise pytest.UsageError(str(err)) from None
    keep, drop = [], []
    for item in items:
        if _is_grid(item):
            gc = item.callspec.params["grid_config"]
            if ((selects is not None and not selects(gc.id, gc.config)) or gc.spec.key in view.done
                    or (view.only is not None and gc.id not in view.only)):
                drop.append(item)
                continue
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


class ConfigRun:
    """What the grid test gets: runs a config and leaves its row on the test item,
    for the call report to carry (pytest_runtest_makereport)."""

    def __init__(self, session: GridSession, item: pytest.Item):
        self.session, self.item = session, item

    def run(self, gc) -> dict[str, Any]:
        row = self.session.measure(gc)
        self.item.stash[ROW] = row
        return row


@pytest.fixture
def kvbench_grid(request: pytest.FixtureRequest) -> ConfigRun:
    return ConfigRun(request.config.stash[VIEW].session, request.node)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
    row = item.stash.get(ROW, None)
    if report.when == "call" and row is not None:

        # A JSON string: xdist serialises a report's extra attributes as they are.
        report.kvbench_row = row_json(row)
    return report


def test_id_of(nodeid: str) -> str | None:
    """The config id of a grid test's node id (test_config[<id>]), else None."""
    head, sep, rest = nodeid.partition("::test_config[")
    return rest[:-1] if sep and head.endswith("test_grid.py") and rest.endswith("]") else None


class GridController:
    """The controller's side: the single writer of rows and MLflow, and the progress.

    ``display`` (optional) is told what happens: ``collected(ids)``, ``started(id)``,
    ``stopped(id)``, ``row(row)``; kvbench sweep draws its progress bar from it."""

    def __init__(self, suite, run_dir, *, uri: str | None = None, parent: str | None = None,
                 root: Path | None = None, filter_expr: str | None = None, display: Any = None,
                 only: list[str] | None = None, engine: str | None = None):

        self.suite, self.run_dir, self.filter, self.display = with_engine(suite, engine), run_dir, filter_expr, display
        self.only = only  # a shard's test ids, or those the engine runs (None: the whole suite)
        self.engine = engine  # kvbench sweep --engine: every config's engine (None: each config's own)
        root = root or results_root()
        experiment = experiment_for({"suite": suite.name, **run_dir.meta()})  # a PR rerun's has its own
        logger = Logger(uri, suite.name, run_dir.run_id, parent, root, experiment) if uri and parent else None
        self.writer = GridSession(suite, run_dir, logger, background=True)
        self.done = sorted(run_dir.done_keys())  # read once, before any row of this run
        self.collected: list[str] | None = None
        self.started: set[str] = set()
        self.finished: set[str] = set()
        self.written = 0
        self.write_error: str | None = None
        self.stop_reason = ""  # why pytest stopped the grid early, in pytest's words (harness/grid/sigint.py)
        # Set by a Ctrl-C: a worker that dies from here on died of it, its config stays undone.
        self.interrupted = False
        # What a plain pytest run set up for itself, to undo or close at its end.
        self.lock = self.tmp = None
        self.owns_parent = False

    @classmethod
    def from_options(cls, config: pytest.Config) -> "GridController":
        """A plain pytest run: set the run up as kvbench sweep would, from the options."""
        suite = _load(_opt(config, "--kvbench-suite") or "smoke")
        run_dir_opt = _opt(config, "--kvbench-run-dir")
        lock = tmp = None
        if run_dir_opt:
            path = Path(run_dir_opt).resolve()
            try:
                path.mkdir(parents=True, exist_ok=True)
                lock = hold_run(path, "pytest suites/grid", print)  # kvbench sweep holds its run itself
            except (OSError, HarnessError) as err:
                raise pytest.UsageError(f"--kvbench-run-dir {run_dir_opt}: {getattr(err, 'strerror', None) or err}") from None
        else:  # a throwaway run: the test verdicts are the output
            path = tmp = Path(tempfile.mkdtemp(prefix=f"kvbench-{suite.name}-"))
        run_dir = RunDir(path)
        uri, parent = _opt(config, "--kvbench-mlflow-uri"), _opt(config, "--kvbench-parent-run")
        owns = False
        if uri and not parent:
            meta = prepare_run(suite, run_dir, None if uri == "default" else uri, jobs=1, filter_expr=None)
            uri, parent, owns = meta.get("mlflow_uri"), meta.get("mlflow_parent"), True
        elif run_dir_opt and not run_dir.meta():
            # A named run dir gets its meta.json, so kvbench sync/compare/baseline work on it later.
            prepare_run(suite, run_dir, None, jobs=1, filter_expr=None, no_mlflow=True)
        if uri == "default":

            uri = tracking_uri(None, results_root())
        controller = cls(suite, run_dir, uri=uri, parent=parent, filter_expr=_opt(config, "--kvbench-filter"))
        controller.lock, controller.tmp, controller.owns_parent = lock, tmp, owns
        return controller

    def worker_input(self) -> dict[str, Any]:
        return {"suite": str(self.suite.path), "run_dir": str(self.run_dir.path), "done": self.done,
                "filter": self.filter, "only": self.only, "engine": self.engine}

    # -- xdist: the set-up to the workers, their collection, their crashes ---------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput["kvbench"] = self.worker_input()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        if self.collected is None:  # every worker collects the same items
            self._collected(ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report, sched) -> None:
        cid = test_id_of(crashitem)
        if cid is not None and cid not in self.finished:
            self.lost(cid, WORKER_DIED)

    # -- pytest's own reports ------------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.collected is None:  # no xdist: this process collected
            self._collected([it.nodeid for it in session.items])

    def _collected(self, nodeids) -> None:
        self.collected = [cid for cid in map(test_id_of, nodeids) if cid is not None]
        if self.display is not None:
            self.display.collected(self.collected)

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        cid = test_id_of(nodeid)
        if cid is not None:
            self.started.add(cid)
            if self.display is not None:
                self.display.started(cid)

    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        cid = test_id_of(nodeid)
        if cid is not None and self.display is not None:
            self.display.stopped(cid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        cid = test_id_of(report.nodeid)
        if cid is None or cid in self.finished:
            return
        data = getattr(report, "kvbench_row", None)
        if data is not None:
            self.record(json.loads(data))
        elif report.skipped:
            self.finished.add(cid)  # a GPU config on a CPU machine: skipped, no row
        elif report.failed and report.when in ("setup", "call"):
            # The test broke before its row was made (a fixture, a harness bug): the
            # config is recorded failed, as a crash is, with pytest's last line as cause.
            lines = (report.longreprtext or "").strip().splitlines()
            self.lost(cid, f"the grid test failed in {report.when} before the config's row was made: "
                           f"{lines[-1] if lines else 'no detail'} (see pytest.log)")

    def lost(self, cid: str, error: str) -> None:
        """A config started but its row never came: record it failed (unless the sweep
        was interrupted: then it is left for --resume, as a SIGTERM leaves it)."""
        gc = self.suite.by_id().get(cid)
        if gc is None or self.interrupted:
            return
        self.record({"key": gc.spec.key, "config": gc.config, "metrics": {}, "series": {},
                     "violations": {}, "violation_samples": [], "status": "failed", "verdict": "failed",
                     "test_id": cid, "error": error, "reasons": ["worker died"],
                     "suite": self.suite.name, "run_id": self.run_dir.run_id})

    def interrupt(self) -> None:
        self.interrupted = True

    def record(self, row: dict[str, Any]) -> None:
        self.finished.add(row.get("test_id"))
        try:
            self.writer.record(row)
        except ResultWriteError as err:
            # Every config after it would be lost the same way: stop the grid now.
            self.write_error = str(err)
            pytest.exit(f"kvbench: result not written: {err}", returncode=WRITE_FAILED)
        self.written += 1
        if self.display is not None:
            self.display.row(row)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo) -> None:
        # pytest's own stops arrive as KeyboardInterrupt subclasses: collection errors,
        # xdist's crashed workers or -x; the message says which.
        self.stop_reason = str(excinfo.value).strip() or excinfo.typename

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        try:
            self._sessionfinish(session)
        finally:
            # Every row is on disk; an interrupted sweep leaves the uploads not yet made to --resume or sync.
            self.writer.finish_uploads(drain=not self.interrupted)

    def _sessionfinish(self, session: pytest.Session) -> None:
        if self.write_error is not None:
            session.exitstatus = WRITE_FAILED
            return
        if session.exitstatus in (0, 1):  # ran to the end: a started config without a row lost its worker
            for cid in sorted(self.started - self.finished):
                try:
                    self.lost(cid, WORKER_DIED)
                except pytest.exit.Exception:  # the disk is full: the rest stay undone
                    session.exitstatus = WRITE_FAILED
                    return
        if self.owns_parent:
            self.writer.finish_uploads()  # before the parent closes: its children are all in
            # A pytest run that created its own parent run closes it, as kvbench sweep does:
            # upload what could not be logged, then mark the parent finished.
            rows = load_rows(self.run_dir.path)
            plots = write_run_plots(rows, self.run_dir, print)  # on the parent run too, as kvbench sweep does
            note = finish_mlflow(self.run_dir, self.run_dir.meta(), rows, plots, results_root(), print)
            print(f"\nkvbench: {note}")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.writer.finish_uploads(drain=not self.interrupted)  # pytest stopped before sessionfinish
        if self.lock is not None:
            self.lock.release()
        if self.tmp is not None and not self.owns_parent:
            shutil.rmtree(self.tmp, ignore_errors=True)
