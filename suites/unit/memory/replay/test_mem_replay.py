"""Allocation trace: record random operations, replay with 0 divergences; corrupt and see it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from harness.cli import main
from mini_engine.algos import writers
from mini_engine.errors import TraceError
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.memory.replay.run import replay
from mini_engine.memory.trace.writer import TraceWriter


def record(path, seed=0, steps=150, ps=16, swa=True, free_policy="floor", policy="aligned"):
    mem = MemoryConfig(ps, 48, 6, 600, policy=policy, free_policy=free_policy, prefix_cache="chunk",
                       swa_num_pages=48 if swa else None, window=40 if swa else None)
    rng = random.Random(seed)
    with TraceWriter.for_memory(path, mem, {"seed": seed}) as trace:
        m = KVManager(mem, Auditor("record"), trace)
        live = []
        for step in range(steps):
            r = rng.random()
            if r < 0.3 and m.num_free_rows:
                s = m.admit(step)
                ok = m.pd_prealloc(s, rng.randint(1, 120)) if swa and rng.random() < 0.4 else None
                if ok is None:
                    n = rng.randint(1, 90)
                    ok = m.extend(s, n)
                    if ok:
                        m.commit(s, n)
                (live.append(s) if ok else m.release(s))
            elif r < 0.8 and live:
                if m.prepare(live, 24, algo="dflash"):
                    for s in live:
                        m.commit(s, rng.randint(1, 12))
                        m.evict_swa(s, s.committed, interval=1)
            elif live:
                m.release(live.pop(rng.randrange(len(live))))
        for s in live:
            m.release(s)
    return m


@pytest.mark.parametrize("free_policy", ["floor", "dedup"])
@pytest.mark.parametrize("ps, swa", [(1, False), (16, True), (64, True)])
def test_random_trace_replays_clean(tmp_path, ps, swa, free_policy):
    path = tmp_path / "t.jsonl"
    record(path, seed=ps, ps=ps, swa=swa, free_policy=free_policy)
    rep = replay(path, writers())
    assert rep.divergences == 0 and rep.first_divergence is None
    assert rep.calls == sum(1 for _ in open(path)) - 1 > 50
    assert rep.allocator_calls > 0 and rep.seconds_per_call > 0


def test_trace_header_and_records(tmp_path):
    path = tmp_path / "t.jsonl"
    record(path)
    lines = [json.loads(x) for x in open(path)]
    head = lines[0]
    assert head["format"] == "kvbench-trace" and head["version"] == 2
    assert (head["page_size"], head["num_pages"], head["swa_num_pages"]) == (16, 48, 48)
    ops = {x["op"] for x in lines[1:]}
    assert {"alloc_extend", "free_pages", "prepare", "swa_prealloc"} <= ops
    assert all(x["pool"] in ("full", "swa") for x in lines[1:] if "available" in x)


def _corrupt(path, op="alloc_extend"):
    lines = open(path).read().splitlines()
    for i, line in enumerate(lines[1:], start=1):
        rec = json.loads(line)
        if rec["op"] == op and rec.get("out"):
            rec["out"][0][0] += 1
            lines[i] = json.dumps(rec)
            break
    open(path, "w").write("\n".join(lines) + "\n")
    return i


def test_corrupted_line_diverges_exit_1(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    record(path)
    line_idx = _corrupt(path)
    rep = replay(path, writers())
    assert rep.divergences >= 1
    d = rep.first_divergence
    assert d.line == line_idx + 1 and d.op == "alloc_extend" and d.field == "out"
    assert main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"call {line_idx} (line {line_idx + 1}) alloc_extend: out expected" in out


def test_a_wrong_planning_record_diverges(tmp_path):
    path = tmp_path / "t.jsonl"
    record(path)
    lines = open(path).read().splitlines()
    for i, line in enumerate(lines):
        rec = json.loads(line)
        if rec.get("op") == "swa_prealloc":
            rec["evicted"] = rec["fill_len"] - rec["window"] if rec["fill_len"] > rec["window"] else 3
            lines[i] = json.dumps(rec)
            break
    open(path, "w").write("\n".join(lines) + "\n")
    assert replay(path, writers()).first_divergence.op == "swa_prealloc"


def test_clean_trace_cli_exit_0(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    record(path, steps=40)
    assert main(["replay", str(path)]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("replayed ") and ", 0 divergences (" in out and out.endswith("us/call host time)")


@pytest.mark.parametrize("content, msg", [
    (None, "t.jsonl': not found"),
    ("", "is empty"),
    ("not json\n", "line 1 is not JSON"),
    ('{"format": "other"}\n', "not a kvbench-trace header"),
    ('{"format": "kvbench-trace", "version": 1, "page_size": 0, "num_pages": 4}\n', "page_size must be"),
    ('{"format": "kvbench-trace", "version": 1, "page_size": 4, "num_pages": 4}\n{"op": "grow"}\n',
     "unknown op 'grow'"),
    ('{"format": "kvbench-trace", "version": 1, "page_size": 4, "num_pages": 4}\n{"op": "free_pages"}\n',
     "lacks page_ids, available"),
    ('{"format": "kvbench-trace", "version": 1, "page_size": 4, "num_pages": 4}\n{"op": "free_pages", "page_ids": "x", "available": 1}\n',
     "page_ids must be a list of integers"),
    ('{"format": "kvbench-trace", "version": 1, "page_size": 4, "num_pages": 4}\n{"op": "alloc_extend", "pool": "swa", "prefix_lens": [0], "seq_lens": [1], "last_locs": [-1], "out": null, "available": 1}\n',
     "pool 'swa'"),
    ('{"format": "kvbench-trace", "version": 1, "page_size": 4, "num_pages": 4}\n{"op": "free_pages",\n',
     "line 2 is not JSON"),
    ('{"format": "kvbench-trace", "version": 1, "page_size": 4, "num_pages": 4}\n{"op": ["free"]}\n',
     "line 2 has unknown op"),
    ('{"format": "kvbench-trace", "version": 1, "page_size": 4, "num_pages": 4}\n{"op": "free_pages", "pool": ["full"], "page_ids": [], "available": 16}\n',
     "pool must be"),
    ('{"format": "kvbench-trace", "version": 1, "page_size": 4, "num_pages": 4}\n{"op": "alloc_extend", "prefix_lens": [0], "seq_lens": [100000000000000000000], "last_locs": [-1], "out": null, "available": 16}\n',
     "seq_lens must be a list of integers"),
])
def test_bad_trace_one_line_exit_2(tmp_path, capsys, content, msg):
    path = tmp_path / "t.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(TraceError, match=msg):
        replay(path, writers())
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and msg in err and "Traceback" not in err


EXAMPLES = sorted((Path(__file__).resolve().parents[4] / "examples").glob("*.jsonl"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_committed_example_traces_replay_clean(path):
    rep = replay(path, writers())
    assert rep.calls > 10 and rep.divergences == 0


def test_there_are_example_traces():
    assert len(EXAMPLES) >= 2


def test_unwritable_trace_path_is_one_line(tmp_path):
    from mini_engine.memory.config import MemoryConfig

    with pytest.raises(TraceError, match="cannot write trace file"):
        TraceWriter.for_memory(tmp_path / "no" / "such" / "dir.jsonl", MemoryConfig(16, 8, 2, 64))


def test_numpy_lengths_are_accepted(tmp_path):
    import numpy as np

    m = KVManager(MemoryConfig(16, 8, 2, 64, policy="aligned"), Auditor("raise"))
    s = m.admit(0)
    assert m.extend(s, np.int64(20)) and s.allocated == 32
    assert m.prepare([s], np.int64(8))


@pytest.mark.parametrize("op, field", [("free_pages", "available"), ("alloc_extend", "available"),
                                       ("prepare", "reqs[0].nxt")])
def test_a_wrong_available_or_nxt_diverges(tmp_path, op, field):
    path = tmp_path / "t.jsonl"
    record(path)
    lines = open(path).read().splitlines()
    for i, line in enumerate(lines[1:], start=1):
        rec = json.loads(line)
        if rec["op"] == op and (op != "prepare" or rec["reqs"]):
            if op == "prepare":
                rec["reqs"][0]["nxt"] += 16
            else:
                rec["available"] += 16
            lines[i] = json.dumps(rec)
            break
    open(path, "w").write("\n".join(lines) + "\n")
    d = replay(path, writers()).first_divergence
    assert (d.line, d.op, d.field) == (i + 1, op, field)
