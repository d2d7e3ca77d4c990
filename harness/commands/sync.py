"""kvbench sync RUN: upload the configs of a run that MLflow does not have yet, then
close the sweep's parent run with its aggregates and plots."""

from __future__ import annotations

import argparse
import sys
import tempfile

from harness.store.results import ResultsError, load_rows, open_run_dir, results_root
from harness.store.run_files import copy_run_files
from harness.view.mlflow_log import finish_parent, sync
from harness.view.mlflow_store import tracking_uri, unreachable


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sync", help="upload a run's missing configs to MLflow (idempotent) and close its parent run")
    p.add_argument("run", help="run id or run directory")
    p.add_argument("--mlflow-uri", metavar="URI", help="tracking server (default: $MLFLOW_TRACKING_URI, else the local store "
                                                      "under the results root; never the one meta.json names)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.grid.lifecycle import write_run_plots  # pydantic: only this command loads it, not the parser

    run_dir = open_run_dir(args.run)
    uri = tracking_uri(args.mlflow_uri, results_root())
    with tempfile.TemporaryDirectory(prefix="kvbench-sync-") as tmp:
        # The run directory may be another's (a rerun's artifact): its plots are copied out
        # under the run-file rule (no link followed, no FIFO or device opened) before anything
        # is uploaded, and MLflow, which opens what it is given, gets only the copies.
        plots = copy_run_files(run_dir.path, "plots", ".png", tmp, "plot", ResultsError)
        # Which store it is: named on the result line, and in every error (one line each).
        uploaded, present = sync(run_dir, uri, root=results_root())
        meta = run_dir.meta()
        rows = load_rows(run_dir.path)
        # New plots when the sweep died before drawing them.
        plots = plots or write_run_plots(rows, run_dir, lambda m: print(m, file=sys.stderr))
        try:
            # A sweep that stopped before every config ran is not FINISHED (that says every
            # config ran as expected): KILLED until a --resume and a later sync close it again.
            # A shard's share or the reference engine's configs ("planned") are what it set out to run.
            expected = meta.get("planned", meta.get("configs"))
            short = isinstance(expected, int) and not meta.get("filter") and len(rows) < expected
            status = finish_parent(uri, meta["mlflow_parent"], rows, plots, status="KILLED" if short else None)
        except Exception as err:
            raise unreachable(uri, err) from None
    print(f"synced run {run_dir.run_id} to {uri}: {uploaded} uploaded, {present} already there "
          f"(parent run {meta['mlflow_parent']}, {status}, {len(plots)} plots)")
    return 0
