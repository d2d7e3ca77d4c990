"""What a run directory or an output path holds is not trusted: sync talks only to the
server the user names, and every file kvbench writes is a regular file or a new path,
never a link followed, a device node replaced or a hard-linked twin's data lost."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROW = {"key": "spec=none,ps=1", "test_id": "ps:1", "suite": "tiny", "status": "ok", "verdict": "ok",
       "config": {"page_size": 1}, "metrics": {"peak_pages_held": 3, "leaked_pages": 0, "wall_s": 0.1},
       "violations": {}, "started_at": 1.0, "finished_at": 2.0}


def make_run(root: Path, run_id: str = "art", rows=(ROW,), meta: dict | None = None) -> Path:
    run = root / "runs" / run_id
    run.mkdir(parents=True)
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "meta.json").write_text(json.dumps(meta or {"suite": "tiny", "hardware": {"profile": "cpu"}}))
    return run


def cli(argv: list[str], capsys) -> tuple[int, str, list[str]]:
    from harness.cli import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, [line for line in err.splitlines() if line.strip()]


def test_sync_goes_to_the_users_store_not_meta_json(tmp_path, capsys, monkeypatch):
    """N1: a meta.json naming another store (a rerun's artifact) does not pick the destination."""
    root = tmp_path / "results"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = make_run(root, meta={"suite": "tiny", "hardware": {"profile": "cpu"},
                               "mlflow_uri": f"sqlite:///{elsewhere}/x.db"})
    (run / "plots").mkdir()  # no plots to draw: the test is about the destination
    mine = tmp_path / "mine.db"
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mine}")
    code, out, err = cli(["sync", "art"], capsys)
    assert code == 0, err
    assert list(elsewhere.iterdir()) == [], "sync wrote into the store meta.json named"
    assert mine.is_file()
    assert str(mine) in out  # it says where it synced to


# --- the one write helper -------------------------------------------------------------

def _kinds(tmp: Path) -> dict[str, Path]:
    """A path of each kind a write may meet; the values are what must survive."""
    (tmp / "keep.txt").write_text("KEEP")
    paths = {"new": tmp / "new.out", "regular": tmp / "regular.out", "symlink": tmp / "link.out",
             "dangling symlink": tmp / "dangling.out", "directory": tmp / "dir.out", "fifo": tmp / "fifo.out",
             "hard link": tmp / "hard.out"}
    paths["regular"].write_text("OLD")
    paths["symlink"].symlink_to(tmp / "keep.txt")
    paths["dangling symlink"].symlink_to(tmp / "nowhere.txt")
    paths["directory"].mkdir()
    os.mkfifo(paths["fifo"])
    os.link(tmp / "keep.txt", paths["hard link"])
    if os.geteuid() == 0:  # a private device node (/dev/full's numbers), never a real one
        paths["char device"] = tmp / "full.out"
        os.mknod(paths["char device"], 0o600 | stat.S_IFCHR, os.makedev(1, 7))
    return paths


WRITABLE = {"new", "regular", "hard link"}
KINDS = ["new", "regular", "symlink", "dangling symlink", "directory", "fifo", "hard link", "char device"]


def _assert_outcome(kind: str, path: Path, tmp: Path, code: int, err: list[str], writable=WRITABLE) -> None:
    if kind in writable:
        assert code == 0, err
        assert path.is_file() and not path.is_symlink()
    else:
        assert code == 2 and len(err) == 1 and err[0].startswith("kvbench: error: "), err
        # baseline --out reads an old regular file first: not a baseline is its refusal
        assert "regular file" in err[0] or kind in WRITABLE, err
    assert (tmp / "keep.txt").read_text() == "KEEP", f"{kind}: the other name's data was lost"
    assert not (tmp / "nowhere.txt").exists(), "a dangling link was followed"
    if kind == "symlink":
        assert path.is_symlink()
    if kind == "char device":
        assert stat.S_ISCHR(os.lstat(path).st_mode), "the device node was replaced"
    assert not [p for p in tmp.iterdir() if ".tmp" in p.name], "a temp file was left behind"


@pytest.mark.parametrize("command", ["report", "baseline"])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(kind=st.sampled_from(KINDS))
def test_out_is_only_a_regular_file_or_a_new_path(tmp_path_factory, capsys, monkeypatch, command, kind):
    """N2: report --out and baseline --out replace no device node, follow no link."""
    tmp = tmp_path_factory.mktemp("out")
    paths = _kinds(tmp)
    if kind not in paths:
        return  # no device node without root
    make_run(tmp / "results")
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp / "results"))
    path = paths[kind]
    code, _, err = cli([command, "art", "--out", path], capsys)
    _assert_outcome(kind, path, tmp, code, err, WRITABLE if command == "report" else {"new"})


