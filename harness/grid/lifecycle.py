"""A sweep's run lifecycle around the configs: set the run up once before any worker
(meta.json, the MLflow store and parent run), and afterwards the plots and the MLflow
uploads that failed, then the parent run closed.

Both `kvbench sweep` (harness.grid.sweep) and a plain `pytest suites/grid` (the grid plugin's
controller) run it, so it lives apart from both: neither imports the other.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from harness.core.causes import one_line
from harness.core.run_tags import ci_context
from harness.grid.suites import SUITES_DIR, Suite
from harness.run import hardware
from harness.store.locks import store_lock
from harness.store.results import RunDir, check_store_root, results_root
from harness.view.mlflow_log import (
    client,
    ensure_experiment,
    ensure_parent,
    experiment_for,
    finish_parent,
    git_commit,
    sync,
)
from harness.view.mlflow_store import tracking_uri

PROJECT = SUITES_DIR.parent


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
        # who made it (runner, trigger, CI run, PR): kept from the first start, as the commit is
        ci=meta.get("ci") or ci_context(os.environ),
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
            exp = ensure_experiment(cl, experiment_for(meta), uri, root, suite.description)
            meta["mlflow_parent"] = ensure_parent(cl, exp, run_dir.run_id, meta)
            meta["mlflow_experiment"] = exp
        except Exception as err:
            meta["mlflow_parent"] = None
            warn(f"kvbench: warning: {one_line(err)}; "
                 f"results stay in {run_dir.path}, upload them later with {sync_hint(run_dir, uri, root)}")
        finally:
            if lock is not None:
                lock.release()
    run_dir.write_meta(meta)
    return meta



def sync_hint(run_dir: RunDir, uri: str, root: Path) -> str:
    """The sync command that reaches this sweep's store: sync never reads it from meta.json."""
    same = uri == tracking_uri(None, root)
    return f"kvbench sync {run_dir.run_id}" + ("" if same else f" --mlflow-uri {uri}")



def write_run_plots(rows: list[dict[str, Any]], run_dir: RunDir, warn) -> list[Path]:
    try:
        from harness.view.plots import write_plots  # numpy: optional, loaded only on this path

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
        return (f"MLflow: {missing} config(s) not uploaded yet; run {sync_hint(run_dir, uri, root)}" if missing
                else f"MLflow: every config is uploaded but the parent run was not closed ({uri})")
    return f"MLflow: {uri} experiment {experiment_for(meta)}, parent run {meta['mlflow_parent']}"
