"""Every file kvbench reads, fed malformed, binary and deeply nested JSON/TOML: one
line on stderr and exit 2, never a traceback.

Each reader is driven through the command a user runs (in-process, so a traceback is
an exception here): suites (sweep), configs (run --config), prompts (run --prompts),
traces (replay), baselines (compare --baseline), results (compare, baseline), events
(bot handle), permissions (bot plan) and the runner registry (ci runners).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultkit import REPO

N = 100_000  # deeper than any parser's recursion limit
HOSTILE = {
    "empty": b"",
    "binary": b"\x00\xff\xfe\x80\x81garbage",
    "not utf-8": "caf\u00e9".encode("latin-1"),
    "truncated json": b'{"key": "k", "metrics": {',
    "deep json list": b"[" * N + b"]" * N,
    "deep json object": b'{"a":' * N + b"1" + b"}" * N,
    "deep json line": b'{"key": "k", "metrics": ' + b"[" * N + b"]" * N + b"}\n",
    "deep toml array": b"a = " + b"[" * N + b"]" * N,
    "deep toml table": b"a = " + b"{b = " * N + b"1" + b"}" * N,
    "json scalar": b"1",
    "json list": b"[1, 2, 3]",
    "json null": b"null",
    "nan": b'{"key": "k", "metrics": {"x": NaN}}',
    "huge number": b"a = 1" + b"0" * 5000,
    "toml wrong types": b'name = 1\nrepeat = "x"\nmarks = "gpu"\n[axes]\npage_size = "16"\n',
    "many lines of junk": b"{}\n" * 1000 + b"junk\n",
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A results root with one good run and a good baseline, and a CI tree to damage."""
    from harness.judge.baseline import build, write_baseline

    base = tmp_path_factory.mktemp("world")
    run = base / "results" / "runs" / "good"
    run.mkdir(parents=True)
    row = {"key": "spec=none,ps=1", "test_id": "ps:1", "suite": "tiny", "status": "ok", "verdict": "ok",
           "config": {}, "metrics": {"peak_pages_held": 3, "wall_s": 0.1}, "violations": {}}
    (run / "results.jsonl").write_text(json.dumps(row) + "\n")
    (run / "meta.json").write_text(json.dumps({"suite": "tiny", "hardware": {"profile": "cpu"}}))
    write_baseline(base / "baseline.json", build([row], "cpu", "abc")[0])
    tree = base / "tree"
    shutil.copytree(REPO / "ci", tree / "ci", ignore=shutil.ignore_patterns("workflows"))
    (tree / "suites").mkdir()
    return base


def _cases(world: Path, bad: Path) -> dict[str, tuple[list[str], Path | None]]:
    """reader -> (argv, where the bad bytes go; None: `bad` itself is passed)."""
    run = world / "results" / "runs"
    return {
        "suite": (["sweep", str(bad.with_suffix(".toml")), "--no-mlflow"], bad.with_suffix(".toml")),
        "config": (["run", "--config", str(bad.with_suffix(".toml")), "--page-size", "0"], bad.with_suffix(".toml")),
        "prompts": (["run", "--prompts", str(bad), "--max-context", "64", "--pool-tokens", "256"], None),
        "trace": (["replay", str(bad)], None),
        "baseline": (["compare", str(run / "good"), "--baseline", str(bad)], None),
        "results": (["compare", str(run / "bad"), "--baseline", str(world / "baseline.json")], run / "bad" / "results.jsonl"),
        "results (baseline)": (["baseline", str(run / "bad"), "--out", str(world / "out.json")], run / "bad" / "results.jsonl"),
        "event": (["bot", "handle", "--event", str(bad), "--root", str(REPO)], None),
        "permissions": (["bot", "plan", "/rerun-suite smoke", "--root", str(world / "tree")],
                        world / "tree" / "ci" / "permissions.json"),
        "runners": (["ci", "runners", "--root", str(world / "tree")], world / "tree" / "ci" / "runners.toml"),
    }


READERS = sorted(_cases(Path("w"), Path("b")))


def _feed(world: Path, tmp: Path, reader: str, data: bytes, capsys, monkeypatch) -> None:
    from harness.cli import main

    monkeypatch.setenv("KVBENCH_RESULTS", str(world / "results"))
    bad = tmp / "bad.jsonl"
    argv, target = _cases(world, bad)[reader]
    target = target or bad
    target.parent.mkdir(parents=True, exist_ok=True)
    saved = target.read_bytes() if target.exists() and target.parent.name == "ci" else None
    (target.parent / "meta.json").write_text("{}") if target.name == "results.jsonl" else None
    target.write_bytes(data)
    try:
        code = main(argv)  # an exception here is the traceback a user would see
    finally:
        if saved is not None:
            target.write_bytes(saved)
    out, err = capsys.readouterr()
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("kvbench: error: "), (reader, code, out[-500:], err[-2000:])
    assert len(lines[0]) < 600, lines[0]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_files_are_one_line(world, tmp_path, reader, name, capsys, monkeypatch):
    _feed(world, tmp_path, reader, HOSTILE[name], capsys, monkeypatch)


@pytest.mark.parametrize("reader", READERS)
@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture], derandomize=True)
@given(data=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode),
                      st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                                   lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
                                   max_leaves=20).map(lambda v: json.dumps(v).encode())))
def test_random_files_are_one_line(world, tmp_path, reader, data, capsys, monkeypatch):
    _feed(world, tmp_path, reader, data, capsys, monkeypatch)