@settings(max_examples=10, deadline=None, derandomize=True)
@given(kind=st.sampled_from(KINDS), data=st.binary(max_size=64))
def test_safe_write_refuses_every_other_kind(tmp_path_factory, kind, data):
    from harness.core.safe_write import UnsafeTarget, write_bytes

    tmp = tmp_path_factory.mktemp("w")
    paths = _kinds(tmp)
    if kind not in paths:
        return
    path = paths[kind]
    if kind in WRITABLE:
        write_bytes(path, data, "x")
        assert path.read_bytes() == data
        code = 0
    else:
        with pytest.raises(UnsafeTarget):
            write_bytes(path, data, "x")
        code = 2
    err = [] if code == 0 else ["kvbench: error: regular file"]
    _assert_outcome(kind, path, tmp, code, err)


def test_json_and_trace_hard_linked_keep_both(tmp_path, capsys):
    """L7: --json and --trace naming two links of one file: both results survive."""
    trace, js = tmp_path / "t.jsonl", tmp_path / "r.json"
    trace.write_text("")
    os.link(trace, js)
    code, _, err = cli(["run", "--page-size", "16", "--num-requests", "2", "--input-len", "16", "--output-len", "4",
                        "--min-len", "4", "--json", js, "--trace", trace], capsys)
    assert code == 0, err
    assert json.loads(js.read_text())["status"] == "ok"
    assert json.loads(trace.read_text().splitlines()[0])["format"] == "kvbench-trace"


