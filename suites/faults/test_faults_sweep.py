"""A sweep's run directory and store under concurrent users, a full disk and a
read-only root: one clear line, the right exit, no row lost or doubled."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import time
from pathlib import Path

import pytest

from faultkit import REPO, finish, start


def rows_of(run: Path) -> list[dict]:
    path = run / "results.jsonl"
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def limit_file_size(limit: int):
    # `ulimit -f`: a write past `limit` bytes of one file fails with EFBIG (Python
    # ignores SIGXFSZ), as a full disk fails with ENOSPC.
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_full_disk_then_concurrent_resumes_lose_and_double_nothing(results_root, tiny, cli):
    run = results_root / "runs" / "full"
    # 1500 bytes: meta.json (~700) fits, a result row (~2 KB) does not.
    code, out, err = finish(start(results_root, "sweep", tiny, "--no-mlflow", "--run-id", "full",
                                  preexec_fn=limit_file_size(1500)))
    assert code == 2, out + err
    assert "a result could not be written" in one_line(err) and "--resume full" in err
    assert rows_of(run) == []  # whole rows only, and no "worker died" row for a config that ran
    assert "worker died" not in (run / "results.jsonl").read_text() if (run / "results.jsonl").exists() else True

    # A live sweep owns the run: a resume refuses in one line and writes nothing.
    from harness.store.locks import run_lock

    with run_lock(run).acquire(purpose="a test standing for a live sweep"):
        assert cli("sweep", tiny, "--no-mlflow", "--resume", "full") == 2
    # (the in-process refusal is checked for its line below, with a real process)

    # A killed sweep's note stays in the lock file; the next owner says it takes over.
    (run / "lock").write_text(json.dumps({"pid": dead_pid(), "host": socket.gethostname(), "since": time.time()}))
    first = start(results_root, "sweep", tiny, "--no-mlflow", "--resume", "full")
    while first.poll() is None and str(first.pid) not in (run / "lock").read_text():
        time.sleep(0.05)  # until the first resume holds the run
    second = start(results_root, "sweep", tiny, "--no-mlflow", "--resume", "full")
    results = [finish(first), finish(second)]
    assert results[0][0] == 0, results[0]
    assert "taking over the lock of run full left by pid" in results[0][2]
    code, out, err = results[1]
    if code == 2:  # it met the first one running
        assert "run full is in use by pid" in one_line(err)
    else:  # the first had finished already: nothing was left to run
        assert code == 0, (out, err)
    rows = rows_of(run)
    assert sorted(r["test_id"] for r in rows) == ["ps:1", "ps:16"]  # each config once
    assert all(r["verdict"] == "ok" for r in rows)
    assert (run / "lock").read_text() == ""  # released cleanly


def test_a_config_that_kills_its_worker_is_recorded_failed_and_the_sweep_goes_on(results_root, tiny):
    # killworker (a -p plugin, through PYTEST_ADDOPTS as a user's own options would come):
    # the worker running ps:16 dies by SIGKILL; xdist reports the crash to the controller.
    faults = Path(__file__).resolve().parent
    env = {"PYTEST_ADDOPTS": "-p killworker", "PYTHONPATH": f"{REPO}{os.pathsep}{faults}"}
    code, out, err = finish(start(results_root, "sweep", tiny, "--no-mlflow", "--run-id", "crash", "-j", "2", env=env))
    assert code == 1, out + err  # a failed config, not an error of the sweep
    rows = {r["test_id"]: r for r in rows_of(results_root / "runs" / "crash")}
    assert sorted(rows) == ["ps:1", "ps:16"]  # each config once
    assert rows["ps:1"]["verdict"] == "ok"
    assert rows["ps:16"]["verdict"] == "failed" and "worker running this config died" in rows["ps:16"]["error"]
    assert "2 configs: 1 ok, 0 as expected, 0 unexpected, 1 failed" in out


def test_a_killed_sweep_leaves_no_writer_behind(results_root, tiny):
    """SIGKILL to the sweep alone (not its process group): its workers write nothing
    (the sweep was the only writer) and go away once they find it gone."""
    import psutil

    run = results_root / "runs" / "orphan"
    bigger = tiny.with_name("bigger.toml")
    bigger.write_text(tiny.read_text().replace("page_size = [1, 16]", "page_size = [1, 2, 4, 8, 16, 32]\nseed = [1, 2]"))
    proc = start(results_root, "sweep", bigger, "--no-mlflow", "--run-id", "orphan", "-j", "2")
    while proc.poll() is None and len(rows_of(run)) < 2:
        time.sleep(0.05)
    workers = psutil.Process(proc.pid).children(recursive=True)
    proc.kill()
    proc.communicate()
    written = len(rows_of(run))
    assert workers and written < 12, "the kill must land midway"
    gone, alive = psutil.wait_procs(workers, timeout=120)
    assert not alive, f"workers outlived the sweep: {[p.pid for p in alive]}"
    assert len(rows_of(run)) == written  # nothing was appended after the sweep died


def test_two_fresh_sweeps_share_one_new_store(results_root, tiny, cli, capsys):
    """Both create and migrate the same fresh sqlite store: one waits for the other."""
    one = tiny.with_name("one.toml")
    one.write_text(tiny.read_text().replace("page_size = [1, 16]", "page_size = [16]"))  # one config each
    procs = [start(results_root, "sweep", one, "--run-id", f"fresh-{i}") for i in range(2)]
    for proc in procs:
        code, out, err = finish(proc)
        assert code == 0, out + err
        assert "warning" not in err, err  # both got their parent run: the store worked for both
    for i in range(2):
        assert cli("sync", f"fresh-{i}") == 0
        assert "0 uploaded, 1 already there" in capsys.readouterr().out


def test_resume_takes_a_run_of_the_root_only(results_root, tiny, tmp_path, cli, capsys):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "meta.json").write_text("{}")
    before = sorted(p.name for p in outside.iterdir())
    for target in (outside, "../../../../tmp", "/tmp", str(outside / ".." / "results" / "runs" / ".." / "..")):
        assert cli("sweep", tiny, "--no-mlflow", "--resume", target) == 2
        assert "--resume takes the id of a run in" in one_line(capsys.readouterr().err)
    assert sorted(p.name for p in outside.iterdir()) == before
    assert not (results_root / "runs").exists() or not any((results_root / "runs").iterdir())


def test_a_busy_run_is_refused_in_one_line(results_root, tiny, cli, capsys):
    from harness.store.locks import run_lock

    run = results_root / "runs" / "busy"
    run.mkdir(parents=True)
    (run / "meta.json").write_text("{}")
    with run_lock(run).acquire(purpose="kvbench sweep tiny"):
        assert cli("sweep", tiny, "--no-mlflow", "--resume", "busy") == 2
    line = one_line(capsys.readouterr().err)
    assert f"run busy is in use by pid {os.getpid()} on {socket.gethostname()} (kvbench sweep tiny)" in line
    assert not (run / "results.jsonl").exists()


@pytest.fixture
def read_only_root(tmp_path: Path):
    root = tmp_path / "ro"
    root.mkdir()
    if os.geteuid() == 0:  # root ignores permission bits: a read-only mount is read-only for root too
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(root)],
                          capture_output=True).returncode != 0:
            pytest.skip("running as root without the right to mount a read-only tmpfs")
        yield root
        subprocess.run(["umount", str(root)], capture_output=True)
    else:
        root.chmod(0o555)
        yield root
        root.chmod(0o755)


def test_a_read_only_results_root_is_one_line(read_only_root, tiny, cli, capsys, monkeypatch):
    monkeypatch.setenv("KVBENCH_RESULTS", str(read_only_root))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert cli("sweep", tiny, "--no-mlflow") == 2
    assert "cannot create the run directory" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("name", ["a?b", "a%41b", "a#b"])
def test_a_store_path_with_uri_syntax_is_refused(tmp_path, tiny, cli, capsys, monkeypatch, name):
    root = tmp_path / name
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert cli("sweep", tiny) == 2
    assert "which the MLflow sqlite URI would misread" in one_line(capsys.readouterr().err)
    assert not root.exists()  # refused before anything was created


def test_sync_to_a_damaged_store_is_one_line_and_keeps_the_rows(results_root, tiny, cli, capsys):
    assert cli("sweep", tiny, "--no-mlflow", "--run-id", "nostore") == 0
    run = results_root / "runs" / "nostore"
    rows = rows_of(run)
    (results_root / "mlflow.db").write_bytes(b"\x00garbage, not sqlite" * 200)
    capsys.readouterr()
    assert cli("sync", "nostore") == 2
    assert "cannot be opened" in one_line(capsys.readouterr().err)
    assert rows_of(run) == rows and rows  # nothing produced is lost


def test_a_grid_pytest_stopped_itself_is_not_a_ctrl_c(results_root, tiny, cli, capsys, monkeypatch):
    """pytest's INTERRUPTED without a SIGINT (here a plugin stops it, as -x, crashed
    workers or collection errors do): the sweep used to raise KeyboardInterrupt for it,
    so an in-process caller (a test, under hypothesis) got an interrupt nobody typed and
    the user was told to --resume a Ctrl-C. It is a stop with pytest's reason, exit 1."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p suites.faults.stopgrid")  # by its path from the repository root
    assert cli("sweep", tiny, "--no-mlflow", "--run-id", "stopped", "-j", "1") == 1
    err = " ".join(capsys.readouterr().err.split())  # the console wraps at its width
    assert "kvbench: interrupted" not in err
    assert "pytest stopped with exit code 2 (stopgrid: a plugin asked pytest to stop) before finishing" in err
    assert "--resume stopped" in err
    assert len(rows_of(results_root / "runs" / "stopped")) == 1  # the config that ran is kept


