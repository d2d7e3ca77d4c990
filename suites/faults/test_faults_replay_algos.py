"""replay refuses an algorithm kvbench does not know, as conform does (N17): a header
or prepare record naming spec "medusa" left its reserve unchecked and replayed clean."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from test_faults_trust import cli


def _trace(tmp_path, where: str):
    head = {"format": "kvbench-trace", "version": 1, "page_size": 1, "num_pages": 64,
            "config": {"spec": "medusa" if where == "header" else "none"}}
    rec = {"op": "prepare", "algo": "medusa" if where == "prepare" else "none", "reserve": 1, "aligned": False,
           "reqs": [{"cur": 0, "committed": 0, "nxt": 1}]}
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps(head) + "\n" + json.dumps(rec) + "\n")
    return trace


@pytest.mark.parametrize("where", ["header", "prepare"])
@pytest.mark.parametrize("command", ["replay", "conform"])
def test_an_unknown_algorithm_is_refused_alike(tmp_path, capsys, monkeypatch, command, where):
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    code, _, err = cli([command, _trace(tmp_path, where)], capsys)
    assert code == 2 and len(err) == 1 and "medusa" in err[0] and "must be one of" in err[0], err


def test_replay_still_does_not_import_torch(tmp_path):
    # The check reads the algorithm registry; a trace replays where torch is not installed.
    trace = _trace(tmp_path, "header")
    code = ("import sys\nfrom mini_engine.algos import writers\nfrom mini_engine.memory.replay.run import replay\nfrom mini_engine.errors import TraceError\n"
            f"try:\n    replay({str(trace)!r}, writers())\nexcept TraceError:\n    pass\nprint('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False", out
