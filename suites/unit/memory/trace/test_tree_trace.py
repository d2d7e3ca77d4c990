"""The prefix tree's trace records (memory/trace/tree_calls.py) and kvbench's replay of them (tree_replay.py).

The token ids of a key are written once per request (a request sharing a prefix with an
earlier one takes it ``from`` that one), and a reader rebuilds every key exactly; a
shared-prefix run's trace replays on kvbench's own tree with no divergence; a changed
record is a divergence naming its field; a record that cannot be run is a TraceError.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.algos import writers
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, open_trace
from mini_engine.errors import TraceError
from mini_engine.memory.replay.run import replay
from mini_engine.memory.trace.tree_calls import TokenStore, TreeTrace, insert_slots
from mini_engine.memory.trace.writer import TraceWriter
from mini_engine.memory.tree.radix_cache import RadixCache
from mini_engine.request import Request

HEAD = '{"format": "kvbench-trace", "version": 2, "page_size": 4, "num_pages": 16}'


def _run(path, ps: int = 4, pages: int = 60) -> None:
    cfg = EngineConfig(page_size=ps, pool_tokens=pages * ps, max_context=256, max_running=4, chunked_prefill=128,
                       audit="raise")
    rng = np.random.default_rng(3)
    system = rng.integers(1, 300, 64).tolist()
    reqs = [Request(rid=i, prompt=system[: 30 + 9 * (i % 4)] + rng.integers(1, 300, 6).tolist(),
                    max_new_tokens=12 + 5 * (i % 3), arrival_step=2 * i) for i in range(10)]
    with open_trace(cfg, path) as trace:
        assert Engine(cfg, trace=trace).run(reqs).verdict == "ok"


def test_a_shared_prefix_run_replays_its_tree_calls(tmp_path):
    path = tmp_path / "t.jsonl"
    _run(path)
    records = [json.loads(x) for x in path.read_text().splitlines()[1:]]
    ops = [r["op"] for r in records]
    assert ops.count("tree") == 1 and {"match", "insert", "lock", "unlock", "evict"} <= set(ops)
    # The system prompt is written once: later requests take it from an earlier one.
    tokens = [r for r in records if r["op"] == "tokens"]
    assert sum("from" in r for r in tokens) >= 8
    assert sum(len(r["ids"]) for r in tokens) < sum(r["len"] for r in records if r["op"] == "match")
    rep = replay(path, writers())
    assert rep.divergences == 0, rep.first_divergence
    assert rep.tree_calls == sum(op in ("match", "insert", "lock", "unlock", "evict") for op in ops)


def test_a_changed_tree_record_is_a_divergence(tmp_path):
    path = tmp_path / "t.jsonl"
    _run(path)
    lines = path.read_text().splitlines()
    i = next(i for i, x in enumerate(lines) if '"op":"insert"' in x and '"cached":0' not in x)
    rec = json.loads(lines[i])
    rec["cached"] -= 4
    lines[i] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")
    d = replay(path, writers()).first_divergence
    assert (d.call, d.op, d.field, d.got - d.expected) == (i, "insert", "cached", 4)


@pytest.mark.parametrize("records, words", [
    (['{"op": "lock", "node": 3, "delta": 0, "evictable": 0, "protected": 0}'], "before the trace's tree record"),
    (['{"op": "tree", "bigram": false}', '{"op": "lock", "node": 3, "delta": 0, "evictable": 0, "protected": 0}'],
     "node 3 is not one"),
    (['{"op": "tree", "bigram": false}', '{"op": "match", "rid": 1, "len": 5, "matched": 0, "node": 1, '
      '"evictable": 0, "protected": 0}'], "len 5 but the trace gave rid 1 0 token ids"),
    (['{"op": "tree", "bigram": false}', '{"op": "tokens", "rid": 1, "at": 2, "ids": [1]}'], "past the 0 known"),
    (['{"op": "insert", "rid": 1, "len": 0, "cached": 0, "node": 1, "evictable": 0, "protected": 0}'],
     "pages or slots"),
    (['{"op": "tokens", "rid": [1], "at": 0, "ids": [1]}'], "rid must be an integer or a string"),
])
def test_a_tree_record_that_cannot_run_is_a_trace_error(tmp_path, records, words):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([HEAD, *records]) + "\n")
    with pytest.raises(TraceError, match=words):
        replay(path, writers())


class _Lines:
    """A TraceWriter's records, read back as dicts."""

    def __init__(self):
        self.buf = io.StringIO()
        self.writer = TraceWriter(self.buf, {"page_size": 4, "num_pages": 16})

    def records(self) -> list[dict]:
        return [json.loads(x) for x in self.buf.getvalue().splitlines()[1:]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.lists(st.integers(0, 3), max_size=40)), min_size=1, max_size=25))
def test_every_key_is_rebuilt_from_the_tokens_records(calls):
    """Whatever ids each request looks up (growing, shrinking, rewritten, shared with
    others), a reader of the tokens records gets back exactly the ids of each call."""
    out = _Lines()
    log = TreeTrace(out.writer, RadixCache(4), bigram=False)
    for rid, ids in calls:
        log.write("match", {"rid": rid, "len": len(ids), "matched": 0, "node": 1}, np.array(ids, dtype=np.int64))
    store, got = TokenStore(), []
    for rec in out.records():
        if rec["op"] == "tokens":
            store.add(rec)
        elif rec["op"] == "match":
            got.append(store.raw(rec))
    assert got == [ids for _, ids in calls]


def test_an_inserts_slots_are_pages_when_they_are_whole_pages():
    out = _Lines()
    log = TreeTrace(out.writer, RadixCache(4), bigram=False)
    whole = np.array([8, 9, 10, 11, 20, 21, 22, 23])
    torn = np.array([8, 9, 10, 11, 20, 21, 23, 22])
    for slots in (whole, torn):
        log.write("insert", {"rid": 0, "len": 8, "slots": slots, "cached": 0, "node": 2}, np.arange(8))
    recs = [r for r in out.records() if r["op"] == "insert"]
    assert recs[0]["pages"] == [2, 5] and "slots" not in recs[0]
    assert recs[1]["slots"] == torn.tolist() and "pages" not in recs[1]
    assert [insert_slots(r, 4).tolist() for r in recs] == [whole.tolist(), torn.tolist()]