def test_a_sigint_is_still_an_interrupt(results_root, tiny, cli, capsys):
    """A real Ctrl-C (SIGINT to the sweep's process) still ends in 'interrupted', 130."""
    import signal
    import threading

    # The Ctrl-C comes once the first config's row has landed, not at a fixed time: with its
    # imports warm (earlier tests in the process) the whole grid can finish in under 3 s.
    rows = results_root / "runs" / "ctrlc" / "results.jsonl"
    done = threading.Event()

    def ctrl_c():
        while not done.is_set():
            if rows.exists() and rows.read_text().strip():
                os.kill(os.getpid(), signal.SIGINT)
                return
            done.wait(0.005)

    poller = threading.Thread(target=ctrl_c, daemon=True)
    poller.start()
    try:
        bigger = tiny.with_name("bigger.toml")
        seeds = ", ".join(str(i) for i in range(1, 17))
        bigger.write_text(tiny.read_text().replace("page_size = [1, 16]", f"page_size = [1, 16]\nseed = [{seeds}]"))
        assert cli("sweep", bigger, "--no-mlflow", "--run-id", "ctrlc", "-j", "1") == 130
    finally:
        done.set()
        poller.join()
    assert "kvbench: interrupted; finish it with kvbench sweep" in capsys.readouterr().err


def test_workers_that_cannot_start_are_not_a_passing_sweep(results_root, tiny, cli, capsys, monkeypatch, tmp_path):
    """A plugin the sweep's process imports but its workers cannot (PYTEST_ADDOPTS naming
    a module on this process's path only): every worker died at start, pytest said 'no
    tests ran' and the sweep printed 0 configs and exited 0."""
    (tmp_path / "here_only.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p here_only")
    assert cli("sweep", tiny, "--no-mlflow", "--run-id", "nostart", "-j", "1") == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "(no worker collected the grid) before finishing" in err and "--resume nostart" in err
