"""kvbench sync RUN: upload the configs of a run that MLflow does not have yet."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sync", help="upload a run's missing configs to MLflow (idempotent)")
    p.add_argument("run", help="run id or run directory")
    p.add_argument("--mlflow-uri", metavar="URI", help="tracking server (default: the one the sweep used)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.mlflow_log import sync
    from harness.results import open_run_dir, results_root

    run_dir = open_run_dir(args.run)
    uploaded, present = sync(run_dir, args.mlflow_uri, root=results_root())
    meta = run_dir.meta()
    print(f"synced run {run_dir.run_id} to {meta['mlflow_uri']}: {uploaded} uploaded, {present} already there "
          f"(parent run {meta['mlflow_parent']})")
    return 0
