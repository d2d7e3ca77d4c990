"""A prefill batch's new requests take their req_to_token rows in one call, as SGLang's do.

SGLang 0.5.23's alloc_for_extend calls ReqToTokenPool.alloc(reqs) once per batch, which
takes ``free_slots[-n:]`` for the n requests without a row, in batch order. kvbench's
admission pops a row per request and KVManager.batch_rows then hands the same rows out
again in SGLang's order. kvbench's row r is SGLang's row r + 1 (SGLang's row 0 pads
CUDA-graph batches).

Worked example (max_running 4, three requests admitted in the first prefill step): the
free list is rows [1, 2, 3, 4] in SGLang's numbering, so the batch takes [2, 3, 4]: A
row 2, B row 3, C row 4 (kvbench's 1, 2, 3). One pop per request gave A the last row
(kvbench's 3) and C kvbench's row 1: with DFLASH at ps 1, A's overflow then ran past the
table's end instead of into the next row.
"""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any, Callable, List, Optional

from hypothesis import given, settings, strategies as st

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.request import Request

from sglang_source import classes

MAX_REQS, WIDTH = 6, 64


def _pool_cls(sg):
    ns: dict[str, Any] = {"torch": sg.torch, "Optional": Optional, "Callable": Callable, "List": List, "Any": Any,
                          "Req": object, "GPU_MEMORY_TYPE_KV_CACHE": "kv_cache",
                          "TorchMemorySaverAdapter": SimpleNamespace(
                              create=lambda enable: SimpleNamespace(region=lambda *_: nullcontext()))}
    return classes("sglang.srt.mem_cache.memory_pool", {"ReqToTokenPool"}, ns)["ReqToTokenPool"]


def _req():
    """What ReqToTokenPool.alloc reads of a request: whether it already holds a row."""
    kv = SimpleNamespace(req_pool_idx=None, kv_allocated_len=0)
    kv.holds_kv = False
    return SimpleNamespace(kv=kv)


def test_worked_example_three_requests_in_one_prefill_step():
    cfg = EngineConfig(page_size=4, pool_tokens=512, max_running=4, chunked_prefill=256)
    eng = Engine(cfg)
    reqs = [Request(i, list(range(1, 14 + i)), 3) for i in range(3)]
    eng.submit(reqs)
    eng.tick()
    assert [r.kv.row for r in reqs] == [1, 2, 3]
    assert [eng.manager.states[row].rid for row in (1, 2, 3)] == [0, 1, 2]


def test_worked_example_on_sglang(sg):
    pool = _pool_cls(sg)(4, WIDTH, "cpu", False)
    assert pool.alloc([_req(), _req(), _req()]) == [2, 3, 4]


def test_moved_rows_keep_their_prefix_and_lock():
    """A request that matched a prefix keeps its slots and its tree lock in its new row."""
    m = KVManager(MemoryConfig(4, 32, 4, WIDTH), Auditor("record"))
    a = m.admit("A")
    prompt = list(range(1, 18))
    assert m.extend(a, 17)
    m.commit(a, 17)
    m.release(a, prompt, 17)  # 16 tokens into the tree
    b, c = m.admit("B"), m.admit("C")
    slots, node = m.prefix.match(prompt)
    m.prefix.adopt(b, slots, node, 17)
    before = m.req_to_token.host[b.row, :16].tolist()
    was_b, was_c = b.row, c.row
    m.batch_rows([b, c])
    assert (b.row, c.row) == (was_c, was_b)
    assert m.req_to_token.host[b.row, :16].tolist() == before and not m.req_to_token.host[c.row].any()
    assert b.allocated == b.committed == 16 and c.allocated == 0
    assert m.prefix.locks == {b.row: node}
    assert m.states[b.row] is b and m.states[c.row] is c
    assert m.extend_batch([b, c], [17, 5])
    m.release(b)
    m.release(c)
    assert not m.prefix.locks and m.leaked_pages() == 0


# A run of batches: each admits some new requests (one call), then some running ones finish.
_STEPS = st.lists(st.tuples(st.integers(0, MAX_REQS), st.lists(st.integers(0, 10**6), max_size=MAX_REQS)),
                  min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(steps=_STEPS)
def test_rows_match_sglang_alloc(sg, steps):
    pool = _pool_cls(sg)(MAX_REQS, WIDTH, "cpu", False)
    m = KVManager(MemoryConfig(4, 64, MAX_REQS, WIDTH), Auditor("record"))
    live: list = []  # (kvbench state, SGLang row)
    n = 0
    for admit, finishing in steps:
        k = min(admit, m.num_free_rows)
        states = [m.admit(n + i) for i in range(k)]
        n += k
        m.batch_rows(states)
        got = pool.alloc([_req() for _ in range(k)]) if k else []
        assert [s.row + 1 for s in states] == got
        live += zip(states, got)
        for pick in finishing:  # release in the order drawn
            if not live:
                break
            s, row = live.pop(pick % len(live))
            m.release(s)
            pool.free_rows([row])
    assert pool.available_size() == m.num_free_rows
