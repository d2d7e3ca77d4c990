"""How much the prefix tree evicts before an allocation, against the installed SGLang's alloc paths.

kvbench's amounts (mini_engine/memory/pool/evict_amount.py, retraction.retract_demand) next to
SGLang's own code, compiled from the installed source (its modules need a GPU stack to
import): alloc_paged_token_slots_extend, alloc_paged_token_slots_decode and
alloc_token_slots are run with an allocator that records what they ask
evict_from_tree_cache for; the shortfall is 0.5.23's
BaseTokenToKVPoolAllocator.evict_to_free_tokens expression, or 0.5.18's
evict_from_tree_cache run on a tree that records what it is asked to evict; the
retraction's is release_req's. Release-neutral: CI runs it under 0.5.23 and 0.5.18, so
the sglang-pre-35265 profile's amounts (the same rules) are 0.5.18's own.

Worked example (the module docstring's): ps 16, 3 pages free, a prefill batch of two
requests growing by 20 and 10 tokens (3 new pages). SGLang wants 30 + 2 x 16 = 62 tokens
allocatable, so its tree evicts a 14-token shortfall: one 16-token leaf. The exact-pages
rule kvbench had asked for nothing.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Optional

import numpy as np
from hypothesis import given, settings, strategies as st

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.memory.pool.evict_amount import alloc_demand
from mini_engine.memory.trace.tree_calls import TreeTrace
from mini_engine.request import Request
from mini_engine.scheduler.retraction import retract_demand

from sglang_source import assigned, functions, methods

ALLOC = "sglang.srt.mem_cache.allocation"


def _sglang_paths(sg):
    """SGLang's three alloc paths and a function giving what they asked evict_from_tree_cache for."""
    asked: list[int] = []
    ns: dict[str, Any] = {"torch": sg.torch, "Optional": Optional, "BasePrefixCache": object,
                          "evict_from_tree_cache": lambda tree, n: asked.append(int(n)),
                          "page_interleave_shard_size": lambda allocator: 1}
    functions(ALLOC, {"alloc_token_slots", "alloc_paged_token_slots_extend", "alloc_paged_token_slots_decode"}, ns)
    if sg.version == "0.5.18":  # its extend path adds the page per request inline
        return ns, None, asked
    base = methods("sglang.srt.mem_cache.allocator.base", "BaseTokenToKVPoolAllocator",
                   {"get_extend_allocation_demand"}, {"torch": sg.torch})
    return ns, base["get_extend_allocation_demand"], asked


def sglang_demand(sg, writer: str, ps: int, cur: list[int], nxt: list[int]) -> int:
    """Tokens SGLang's alloc path for this writer asks to have allocatable."""
    torch = sg.torch
    ns, demand, asked = _sglang_paths(sg)
    allocator = SimpleNamespace(page_size=ps, alloc=lambda n: torch.zeros(n),
                                alloc_extend=lambda *a, **k: torch.zeros(1),
                                alloc_decode=lambda *a, **k: torch.zeros(1))
    allocator.get_extend_allocation_demand = lambda *a, **k: demand(allocator, *a, **k)
    tree = SimpleNamespace(token_to_kv_pool_allocator=allocator)
    c, n = torch.tensor(cur), torch.tensor(nxt)
    tokens = int((n - c).sum())
    if ps == 1:  # alloc_for_extend, alloc_for_decode and alloc_for_spec_decode all take alloc_token_slots
        ns["alloc_token_slots"](tree, tokens)
    elif writer == "decode":
        ns["alloc_paged_token_slots_decode"](tree, n, n, c - 1)
    else:  # a prefill batch; a speculative reservation (ALLOC_EXTEND_FUNCS) alike
        ns["alloc_paged_token_slots_extend"](tree, c, c, n, n, c - 1, tokens)
    assert len(asked) == 1
    return asked[0]


def sglang_shortfall(sg, demand: int, available: int) -> int:
    """What the installed release asks the tree to evict before an allocation wanting `demand`
    tokens with `available` free (<= 0: nothing): 0.5.23's evict_to_free_tokens shortfall,
    0.5.18's evict_from_tree_cache (full-attention arm) run on a recording tree."""
    if sg.version != "0.5.18":
        f = assigned("sglang.srt.mem_cache.allocator.base", "BaseTokenToKVPoolAllocator.evict_to_free_tokens",
                     "shortfall")
        return f({"num_tokens": demand, "self": SimpleNamespace(available_size=lambda: available)})
    asked = []

    class _SWA:  # evict_from_tree_cache's isinstance test names it; a full-attention pool is not one
        pass

    ns = functions("sglang.srt.mem_cache.common", {"evict_from_tree_cache"},
                   {"BasePrefixCache": object, "SWATokenToKVPoolAllocator": _SWA,
                    "EvictParams": lambda num_tokens: num_tokens})
    tree = SimpleNamespace(is_chunk_cache=lambda: False, evict=asked.append,
                           token_to_kv_pool_allocator=SimpleNamespace(available_size=lambda: available))
    ns["evict_from_tree_cache"](tree, demand)
    return asked[0] if asked else 0


