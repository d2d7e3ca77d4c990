"""The kvbench entry point itself: --version, a closed pipe, error lines that keep their cause."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from harness.core.causes import one_line
from harness.store.results import RunDir, append_row

REPO = Path(__file__).resolve().parents[3]
KVBENCH = [sys.executable, "-m", "harness.cli"]


def _env(root: Path) -> dict:
    import os

    return {**os.environ, "KVBENCH_RESULTS": str(root), "PYTHONPATH": str(REPO)}


def test_version_is_the_project_version(tmp_path):
    want = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    out = subprocess.run([*KVBENCH, "--version"], capture_output=True, text=True, timeout=60, env=_env(tmp_path))
    assert out.returncode == 0 and out.stdout.strip() == f"kvbench {want}"


def _big_run(root: Path, name: str) -> RunDir:
    run = RunDir(root / "runs" / name)
    run.path.mkdir(parents=True)
    run.write_meta({"suite": "s", "hardware": {"profile": "cpu"}})
    for i in range(400):  # ~100 kB of --all table: more than a pipe buffer holds
        append_row(run.results, {"key": f"spec=none,ps={i}", "suite": "s", "status": "ok", "violations": {},
                                 "metrics": {"steps": i, "leaked_pages": 0, "peak_pages_held": 3 * i}})
    return run


def test_a_closed_pipe_ends_quietly(tmp_path):
    root = tmp_path / "results"
    _big_run(root, "a"), _big_run(root, "b")
    proc = subprocess.Popen([*KVBENCH, "compare", "a", "b", "--all"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_env(root))
    first = proc.stdout.readline()  # `| head -1`: read a line, then go away
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert first.startswith(b"kvbench compare b against a")
    assert err == "", err  # no BrokenPipeError traceback, no "Exception ignored" line
    # The same command with a reader that stays prints everything and exits 0.
    out = subprocess.run([*KVBENCH, "compare", "a", "b", "--all"], capture_output=True, text=True,
                         timeout=120, env=_env(root))
    assert out.returncode == 0 and "400 configs compared" in out.stdout


def test_a_long_error_keeps_its_cause():
    cause = "Failed to establish a new connection: [Errno 111] Connection refused"
    err = RuntimeError("API request to http://h:9/api/2.0/mlflow/experiments/get-by-name failed: "
                       + "Max retries exceeded with url: /" + "x" * 500 + f" (Caused by NewConnectionError({cause}))")
    line = one_line(err)
    assert len(line) <= 400 and "\n" not in line
    assert line.startswith("RuntimeError: API request to") and cause in line
    try:
        try:
            raise OSError("[Errno 111] Connection refused")
        except OSError as inner:
            raise RuntimeError("upload failed") from inner
    except RuntimeError as outer:
        assert one_line(outer) == "RuntimeError: upload failed (caused by OSError: [Errno 111] Connection refused)"
    assert one_line(ValueError("two\nlines")) == "ValueError: two lines"


def test_mlflow_unreachable_line_names_the_refused_connection(tmp_path):
    root = tmp_path / "results"
    _big_run(root, "a")
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    out = subprocess.run([*KVBENCH, "sync", "a", "--mlflow-uri", "http://127.0.0.1:9"], capture_output=True,
                         text=True, timeout=120, env=_env(root))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot be reached" in lines[0]
    assert "Connection refused" in lines[0] or "Errno" in lines[0]
