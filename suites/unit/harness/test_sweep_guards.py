"""The guards of a sweep, one by one: run and store locks, bounds, the ETA, the leak
verdict in every audit mode, what a baseline refuses, one file for two outputs."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess

import pytest

from harness.grid.progress import eta
from harness.judge.baseline import BaselineError, build
from harness.judge.expect import leak_verdict
from harness.run.bounds import BoundsError, check_jobs, check_memory, max_jobs
from harness.store.locks import LockBusy, Lock, run_lock, sqlite_path, store_lock


def test_a_held_run_lock_refuses_with_its_owner(tmp_path):
    with run_lock(tmp_path).acquire(purpose="kvbench sweep smoke"):
        with pytest.raises(LockBusy, match=rf"run {tmp_path.name} is in use by pid {os.getpid()} on "
                                            rf"{socket.gethostname()} \(kvbench sweep smoke\) since"):
            run_lock(tmp_path).acquire()
    run_lock(tmp_path).acquire().release()  # free again once released
    assert (tmp_path / "lock").read_text() == ""


def test_a_dead_owner_is_taken_over_with_a_line(tmp_path):
    proc = subprocess.Popen(["true"])
    proc.wait()
    (tmp_path / "lock").write_text(json.dumps({"pid": proc.pid, "host": "node-7"}))
    notes = []
    lock = run_lock(tmp_path).acquire(note=notes.append)
    assert notes == [f"kvbench: taking over the lock of run {tmp_path.name} left by pid {proc.pid} on node-7, "
                     "which is no longer running"]
    assert json.loads((tmp_path / "lock").read_text())["pid"] == os.getpid()
    lock.release()


def test_the_store_lock_waits_then_refuses(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert sqlite_path(uri) == tmp_path / "mlflow.db"
    assert sqlite_path("http://mlflow:5000") is None and store_lock("http://mlflow:5000") is None
    held = store_lock(uri)
    notes = []
    with pytest.raises(LockBusy, match="the MLflow store .* is in use by pid .* after waiting 0 s"):
        Lock(tmp_path / "mlflow.db.lock", f"the MLflow store {tmp_path / 'mlflow.db'}").acquire(wait_s=0.3, note=notes.append)
    assert len(notes) == 1 and notes[0].startswith("kvbench: waiting for the MLflow store")
    held.release()


def test_jobs_are_bounded_by_the_machine():
    top = max_jobs(0)
    check_jobs(top, 0)
    check_jobs(None, 0)
    for bad in (0, -1, top + 1, 100_000):
        with pytest.raises(BoundsError, match=rf"-j must be an integer from 1 to {top} on this machine"):
            check_jobs(bad, 0)
    check_jobs(max(top, 8), 8)  # one worker per GPU is always allowed


def test_host_memory_bound_names_the_range():
    from harness.core.run_spec import RunSpec

    spec = RunSpec.parse({"max_context": 1_000_000, "input_len": 500_000, "output_len": 10, "num_requests": 1})
    engine, workload = spec.engine, spec.workload.to_dict()
    check_memory(engine, workload, available=1 << 40)
    with pytest.raises(BoundsError, match=r"does not fit in host memory: it needs about .* GiB, most of it req_to_token .* "
                                          r"and 1.0 GiB is available \(allowed: up to 0.8 GiB\)"):
        check_memory(engine, workload, available=1 << 30)


def test_eta_at_the_pace_so_far():
    assert eta(0, 10, 5.0) == "-" and eta(3, None, 5.0) == "-"
    assert eta(1, 3, 10.0) == "0:30" and eta(4, 0, 10.0) == "0:00"
    assert eta(1, 999, 10.0) == "2:46:30"


def test_the_eta_runs_from_the_first_config_and_weighs_what_is_left(monkeypatch):
    # The workers' start-up was counted as the first config's pace (a first ETA of 1:17:01
    # for a sweep of minutes), and a real-model config counted as one accounting config.
    import io

    from rich.console import Console

    from harness.grid import progress

    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    display = progress.Display(Console(file=io.StringIO(), width=200), {"a": 1.0, "b": 1.0, "model": 8.0})
    display.start()
    display.collected(["a", "b", "model"])
    now[0] = 160.0  # a minute of imports and collection before any config starts
    display.started("a")
    assert display._eta() == "-"
    now[0] = 170.0
    display.row({"test_id": "a", "status": "ok", "verdict": "ok"})
    assert display._eta() == "1:30"  # 10 s for a weight of 1, 9 left; not (70 s / 1 done) x 2 configs


@pytest.mark.parametrize("audit", ["off", "record"])
def test_leaked_pages_fail_the_run_in_every_audit_mode(audit):
    from harness.run.runner import run_config

    row = leak_verdict(run_config({"spec": "dflash", "block_size": 16, "profile": "floor-free", "audit": audit,
                                   "num_requests": 4, "input_len": 40, "output_len": 24, "min_len": 20}))
    assert row["metrics"]["leaked_pages"] > 0
    assert row["status"] == "violated"
    clean = leak_verdict({"status": "ok", "metrics": {"leaked_pages": 0, "leaked_swa_pages": 0}})
    assert clean["status"] == "ok"


def test_kvbench_run_audit_off_with_a_leak_exits_1(tmp_path, cli, capsys):
    code = cli("run", "--spec", "dflash", "--block-size", "16", "--profile", "floor-free", "--audit", "off",
               "--num-requests", "4", "--input-len", "40", "--output-len", "24", "--min-len", "20")
    assert code == 1 and "leaked pages after the run drained" in capsys.readouterr().out


def test_json_and_trace_on_one_file_through_a_link_are_refused(tmp_path, cli, capsys):
    out = tmp_path / "out.json"
    link = tmp_path / "link.jsonl"
    os.symlink(out, link)
    assert cli("run", "--json", out, "--trace", link, "--num-requests", "1") == 2
    err = capsys.readouterr().err.strip()
    assert "name the same file" in err and len(err.splitlines()) == 1 and not out.exists()


def _row(key, verdict="ok", **metrics):
    return {"key": key, "status": "ok", "verdict": verdict, "metrics": metrics, "violations": {}}


def test_baseline_refuses_unexpected_and_non_finite_rows(tmp_path):
    base, added, _, _ = build([_row("a", peak_pages_held=3), _row("b", "as_expected", peak_pages_held=1)], "cpu", "c")
    assert added == 2
    with pytest.raises(BaselineError, match=r"1 config\(s\) of the run were judged 'unexpected' \(first: 'b'\)"):
        build([_row("a"), _row("b", "unexpected")], "cpu", "c")
    for value in (math.nan, math.inf):
        with pytest.raises(BaselineError, match="config 'a' has a non-finite counter peak_pages_held"):
            build([_row("a", peak_pages_held=value)], "cpu", "c")
    with pytest.raises(BaselineError, match="non-finite timing wall_s"):
        build([_row("a", wall_s=math.nan)], "cpu", "c")
    bad = tmp_path / "bad.json"
    bad.write_text('{"profile": "cpu", "created": "", "git_commit": "", "configs": '
                   '{"a": {"counters": {"peak_pages_held": NaN}, "timings": {}}}}')
    from harness.judge.baseline import load_baseline

    with pytest.raises(BaselineError, match="configs.a.counters.peak_pages_held must be a finite number"):
        load_baseline(bad)
