"""kvbench ui: the MLflow UI on the local store under results/."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ui", help="start the MLflow UI on the local results store")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5000)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from harness.mlflow_log import MlflowUnavailable, artifact_location, default_uri
    from harness.results import results_root

    root = results_root()
    if not (root / "mlflow.db").exists():
        raise MlflowUnavailable(f"no local MLflow store at {root / 'mlflow.db'}: run kvbench sweep first")
    if not 1 <= args.port <= 65535:
        raise MlflowUnavailable(f"--port must be in 1..65535 (got {args.port})")
    exe = shutil.which("mlflow", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if exe is None:
        raise MlflowUnavailable("the mlflow executable is not installed (pip install mlflow)")
    cmd = [exe, "ui", "--backend-store-uri", default_uri(root), "--default-artifact-root",
           artifact_location(root), "--host", args.host, "--port", str(args.port)]
    print(f"MLflow UI on http://{args.host}:{args.port} ({default_uri(root)})")
    return subprocess.call(cmd)
