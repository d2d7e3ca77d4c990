"""A run directory kvbench did not just write is read by one rule (harness/store/run_files.py):
regular files inside it only, no link followed, no FIFO or device opened, sizes bounded,
a violation named in one line (R1). sync, report, history and the bot's artifact all read
through it. The FIFO and device cases run kvbench as a process under a timeout: a
regression there would hang, not fail."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faultkit import REPO, kvbench_env, start
from test_faults_trust import ROW, cli, make_run

SECRET = b"machine github.com login bot password SECRET-R1\n"
HANG_S = 60  # far past a refusal (a few seconds), far short of "for ever"


def _secret(tmp_path: Path) -> Path:
    path = tmp_path / "netrc"
    path.write_bytes(SECRET)
    return path


def _nowhere_holds(root: Path, data: bytes) -> None:
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert data not in path.read_bytes(), f"{path} holds the link's target"


def _special(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    else:  # a private node with /dev/zero's numbers: read without end, were it opened
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))


def _bounded(root: Path, *args) -> tuple[int, str, str]:
    """kvbench as a process of its own, killed (and the test failed) if it hangs."""
    proc = start(root, *args)
    try:
        out, err = proc.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"kvbench {' '.join(map(str, args))} still running after {HANG_S} s")
    return proc.returncode, out, err


KINDS = ["fifo", pytest.param("char device", marks=pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root"))]


# -- sync ----------------------------------------------------------------------------

@pytest.mark.parametrize("link", ["a plot", "the plots folder"])
def test_sync_never_follows_a_plot_link(tmp_path, capsys, monkeypatch, link):
    root = tmp_path / "results"
    run = make_run(root)
    secret = _secret(tmp_path)
    if link == "a plot":
        (run / "plots").mkdir()
        (run / "plots" / "zz.png").symlink_to(secret)
    else:
        (tmp_path / "home").mkdir()
        (tmp_path / "home" / "zz.png").symlink_to(secret)
        (run / "plots").symlink_to(tmp_path / "home")
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    code, out, err = cli(["sync", "art"], capsys)
    assert code == 2 and len(err) == 1 and "symbolic link" in err[0] and "plots" in err[0], (out, err)
    _nowhere_holds(root, SECRET)  # nothing uploaded: the refusal comes before the first upload


@pytest.mark.parametrize("kind", KINDS)
def test_sync_never_opens_a_special_plot(tmp_path, kind):
    root = tmp_path / "results"
    run = make_run(root)
    (run / "plots").mkdir()
    _special(run / "plots" / "zz.png", kind)
    code, out, err = _bounded(root, "sync", "art")
    assert code == 2 and err.count("\n") == 1 and ("a FIFO" if kind == "fifo" else "a character device") in err, (out, err)
    assert not (root / "mlartifacts").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_sync_never_opens_a_special_log_of_uploads(tmp_path, kind):
    """The keys sync already logged (mlflow_logged.txt), read as the run's other files are;
    asked in a process of its own (a full sync spends half a minute creating its store)."""
    run = make_run(tmp_path / "results")
    _special(run / "mlflow_logged.txt", kind)
    code = ("from harness.store.results import ResultsError, RunDir\n"
            "try: RunDir(__import__('pathlib').Path(__import__('sys').argv[1])).logged_keys()\n"
            "except ResultsError as err: print(err)")
    try:
        done = subprocess.run([sys.executable, "-c", code, str(run)], cwd=REPO, env=kvbench_env(tmp_path),
                              capture_output=True, text=True, timeout=HANG_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading mlflow_logged.txt, {kind}, still running after {HANG_S} s")
    assert done.returncode == 0 and "mlflow_logged.txt" in done.stdout, (done.stdout, done.stderr)
    assert "not a regular file" in done.stdout


def test_sync_still_uploads_the_runs_own_plots(tmp_path, capsys, monkeypatch):
    root = tmp_path / "results"
    run = make_run(root)
    (run / "plots").mkdir()
    (run / "plots" / "own.png").write_bytes(b"\x89PNG own figure")
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    code, out, err = cli(["sync", "art"], capsys)
    assert code == 0 and "1 plots" in out, (out, err)
    uploaded = list((root / "mlartifacts").rglob("own.png"))
    assert len(uploaded) == 1 and uploaded[0].read_bytes() == b"\x89PNG own figure"


# -- report, history, compare ---------------------------------------------------------

@pytest.mark.parametrize("name", ["results.jsonl", "meta.json"])
def test_report_never_follows_a_run_file_link(tmp_path, capsys, monkeypatch, name):
    root = tmp_path / "results"
    make_run(root, "good")
    run = make_run(root, "art")
    outside = tmp_path / name
    (run / name).rename(outside)
    (run / name).symlink_to(outside)
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    code, out, err = cli(["report", "good", "art", "--out", tmp_path / "r.html"], capsys)
    assert code == 0 and len(err) == 1 and "skipping" in err[0] and "symbolic link" in err[0], (out, err)
    assert "1 runs" in out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["results.jsonl", "meta.json"])
def test_report_and_compare_never_open_a_special_run_file(tmp_path, kind, name):
    root = tmp_path / "results"
    make_run(root, "good")
    run = make_run(root, "art")
    (run / name).unlink()
    _special(run / name, kind)
    code, out, err = _bounded(root, "report", "art", "--out", tmp_path / "r.html")
    assert code == 2 and err.count("\n") == 1 and "not a regular file" in err, (out, err)
    code, out, err = _bounded(root, "compare", "good", "art")
    assert code == 2 and err.count("\n") == 1 and "not a regular file" in err, (out, err)


def test_history_never_follows_a_night_link(tmp_path, capsys):
    nights = tmp_path / "nights"
    run = make_run(nights, "n1", meta={"suite": "tiny", "hardware": {"profile": "cpu"}, "created": 1.0})
    outside = tmp_path / "outside.jsonl"
    (run / "results.jsonl").rename(outside)
    (run / "results.jsonl").symlink_to(outside)
    code, out, err = cli(["history", "tiny", "--nights", nights], capsys)
    assert code == 2 and len(err) == 1 and "symbolic link" in err[0], (out, err)


# -- the bot's artifact -----------------------------------------------------------------

def _bot_report(tmp_path: Path, results: Path) -> tuple[int, str, str]:
    from harness.ci import reply
    from harness.ci.bot import Group, Plan

    plan = Plan("rerun-suite", user="core-dev", pr=3, groups=[Group("cpu", suite="smoke")])
    body = tmp_path / "reply.md"
    body.write_text(reply.render(plan))
    return _bounded(tmp_path, "bot", "report", "--dry-run", "--body-file", body, "--comment-id", 1, "--group", 1,
                    "--result", "success", "--results", results, "--root", REPO,
                    "--baseline", REPO / "results" / "baselines" / "cpu.json")


@pytest.mark.parametrize("kind", ["link", *KINDS])
def test_the_bot_never_reads_an_artifact_file_through_a_link_or_special_file(tmp_path, kind):
    from harness.ci import reply

    results = tmp_path / "run"
    results.mkdir()
    if kind == "link":
        (results / "results.jsonl").symlink_to(_secret(tmp_path))
    else:
        _special(results / "results.jsonl", kind)
    code, out, err = _bot_report(tmp_path, results)
    assert code == 0, err
    group = reply.parse(out).groups[0]
    assert group.status == "failed" and "artifact unreadable" in group.table, group.table
    assert "SECRET" not in out


# -- the reader itself ------------------------------------------------------------------

@settings(max_examples=25, deadline=None, derandomize=True)
@given(depth=st.integers(0, 3), at=st.integers(0, 4), limit=st.integers(0, 64), size=st.integers(0, 64))
def test_the_run_file_reader_reads_only_regular_files_inside_and_within_bounds(tmp_path_factory, depth, at, limit,
                                                                               size):
    """Property: a file reached through a link at any folder of its path, or the file a
    link, is refused; a regular file is read whole within the limit, else refused."""
    from harness.core.errors import HarnessError
    from harness.store.run_files import read_run_bytes

    tmp = tmp_path_factory.mktemp("rf")
    run, outside = tmp / "run", tmp / "outside"
    parts = [*(f"d{i}" for i in range(depth)), "f"]
    for base in (run, outside):
        base.joinpath(*parts[:-1]).mkdir(parents=True)
        base.joinpath(*parts).write_bytes(b"x" * size)
    linked = at <= depth  # the link replaces parts[at]: a folder on the way, or the file itself
    if linked:
        inside = run.joinpath(*parts[:at + 1])
        shutil.rmtree(inside) if inside.is_dir() else inside.unlink()
        inside.symlink_to(outside.joinpath(*parts[:at + 1]))
    try:
        data = read_run_bytes(run, "/".join(parts), "run file", HarnessError, limit=limit)
    except HarnessError as err:
        assert "\n" not in str(err)
        assert "symbolic link" in str(err) if linked else size > limit and "over the limit" in str(err), err
    else:
        assert not linked and size <= limit and data == b"x" * size


def test_the_run_file_reader_refuses_a_path_out_of_the_run(tmp_path):
    from harness.core.errors import HarnessError
    from harness.store.run_files import read_run_bytes

    for name in ("../x", "/etc/passwd", ""):
        with pytest.raises(ValueError):
            read_run_bytes(tmp_path, name, "run file", HarnessError)


def test_a_run_file_over_its_bound_is_one_line(tmp_path, capsys, monkeypatch):
    from harness.store import results

    root = tmp_path / "results"
    make_run(root, "good")
    make_run(root, "big", [ROW] * 50)
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    monkeypatch.setattr(results, "RESULTS_LIMIT", 1000)
    code, out, err = cli(["compare", "good", "big"], capsys)
    assert code == 2 and len(err) == 1 and "over the limit of 1000" in err[0], (out, err)
