"""MLflow logging of a sweep: one experiment per suite, a parent run per sweep, a
nested run per config.

results.jsonl stays the truth. MLflow is a view that may lag: a config is logged
after its row is on disk; a failure to reach the server only leaves the config
unlogged, and `kvbench sync` (or the end of the sweep) uploads what is missing.
Logging is idempotent: every child run carries the sweep's run id and a hash of
the config key as tags, so a config already in MLflow is never logged twice, and
a half-logged child (the process died mid-upload) is deleted and logged again.
Where the store lives and the checks before a client reaches it: mlflow_store.py.
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
import time
from pathlib import Path
from typing import Any

from harness.core.causes import one_line
from harness.core.run_tags import experiment_suffix
from harness.core.run_names import short_name
from harness.store.locks import store_lock
from harness.store.results import load_rows
from harness.view import mlflow_layout as layout
from harness.view.mlflow_views import install_view, view_tags
from harness.view.series_svg import series_svg
from harness.view.mlflow_store import (MlflowUnavailable, artifact_location, check_local_store, quiet_client_env,
                                       tracking_uri, unreachable)
from mini_engine.errors import KVBenchError

# MLflow 3 opens an experiment of unknown kind on its GenAI pages; a sweep is runs and
# their metrics, so the experiment says it is a model-development one.
EXPERIMENT_KIND, RUNS_KIND = "mlflow.experimentKind", "custom_model_development"
PARAM_CHARS = 500


def experiment_name(suite: str, suffix: str = "") -> str:
    return f"kvbench-{suite}{suffix}"


def experiment_for(meta: dict[str, Any]) -> str:
    """A sweep's experiment: its suite's, or the suite's PR one for a pull request's rerun."""
    return experiment_name(meta["suite"], experiment_suffix(meta))


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:20]


def client(uri: str):
    check_local_store(uri)
    quiet_client_env()
    from mlflow import MlflowClient  # mlflow: optional, loaded only on this path

    # Its store logs a database error with the full traceback, then raises it; kvbench
    # says the raised error in one line (a read-only store printed pages above it).
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    return MlflowClient(tracking_uri=uri)


# Runners that start together on a fresh server all find no experiment and all create
# it; the losers are told it already exists and read the winner's (a few tries: the
# winner's row may not be visible yet to the server worker a loser reaches).
CREATE_TRIES = 5


def already_exists(err: BaseException) -> bool:
    """MLflow's answer to creating a name another client created first (local or REST)."""
    return getattr(err, "error_code", None) == "RESOURCE_ALREADY_EXISTS"


def ensure_experiment(cl, name: str, uri: str, root: Path, description: str = "") -> str:
    """The experiment id, creating it (and, for a fresh sqlite store, the schema), with
    ``description`` (the suite's, and how to read its runs) as its note. Create-or-get:
    losing the race to create it to another runner reads the one that runner made."""
    note = experiment_note(description) if description else ""
    location = artifact_location(root) if uri.startswith("sqlite:") else None
    tags = {EXPERIMENT_KIND: RUNS_KIND, **({NOTE: note} if note else {}), **view_tags()}
    try:
        for attempt in range(CREATE_TRIES):
            exp = cl.get_experiment_by_name(name)
            if exp is not None:
                _update_experiment_tags(cl, exp, note)
                return exp.experiment_id
            try:
                return cl.create_experiment(name, artifact_location=location, tags=tags)
            except Exception as err:
                if not already_exists(err) or attempt == CREATE_TRIES - 1:
                    raise
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable: the last try raises or returns")
    except Exception as err:
        raise unreachable(uri, err) from None


def _update_experiment_tags(cl, exp, note: str) -> None:
    if exp.tags.get(EXPERIMENT_KIND) != RUNS_KIND:
        cl.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND, RUNS_KIND)
    if note and exp.tags.get(NOTE) != note:
        cl.set_experiment_tag(exp.experiment_id, NOTE, note)
    install_view(cl, exp)  # the headline view its links open (mlflow_views.py)


def git_commit(cwd: Path | None = None) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def find_parent(cl, exp_id: str, run_id: str) -> str | None:
    runs = cl.search_runs([exp_id], filter_string=f"tags.`kvbench.run` = '{run_id}' and tags.`kvbench.role` = 'parent'")
    return runs[0].info.run_id if runs else None


