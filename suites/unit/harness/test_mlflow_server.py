"""The remote path against a real `mlflow server` on loopback (not a mock).

A sweep logs to the server; the server is stopped midway; the sweep still
finishes with every row on disk; after a restart `kvbench sync` uploads exactly
what is missing, so every config is in MLflow exactly once.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from harness.store.results import RunDir, load_rows

from test_sweep_e2e import SUITE, children_per_key, mlflow_runs

SEEDS = 3
N_CONFIGS = 4 * SEEDS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, root: Path, port: int):
        self.root, self.port, self.proc = root, port, None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        exe = Path(sys.executable).parent / "mlflow"
        cmd = [str(exe), "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
               "--backend-store-uri", f"sqlite:///{self.root / 'server.db'}",
               "--artifacts-destination", str(self.root / "server-artifacts")]
        log = (self.root / "server.log").open("ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        end = time.time() + 120
        while time.time() < end:
            if self.proc.poll() is not None:
                pytest.fail(f"mlflow server exited: {(self.root / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        pytest.fail("mlflow server did not come up in 120 s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture
def server(tmp_path: Path):
    srv = Server(tmp_path, free_port())
    yield srv
    srv.stop()


@pytest.mark.slow
def test_server_stopped_midway_then_sync_after_restart(results_root, tmp_path, server, cli, capsys):
    suite = tmp_path / "e2e.toml"
    suite.write_text(SUITE.replace("seed = [1, 2]", f"seed = {list(range(1, SEEDS + 1))}"))
    server.start()
    env = dict(os.environ, KVBENCH_RESULTS=str(results_root))
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "sweep", str(suite), "--run-id", "r1", "-j", "1",
                             "--mlflow-uri", server.uri], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    run = RunDir(results_root / "runs" / "r1")
    end = time.time() + 300
    while len(run.logged_keys()) < 2:  # some configs reached the server
        assert proc.poll() is None, proc.stdout.read()
        assert time.time() < end, "no config reached the server"
        time.sleep(0.05)
    server.stop()
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    rows = load_rows(run.path)
    assert len(rows) == N_CONFIGS  # nothing lost while the server was down
    logged = len(run.logged_keys())
    assert 2 <= logged < N_CONFIGS, "the server must have gone away midway"
    assert "kvbench sync r1" in out

    server.start()
    assert cli("sync", "r1", "--mlflow-uri", server.uri) == 0  # sync goes where the user says, never meta.json's
    said = capsys.readouterr().out
    assert f"{N_CONFIGS - logged} uploaded, {logged} already there" in said
    per_key = children_per_key(mlflow_runs(server.uri, "e2e"), "r1")
    assert len(per_key) == N_CONFIGS and set(per_key.values()) == {1}
    assert run.logged_keys() == {r["key"] for r in rows}
