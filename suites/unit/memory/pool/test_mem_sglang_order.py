"""The engine calls the allocator as SGLang's scheduler does, so its page ids are SGLang's:
a release's frees in SGLang's order, free groups, alloc_decode for plain decode, the whole
batch to each reservation, need_sort on the PD decode side."""

from __future__ import annotations

import io
import json

from harness.run.runner import run_config
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.memory.trace.writer import TraceWriter

SMALL = dict(workload="fixed", num_requests=3, input_len=40, output_len=12, seed=0, pool_tokens=4096)


def manager(ps=4, swa=False):
    mem = MemoryConfig(ps, 32, 4, 64, policy="unaligned", free_policy="segment",
                       swa_num_pages=32 if swa else None, window=8 if swa else None)
    buf = io.StringIO()
    trace = TraceWriter.for_memory(buf, mem)
    return KVManager(mem, Auditor("record"), trace), buf


def records(buf, op=None):
    recs = [json.loads(line) for line in buf.getvalue().splitlines()[1:]]
    return [r for r in recs if op is None or r["op"] == op]


def test_release_pieces_row_then_overallocation_swa_dead_part_full_side_first():
    m, _ = manager(swa=True)
    # owned 10, allocated 16, cursor 4 (ps 4): [0, 4) full only, then [4, 12) and [12, 16) both pools.
    assert m.releaser.pieces(10, 16, 4) == [(0, 4, False), (4, 12, True), (12, 16, True)]
    m, _ = manager()
    assert m.releaser.pieces(10, 16, 0) == [(0, 12, False), (12, 16, False)]
    assert m.releaser.pieces(16, 16, 0) == [(0, 16, False)]


def test_release_outside_a_group_puts_the_overallocation_in_front():
    # Each piece is a page-id free at ps > 1, each in front of the list (LIFO): the
    # over-allocation's page, freed last, is handed out first.
    m, buf = manager()
    s = m.admit("r")
    assert m.extend(s, 10)
    m.commit(s, 10)
    assert m.prepare([s], 6)  # allocated 16: pages 1, 2, 3 (row), 4 (over-allocation)
    m.release(s)
    assert [r["page_ids"] for r in records(buf, "free_pages")] == [[1, 2, 3], [4]]
    assert m.full.free_page_ids()[:4].tolist() == [4, 1, 2, 3]


def test_free_group_releases_a_batch_as_one_call():
    m, buf = manager()
    states = []
    for rid in ("a", "b"):
        s = m.admit(rid)
        assert m.extend(s, 8)
        m.commit(s, 8)
        states.append(s)
    with m.free_group():
        for s in states:
            m.release(s)
        assert m.full.num_free_pages == 28  # held until the group ends
    assert [r["page_ids"] for r in records(buf, "free_pages")] == [[1, 2, 3, 4]]
    assert m.full.num_free_pages == 32


def test_reservation_hands_the_allocator_the_whole_batch():
    m, buf = manager()
    a, b = m.admit("a"), m.admit("b")
    for s, n in ((a, 8), (b, 5)):
        assert m.extend(s, n)
        m.commit(s, n)
    assert m.prepare([a, b], 3)  # a grows 8 -> 11, b needs 8 and has 5 -> 8
    m.commit(b, 3)
    assert m.prepare([a, b], 3)  # a (11) does not grow, b grows 8 -> 11
    last = records(buf, "alloc_extend")[-1]
    assert last["prefix_lens"] == [11, 8] and last["seq_lens"] == [11, 11] and last["out"][0] == []


def test_plain_decode_is_alloc_decode_and_pd_stages_frees(tmp_path):
    plain = tmp_path / "plain.jsonl"
    run_config(dict(SMALL, spec="none", page_size=16), trace=str(plain))
    allocs = [r for r in map(json.loads, plain.read_text().splitlines()[1:]) if r["op"] == "alloc_extend"]
    prefill = [r for r in allocs if not any(r["prefix_lens"])]  # one call per prefill batch
    assert sum(len(r["prefix_lens"]) for r in prefill) == 3 and all("decode" not in r for r in prefill)
    assert all(r["decode"] for r in allocs if r not in prefill)
    pd = tmp_path / "pd.jsonl"
    run_config(dict(SMALL, spec="none", page_size=16, workload="pd"), trace=str(pd))
    frees = [r for r in map(json.loads, pd.read_text().splitlines()[1:]) if r["op"].startswith("free")]
    assert frees and all(r["need_sort"] for r in frees)
    assert all(r.get("need_sort") is None
               for r in map(json.loads, plain.read_text().splitlines()[1:]) if r["op"].startswith("free"))
