"""sync into a store that cannot be written is the one-line error alone (N16): MLflow's
store logged the database error with its traceback above kvbench's line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from test_faults_trust import make_run

MAIN = "import sys; from harness.cli import main; sys.exit(main(sys.argv[1:]))"


def _kvbench(root, *argv) -> subprocess.CompletedProcess:
    env = {**os.environ, "KVBENCH_RESULTS": str(root)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([sys.executable, "-c", MAIN, *argv], env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)


def test_sync_into_a_read_only_store_is_one_line(tmp_path):
    root = tmp_path / "results"
    make_run(root)
    store = f"sqlite:///{root / 'm.db'}"
    first = _kvbench(root, "sync", "art", "--mlflow-uri", store)
    assert first.returncode == 0, first.stderr
    make_run(root, "art2")  # a second run: sync must write to the store
    # Immutable, so even root cannot write it (a chmod does not stop root).
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", root / "m.db"],
                                                        capture_output=True).returncode != 0:
        pytest.skip("cannot make the store read-only here (chattr +i needs root on a supporting filesystem)")
    try:
        proc = _kvbench(root, "sync", "art2", "--mlflow-uri", store)
    finally:
        subprocess.run(["chattr", "-i", root / "m.db"], check=True)
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(err) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert err[0].startswith("kvbench: error: MLflow")