def ensure_parent(cl, exp_id: str, run_id: str, meta: dict[str, Any]) -> str:
    """The sweep's parent run: found by tag (a resumed sweep keeps its parent) or created."""
    found = find_parent(cl, exp_id, run_id)
    if found:
        return found
    tags = {
        "kvbench.run": run_id,
        "kvbench.role": "parent",
        "kvbench.suite": meta.get("suite", ""),
        "kvbench.suite_hash": meta.get("suite_hash", ""),
        **layout.context_tags(meta),
        "mlflow.note.content": f"Sweep {run_id} of suite {meta.get('suite', '')}: one nested run per config. "
                               "What each metric is: metrics.md in the artifacts.",
    }
    created = meta.get("created")
    run = cl.create_run(exp_id, tags=tags, run_name=run_id,
                        start_time=int(created * 1000) if isinstance(created, (int, float)) else None)
    params = {"suite": meta.get("suite", ""), "configs": meta.get("configs", 0), "jobs": meta.get("jobs", 1),
              "filter": meta.get("filter") or "none", "repeat": meta.get("repeat", 1)}
    from mlflow.entities import Param  # mlflow: optional, loaded only on this path

    cl.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()])
    cl.log_text(run.info.run_id, layout.schema_note(), "metrics.md")  # MLflow has no metric descriptions
    return run.info.run_id


def _children(cl, exp_id: str, run_id: str, key: str):
    filt = f"tags.`kvbench.run` = '{run_id}' and tags.`kvbench.key_hash` = '{key_hash(key)}'"
    return list(cl.search_runs([exp_id], filter_string=filt))


def context_of(cl, parent_id: str) -> dict[str, str]:
    """The parent's context tags, which every config run of the sweep repeats."""
    tags = cl.get_run(parent_id).data.tags
    return {k: tags[k] for k in layout.CONTEXT_TAGS if k in tags}


def run_times(row: dict[str, Any]) -> tuple[int, int]:
    """(start, end) in ms of the config's engine runs, as measured; a row from before
    they were recorded ends when it was judged and starts its wall time earlier."""
    end = row.get("finished_at")
    end = float(end) if isinstance(end, (int, float)) else time.time()
    start = row.get("started_at")
    if not isinstance(start, (int, float)):
        wall = (row.get("metrics") or {}).get("wall_s")
        start = end - (float(wall) * (row.get("repeat") or 1) if isinstance(wall, (int, float)) else 0.0)
    return int(float(start) * 1000), int(end * 1000)


def all_children(cl, exp_id: str, run_id: str) -> dict[str, list[Any]]:
    """Every config run of a sweep, by key hash (one query per 1000 runs)."""
    out: dict[str, list[Any]] = {}
    token = None
    filt = f"tags.`kvbench.run` = '{run_id}' and tags.`kvbench.role` = 'config'"
    while True:
        page = cl.search_runs([exp_id], filter_string=filt, max_results=1000, page_token=token)
        for r in page:
            out.setdefault(r.data.tags.get("kvbench.key_hash", ""), []).append(r)
        token = page.token
        if not token:
            return out


NOTE = "mlflow.note.content"  # the description MLflow shows on an experiment's page


def experiment_note(description: str) -> str:
    return (f"{description}\n\nOne parent run per sweep (tag `kvbench.compare`: regressed, changed, improved or "
            "clean against the baseline and the previous run; `compare/` holds the table and the HTML report), "
            "one nested run per config, named by the axes it varies. Memory is in token slots and KV bytes "
            "(`at a glance/peak_tokens_held`, `memory/peak_kv_bytes_held`); pages are not comparable across page "
            "sizes. A config run opens on its section `at a glance`: peak token slots held, peak stranded and "
            "leaked slots, and `verdict_pass` (1 when it ran as the suite expects).")


