"""kvbench ui: the MLflow UI on the local store under results/, and where to look in it."""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from harness.core.causes import one_line
from harness.store.results import results_root
from harness.view.mlflow_log import client
from harness.view.mlflow_views import install_view, runs_query
from harness.view.mlflow_store import MlflowUnavailable, artifact_location, default_uri


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ui", help="start the MLflow UI on the local results store")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5000)
    p.set_defaults(func=run)


def runs_urls(base: str, uri: str) -> list[tuple[str, str]]:
    """(experiment, URL of its runs view) for every kvbench experiment in the store.

    The runs view in the model-training mode, not the experiment's landing page:
    MLflow 3 lands on its GenAI pages, where a sweep's runs and charts are not; and on
    kvbench's headline view (columns and first charts, harness/view/mlflow_views.py)."""

    cl = client(uri)
    experiments = cl.search_experiments(filter_string="name LIKE 'kvbench-%'")
    for e in experiments:  # a store from before the headline view gets it (mlflow_views.py)
        install_view(cl, e)
    return [(e.name, f"{base}/#/experiments/{e.experiment_id}/runs?{runs_query()}")
            for e in sorted(experiments, key=lambda e: e.name)]


def _check_bind(host: str, port: int, error: type[Exception]) -> None:
    """Refuse, in one line, a host that does not resolve or an address already taken:
    the MLflow server logs such a failure and exits 0 (after up to a minute), so the
    command would look as if it had served."""

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError):
        raise error(f"--host {host!r} is not a host name or address this machine resolves") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as probe:
        try:
            probe.bind(addr)
        except OSError as err:
            raise error(f"--host {host} --port {port} cannot be served ({err.strerror}); "
                        "pick another --port or stop what listens there") from None


def run(args: argparse.Namespace) -> int:
    root = results_root()
    if not (root / "mlflow.db").exists():
        raise MlflowUnavailable(f"no local MLflow store at {root / 'mlflow.db'}: run kvbench sweep first")
    if not 1 <= args.port <= 65535:
        raise MlflowUnavailable(f"--port must be in 1..65535 (got {args.port})")
    _check_bind(args.host, args.port, MlflowUnavailable)
    exe = shutil.which("mlflow", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if exe is None:
        raise MlflowUnavailable("the mlflow executable is not installed (pip install 'kvbench[harness]')")
    uri = default_uri(root)
    base = f"http://{args.host}:{args.port}"
    cmd = [exe, "ui", "--backend-store-uri", uri, "--default-artifact-root",
           artifact_location(root), "--host", args.host, "--port", str(args.port),
           "--workers", "1"]  # one user: one worker starts in a fraction of the time four take
    try:
        urls = runs_urls(base, uri)
    except MlflowUnavailable:
        raise
    except Exception as err:  # a damaged store: MLflow's own error, as one line

        raise MlflowUnavailable(f"the MLflow store {uri} cannot be read: {one_line(err)}") from None
    print(f"starting the MLflow UI on {base} ({uri}); its links follow once it answers", flush=True)
    # The server's job runner (a dozen huey processes) serves GenAI judges and prompt
    # jobs, none of which a sweep has; without it the UI starts sooner and stops cleanly.
    env = dict(os.environ)
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    proc = subprocess.Popen(cmd, env=env)
    try:
        # A link printed before the server listens is a "connection refused" (it took
        # about 40 s on a loaded machine): the links come once /health answers.
        if wait_ready(base, proc):
            print(f"MLflow UI on {base}")
            for name, url in urls:
                print(f"  {name}: {url}")
            if not urls:
                print(f"  no kvbench experiment yet: {base}")
            sys.stdout.flush()
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()


def wait_ready(base: str, proc, poll_s: float = 0.5) -> bool:
    """Poll the server's /health until it answers 200; False when the server exited first."""

    while proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(poll_s)
    return False
