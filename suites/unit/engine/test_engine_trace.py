"""The allocation trace is the caller's: opened around the run, closed by the caller's
``with`` alone, and readable (every record whole, replayable) when the run crashes."""

from __future__ import annotations

import io
import json

import pytest

from harness.run.runner import run_config
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, open_trace
from mini_engine.algos import writers
from mini_engine.memory.replay.run import replay
from mini_engine.request import Request

OPTIONS = dict(spec="dflash", page_size=16, block_size=4, workload="fixed", num_requests=3, input_len=40,
               output_len=30, pool_tokens=4096)


def crash_at_decode(monkeypatch, n: int) -> list[int]:
    """The simulated backend raises at its n-th decode step (after n - 1 good ones)."""
    from mini_engine.forward import accounting as simulated

    real = simulated.SimulatedBackend.spec_step
    calls = [0]

    def spec_step(self, reqs):
        calls[0] += 1
        if calls[0] == n:
            raise RuntimeError("forward exploded")
        return real(self, reqs)

    monkeypatch.setattr(simulated.SimulatedBackend, "spec_step", spec_step)
    return calls


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_crash_mid_run_leaves_a_readable_trace(tmp_path, monkeypatch):
    whole = tmp_path / "whole.jsonl"
    assert run_config(OPTIONS, trace=str(whole))["status"] == "ok"
    calls = crash_at_decode(monkeypatch, 3)
    cut = tmp_path / "cut.jsonl"
    row = run_config(OPTIONS, trace=str(cut))
    assert row["status"] == "failed" and "forward exploded" in row["error"] and calls[0] == 3
    lines = records(cut)  # every line is whole JSON
    assert lines[0]["format"] == "kvbench-trace"
    # The records up to the failing call are all there: the whole run's, cut where it crashed.
    full = records(whole)
    assert 1 < len(lines) < len(full) and lines == full[:len(lines)]
    assert sum(r["op"] == "prepare" for r in lines[1:]) == 3  # the third reservation ran, its forward did not
    report = replay(str(cut), writers())
    assert report.calls == len(lines) - 1 and report.divergences == 0


def test_the_engine_writes_the_trace_and_leaves_it_open(monkeypatch):
    cfg = EngineConfig(spec="dflash", page_size=16, block_size=4, pool_tokens=4096)
    reqs = [Request(rid=i, prompt=list(range(40)), max_new_tokens=30) for i in range(2)]
    buf = io.StringIO()
    with open_trace(cfg, buf) as trace:
        result = Engine(cfg, trace=trace).run(reqs)
        assert not buf.closed  # closing is the caller's (the with), not the engine's
        head, *calls = map(json.loads, buf.getvalue().splitlines())
    assert result.verdict == "ok"
    assert head["page_size"] == 16 and head["num_pages"] == cfg.num_pages and head["config"]["spec"] == "dflash"
    assert {"alloc_extend", "prepare", "free_pages"} <= {r["op"] for r in calls}


def test_a_crash_propagates_through_the_callers_with_and_the_file_is_closed(tmp_path, monkeypatch):
    crash_at_decode(monkeypatch, 2)
    cfg = EngineConfig(spec="dflash", page_size=16, block_size=4, pool_tokens=4096)
    path = tmp_path / "t.jsonl"
    with pytest.raises(RuntimeError, match="forward exploded"):
        with open_trace(cfg, path) as trace:
            Engine(cfg, trace=trace).run([Request(rid=0, prompt=list(range(40)), max_new_tokens=30)])
    assert trace._fh.closed
    assert replay(str(path), writers()).divergences == 0


def test_a_trace_path_is_not_a_writer():
    with pytest.raises(TypeError, match="open_trace"):
        Engine(EngineConfig(pool_tokens=4096), trace="trace.jsonl")