def _pages(cur: np.ndarray, nxt: np.ndarray, ps: int) -> int:
    return int((-(-nxt // ps) - (-(-cur // ps))).sum())


_BATCH = st.lists(st.tuples(st.integers(0, 300), st.integers(0, 40)), min_size=1, max_size=6)


@settings(max_examples=80, deadline=None)
@given(writer=st.sampled_from(["prefill", "spec", "decode"]), ps=st.sampled_from([1, 4, 16, 64]), batch=_BATCH)
def test_alloc_demand_is_sglangs(sg, writer, ps, batch):
    cur = np.array([c for c, _ in batch], dtype=np.int64)
    nxt = cur + np.array([g for _, g in batch], dtype=np.int64)
    if writer == "decode":
        nxt = cur + 1  # plain decode: one slot each
    ours = alloc_demand(writer, int((nxt - cur).sum()), _pages(cur, nxt, ps), len(batch), ps)
    assert ours == sglang_demand(sg, writer, ps, cur.tolist(), nxt.tolist())


def test_retract_demand_is_sglangs(sg):
    from sglang.srt.environ import envs  # SGLang's environment knobs: an optional dependency, as the fixture

    f = assigned("sglang.srt.managers.schedule_batch", "release_req", "num_tokens")
    for remaining in (0, 1, 7):
        assert retract_demand(remaining) == f({"remaing_req_count": remaining, "envs": envs})


class _Records(list):
    """A trace writer that keeps the records (the tree's evict records are read back)."""

    write = list.append


def _record(m: KVManager) -> _Records:
    """The tree's calls from here on, as their trace records."""
    recs = _Records()
    m.prefix.log = TreeTrace(recs, m.prefix.tree, False)
    return recs


def _tree_manager(ps: int, pages: int) -> KVManager:
    """A manager whose tree holds four evictable leaves (a page each at ps > 1), every page else free."""
    m = KVManager(MemoryConfig(ps, pages, 8, 1024, policy="unaligned"), Auditor("raise"))
    for i in range(4):
        s = m.admit(f"old{i}")
        prompt = [1000 * (i + 1) + t for t in range(ps + 1)]
        assert m.extend(s, ps + 1)
        m.commit(s, ps + 1)
        m.release(s, prompt, ps + 1)  # its first page goes into the tree
    assert m.prefix.evictable_pages >= 4
    return m


def _hold(m: KVManager, free: int) -> None:
    """A running request takes pages until `free` are left."""
    s = m.admit("holder")
    assert m.extend(s, (m.num_free_pages - free) * m.ps)


def test_worked_example_a_prefill_batch_evicts_a_page_per_request_more():
    m = _tree_manager(16, 12)
    _hold(m, 3)
    recs = _record(m)
    b, c = m.admit("B"), m.admit("C")
    assert m.extend_batch([b, c], [20, 10])
    evicts = [r for r in recs if r["op"] == "evict"]
    assert [r["num_tokens"] for r in evicts] == [14]  # 62 wanted, 48 allocatable
    assert m.prefix.evicted_pages == 1 and m.num_free_pages == 1


@settings(max_examples=40, deadline=None)
@given(ps=st.sampled_from([1, 4, 16]), free=st.integers(0, 6), grow=st.lists(st.integers(1, 40), min_size=1, max_size=3),
       writer=st.sampled_from(["prefill", "decode"]))
def test_the_tree_is_asked_for_sglangs_shortfall(sg, ps, free, grow, writer):
    m = _tree_manager(ps, 64 if ps == 1 else 24)
    _hold(m, free)
    states = [m.admit(i) for i in range(len(grow))]
    if writer == "decode":  # requests one slot past a page boundary's start, growing by one
        for s in states:
            assert m.extend(s, ps)
            m.commit(s, ps)
        free_before, evictable = m.num_free_pages, m.prefix.evictable_pages
        recs = _record(m)
        cur = [ps] * len(states)
        nxt = [ps + 1] * len(states)
        m.prepare(states, 1)
    else:
        free_before, evictable = m.num_free_pages, m.prefix.evictable_pages
        recs = _record(m)
        cur, nxt = [0] * len(grow), grow
        m.extend_batch(states, grow)
    want = sglang_shortfall(sg, sglang_demand(sg, writer, ps, cur, nxt), free_before * ps)
    evicts = [r["num_tokens"] for r in recs if r["op"] == "evict"]
    assert evicts == ([want] if want > 0 and evictable else [])


def test_a_retraction_asks_for_twenty_tokens_per_request_kept():
    """Every retraction of a run is followed by SGLang's release_req eviction: room for 20
    tokens per request still in the decode batch (kvbench's estimate over-admits here)."""
    cfg = EngineConfig(spec="dflash", block_size=4, page_size=1, pool_tokens=400, max_running=24, admission="estimate")
    engine = Engine(cfg)
    sched, asked = engine.sched, []
    retract_for, make_room = sched._retract_for, engine.manager.make_room

    def spied_retract_for(batch):
        kept_before = len(batch)
        done = retract_for(batch)
        if done:
            assert asked and asked[-1] == retract_demand(len(batch)) and len(batch) in (kept_before, kept_before - 1)
        return done

    def spied_make_room(tokens):
        asked.append(tokens)
        make_room(tokens)

    sched._retract_for, engine.manager.make_room = spied_retract_for, spied_make_room
    res = engine.run([Request(i, list(range(i * 1000, i * 1000 + 20 + i)), 200) for i in range(8)])
    assert res.verdict == "ok" and res.stats["retractions"] > 0