def log_row(cl, exp_id: str, parent_id: str, run_id: str, row: dict[str, Any], name: str,
            existing: list[Any] | None = None, context: dict[str, str] | None = None) -> bool:
    """Log one config as a nested run; False when it was already there.

    ``existing``: the runs already logged for this key, when the caller searched in bulk;
    ``context``: the parent's context tags, when the caller read them once."""
    from mlflow.entities import Metric, Param, RunStatus  # mlflow: optional, loaded only on this path

    key = row["key"]
    if existing is None:
        existing = _children(cl, exp_id, run_id, key)
    for old in existing:
        if old.info.status == "FINISHED":
            return False
        cl.delete_run(old.info.run_id)  # a half-logged child from a killed process
    tags = {**layout.headline_tags(row), "mlflow.parentRunId": parent_id, "kvbench.run": run_id, "kvbench.key": key[:5000],
            "kvbench.key_hash": key_hash(key), "kvbench.status": str(row.get("status")),
            "kvbench.verdict": str(row.get("verdict")), "kvbench.role": "config",
            **(context_of(cl, parent_id) if context is None else context), **layout.config_tags(row)}
    start, end = run_times(row)

    tags["kvbench.test_id"] = name[:5000]
    # the runs table cuts long names to one prefix
    child = cl.create_run(exp_id, tags=tags, run_name=short_name(name), start_time=start)
    cid = child.info.run_id
    # Which engine ran it (the mini engine's rows hold no engine option) and, for SGLang's loop, its release.
    given = {"engine": row.get("engine", "mini"), **({"sglang_version": row["sglang_version"]} if row.get("sglang_version") else {}),
             **(row.get("config") or {})}
    params = [Param(k, ("none" if v is None else str(v))[:PARAM_CHARS]) for k, v in sorted(given.items())]
    metrics = [Metric(k, v, end, 0) for k, v in layout.scalar_metrics(row).items()]
    metrics += [Metric(k, v, end, step) for k, step, v in layout.series_metrics(row)]
    # As few calls as MLflow's batch limits allow (100 params, 1000 metrics a call): each
    # is a store transaction, and a config's upload was a dozen of them.
    for i in range(max(-(-len(params) // 100), -(-len(metrics) // 1000), 1)):
        cl.log_batch(cid, params=params[100 * i:100 * (i + 1)], metrics=metrics[1000 * i:1000 * (i + 1)])
    cl.log_dict(cid, row, "row.json")
    chart = series_svg(row)
    if chart is not None:
        cl.log_text(cid, chart, "series.svg")  # MLflow previews it as an image
    cl.set_terminated(cid, RunStatus.to_string(RunStatus.FINISHED), end_time=end)
    return True


class Logger:
    """What the sweep's controller (the single writer) uses: log rows of one sweep, never raising.

    After a failure the logger stays quiet for a while, so an unreachable server
    costs one timeout, not one per config; the rows stay pending for sync."""

    BACKOFF_S = 60.0

    def __init__(self, uri: str, suite: str, run_id: str, parent_id: str | None, root: Path,
                 experiment: str | None = None):
        self.uri, self.suite, self.run_id, self.parent_id, self.root = uri, suite, run_id, parent_id, root
        self.experiment = experiment or experiment_name(suite)
        self._cl = None
        self._exp: str | None = None
        self._context: dict[str, str] | None = None
        self._down_until = 0.0
        self.last_error: str | None = None

    def log(self, row: dict[str, Any], name: str) -> bool:
        """True when the row is in MLflow after the call."""
        if self.parent_id is None or time.monotonic() < self._down_until:
            return False
        attempts = 3 if self.uri.startswith("sqlite:") else 1  # sqlite: another sweep on the store may hold its lock
        for attempt in range(attempts):
            try:
                if self._cl is None:
                    self._cl = client(self.uri)
                    self._exp = ensure_experiment(self._cl, self.experiment, self.uri, self.root)
                if self._context is None:
                    self._context = context_of(self._cl, self.parent_id)
                # The controller is the first to log a key (done keys are deselected
                # before a config runs), so the search for an earlier child is only needed on a retry.
                log_row(self._cl, self._exp, self.parent_id, self.run_id, row, name,
                        existing=[] if attempt == 0 else None, context=self._context)
                return True
            except Exception as err:
                self.last_error = one_line(err)
                time.sleep(0.2 * (attempt + 1))
        self._down_until = time.monotonic() + self.BACKOFF_S
        return False


def sync(run_dir, uri: str | None = None, *, root: Path) -> tuple[int, int]:
    """Upload every row of a run that MLflow does not have; (uploaded, already there)."""

    meta = run_dir.meta()
    if not meta:
        raise KVBenchError(f"{run_dir.path} has no meta.json: not a sweep run directory")
    # The destination is the user's choice alone (option, environment, local store):
    # meta.json came with the run directory, which may be another's (a rerun's artifact),
    # and a server named there would receive the upload and the environment's credentials.
    uri = tracking_uri(uri, root)

    # A sync may be the first to open a local store (the sweep ran without MLflow):
    # create and migrate it under the same lock as a sweep does.
    lock = store_lock(uri)
    try:
        try:
            cl = client(uri)
        except MlflowUnavailable:
            raise
        except Exception as err:  # a damaged or unreadable sqlite file fails here, not on a call
            raise MlflowUnavailable(f"MLflow store at {uri} cannot be opened: {one_line(err)}") from None
        exp = ensure_experiment(cl, experiment_for(meta), uri, root)
    finally:
        if lock is not None:
            lock.release()
    try:
        parent = ensure_parent(cl, exp, run_dir.run_id, meta)
    except Exception as err:
        raise unreachable(uri, err) from None
    if meta.get("mlflow_parent") != parent or meta.get("mlflow_uri") != uri or meta.get("mlflow_experiment") != exp:
        if meta.get("mlflow_uri") != uri:
            run_dir.reset_logged()  # what was logged went to another store
        meta.update(mlflow_parent=parent, mlflow_uri=uri, mlflow_experiment=exp)  # the run's link (store/links.py)
        run_dir.write_meta(meta)
    logged = run_dir.logged_keys()
    uploaded = present = 0
    try:
        children = all_children(cl, exp, run_dir.run_id)
        context = context_of(cl, parent)
    except Exception as err:
        raise unreachable(uri, err) from None
    for row in load_rows(run_dir.path):
        try:
            known = children.get(key_hash(row["key"]), [])
            if log_row(cl, exp, parent, run_dir.run_id, row, row.get("test_id") or row["key"], known, context):
                uploaded += 1
            else:
                present += 1
        except Exception as err:
            raise MlflowUnavailable(
                f"MLflow at {uri} failed after {uploaded} uploads: {one_line(err)}; run kvbench sync again"
            ) from None
        if row["key"] not in logged:
            run_dir.mark_logged(row["key"])
    return uploaded, present


def finish_parent(uri: str, parent_id: str, rows: list[dict[str, Any]], artifacts: list[Path],
                  status: str | None = None) -> str:
    """Close the sweep's parent run: its headline (logged first), verdict counts and
    per-axis aggregates as metrics, its plots, the profiles it swept; FINISHED when
    every config ran as expected, else FAILED (or ``status``). Closing again (a later sync) updates it."""
    stop_system_metrics(parent_id)
    cl = client(uri)
    from mlflow.entities import Metric, RunTag  # mlflow: optional, loaded only on this path

    now = int(time.time() * 1000)
    figures = {**layout.sweep_headline(rows), **layout.verdict_metrics(rows), **layout.sweep_aggregates(rows)}
    metrics = [Metric(k, float(v), now, 0) for k, v in figures.items()]
    for i in range(0, len(metrics), 1000):
        cl.log_batch(parent_id, metrics=metrics[i:i + 1000])
    cl.log_batch(parent_id, tags=[RunTag("profile", layout.profiles(rows))])
    for path in artifacts:
        cl.log_artifact(parent_id, str(path), artifact_path="plots")
    status = status or layout.parent_status(rows)
    ends = [r["finished_at"] for r in rows if isinstance(r.get("finished_at"), (int, float))]
    cl.set_terminated(parent_id, status, end_time=int(max(ends) * 1000) if ends else now)
    return status


_MONITORS: dict[str, Any] = {}


def start_system_metrics(uri: str | None, parent_id: str | None) -> None:
    """CPU, memory, disk, network (psutil) and GPU (NVML, where there is one) figures
    of the machine, sampled on the parent run while the sweep runs (MLflow's
    ``system/`` section); finish_parent stops them. Never fails a sweep."""
    if not uri or not parent_id or parent_id in _MONITORS:
        return
    try:
        quiet_client_env()
        # mlflow: optional, loaded only on this path
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        monitor = SystemMetricsMonitor(parent_id, tracking_uri=uri)
        monitor.start()
        _MONITORS[parent_id] = monitor
    except Exception:  # psutil missing, an old MLflow: the sweep goes on without them
        return


def stop_system_metrics(parent_id: str) -> None:
    monitor = _MONITORS.pop(parent_id, None)
    if monitor is not None:
        try:
            monitor.finish()
        except Exception:
            pass