def test_a_full_disk_is_one_line_and_keeps_the_old_file(tmp_path, capsys, monkeypatch):
    """N16: ENOSPC on --out: one line, the old report whole, no temp file."""
    from harness.core import safe_write

    make_run(tmp_path / "results")
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    out = tmp_path / "r.html"
    out.write_text("OLD")
    real_fsync = os.fsync

    def full(fd):
        raise OSError(28, os.strerror(28))

    monkeypatch.setattr(safe_write.os, "fsync", full)
    code, _, err = cli(["report", "art", "--out", out], capsys)
    monkeypatch.setattr(safe_write.os, "fsync", real_fsync)
    assert code == 2 and len(err) == 1 and "No space left" in err[0], err
    assert out.read_text() == "OLD"
    assert [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []


@pytest.mark.parametrize("name", ["lock", "results.jsonl"])
def test_run_files_are_not_written_through_links(tmp_path, name):
    """N13: a lock or results file that is a link is refused; its target keeps its data."""
    from harness.core.errors import HarnessError
    from harness.store.locks import run_lock
    from harness.store.results import append_line

    run = tmp_path / "run"
    run.mkdir()
    keep = tmp_path / "keep.txt"
    keep.write_text("KEEP")
    (run / name).symlink_to(keep)
    with pytest.raises(HarnessError, match="symbolic link"):
        run_lock(run).acquire() if name == "lock" else append_line(run / name, "{}")
    assert keep.read_text() == "KEEP"


def test_a_run_id_that_is_a_link_is_refused(tmp_path, capsys, monkeypatch):
    """N13: --resume ID (and sync, compare ...) where runs/ID is a link out of the root."""
    real = make_run(tmp_path / "elsewhere")
    runs = tmp_path / "results" / "runs"
    runs.mkdir(parents=True)
    (runs / "art").symlink_to(real)
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    suite = tmp_path / "tiny.toml"
    suite.write_text("[defaults]\nnum_requests = 2\n[axes]\npage_size = [1, 16]\n")
    before = sorted(p.name for p in real.iterdir())
    for argv in (["sweep", suite, "--no-mlflow", "--resume", "art"], ["sync", "art"]):
        code, _, err = cli(argv, capsys)
        assert code == 2 and len(err) == 1, (argv, err)
        assert "symbolic link" in err[0] or "--resume takes" in err[0], err
    assert sorted(p.name for p in real.iterdir()) == before


def test_a_deep_lock_note_does_not_block_resume(tmp_path):
    """N15: a damaged lock note (4096 '[') is no owner: the lock is taken."""
    from harness.store.locks import run_lock

    (tmp_path / "lock").write_text("[" * 4096)
    lock = run_lock(tmp_path).acquire()
    lock.release()


@pytest.mark.parametrize("store", ["a directory", "a FIFO", "in a missing directory"])
def test_an_unopenable_sqlite_store_fails_fast(tmp_path, capsys, monkeypatch, store):
    """N12/N18: MLflow retried such a store for 107 s (36 lines of retries for a directory)."""
    import time

    root = tmp_path / "results"
    make_run(root)
    db = tmp_path / "store.db"
    if store == "a directory":
        db.mkdir()
    elif store == "a FIFO":
        os.mkfifo(db)
    else:
        db = tmp_path / "missing" / "store.db"
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    started = time.monotonic()
    code, _, err = cli(["sync", "art", "--mlflow-uri", f"sqlite:///{db}"], capsys)
    assert code == 2 and len(err) == 1 and "cannot be opened" in err[0], err
    assert time.monotonic() - started < 20
    assert not (tmp_path / "store.db.lock").exists() or store != "a directory"


def test_baseline_refuses_a_run_a_sweep_still_writes(tmp_path, capsys, monkeypatch):
    """N15: a run held by a live sweep (2 of 8 configs done) was blessed with exit 0."""
    from harness.store.locks import run_lock

    run = make_run(tmp_path / "results")
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    out = tmp_path / "base.json"
    lock = run_lock(run).acquire(purpose="kvbench sweep")
    try:
        code, _, err = cli(["baseline", "art", "--out", out], capsys)
    finally:
        lock.release()
    assert code == 2 and len(err) == 1 and "still being written" in err[0], err
    assert not out.exists()
    code, _, err = cli(["baseline", "art", "--out", out], capsys)  # once the sweep is gone
    assert code == 0 and out.is_file(), err


@pytest.mark.parametrize("planned, status", [(None, "KILLED"), (1, "FINISHED"), (2, "KILLED")])
def test_sync_closes_a_sweep_finished_only_when_every_config_it_owed_ran(tmp_path, capsys, monkeypatch,
                                                                         planned, status):
    """N15: FINISHED means every config ran as expected; 1 of the suite's 8 did (no plan).
    A shard or an --engine sglang sweep runs part of the suite on purpose: its meta.json's
    planned count, not the suite's, says whether every config it owed ran."""
    from mlflow import MlflowClient

    root = tmp_path / "results"
    plan = {} if planned is None else {"planned": planned}
    run = make_run(root, meta={"suite": "tiny", "hardware": {"profile": "cpu"}, "configs": 8, "filter": None, **plan})
    (run / "plots").mkdir()
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    code, out, err = cli(["sync", "art", "--mlflow-uri", uri], capsys)
    assert code == 0, err
    parent = json.loads((run / "meta.json").read_text())["mlflow_parent"]
    assert MlflowClient(tracking_uri=uri).get_run(parent).info.status == status


def test_a_sweep_that_cannot_write_meta_leaves_its_id_free(tmp_path, capsys, monkeypatch):
    """N15: a full disk before meta.json said 'finish with --resume F', which then refused
    (no meta.json), as did --run-id F (it exists)."""
    from harness.store import results

    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    suite = tmp_path / "tiny.toml"
    suite.write_text("[defaults]\nnum_requests = 2\ninput_len = 16\noutput_len = 8\nmin_len = 8\n"
                     "[axes]\npage_size = [1, 16]\n")

    def full(self, meta):
        raise OSError(28, os.strerror(28), str(self.meta_path))

    monkeypatch.setattr(results.RunDir, "write_meta", full)
    code, _, err = cli(["sweep", suite, "--no-mlflow", "--run-id", "F"], capsys)
    assert code == 2 and len(err) == 1 and "run the sweep again" in err[0], err
    assert not (tmp_path / "results" / "runs" / "F").exists()


@pytest.mark.parametrize("stdout", ["full device", "closed"])
def test_stdout_that_cannot_be_written_is_one_line(tmp_path, stdout):
    """N16: stdout on a full device (a private node with /dev/full's numbers) or closed."""
    import subprocess
    import sys

    from faultkit import REPO, kvbench_env

    if stdout == "full device":
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        node = tmp_path / "full"
        os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(1, 7))
        out = open(node, "w")
    argv = [sys.executable, "-m", "harness.cli", "ci", "runners", "--root", str(REPO)]
    try:
        proc = subprocess.run(argv, cwd=REPO, env=kvbench_env(tmp_path), stderr=subprocess.PIPE, text=True,
                              timeout=120, **({"stdout": out} if stdout == "full device" else {"stdout": subprocess.DEVNULL,
                                                                                               "pass_fds": ()}),
                              preexec_fn=(lambda: os.close(1)) if stdout == "closed" else None)
    finally:
        if stdout == "full device":
            out.close()
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    if stdout == "closed":
        assert proc.returncode == 0 and lines == [], proc.stderr
    else:
        assert proc.returncode == 2 and len(lines) == 1 and "No space left" in lines[0], proc.stderr
