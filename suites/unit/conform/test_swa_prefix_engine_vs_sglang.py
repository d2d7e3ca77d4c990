"""An SWA engine run's tree calls (mini_engine/memory/swa_prefix.py) replayed on SGLang 0.5.23's
own UnifiedRadixCache with FULL and SWA components (sglang_swa_tree.py builds it on a CPU).

A hybrid-SWA engine run with shared prompts and pools small enough to evict logs every
call its SWAPrefixCache makes: matches, inserts (with the FULL slots, the SWA slots the
pool maps them to, the request's SWA cursor and protected length), locks, unlocks and
evictions of FULL and SWA tokens. The same calls, in order, on SGLang's class (its
allocator's full -> SWA map set from the logged SWA slots before each insert, as the
request's allocations had set it) must give the same matched lengths, the same length
already cached per insert, the same FULL lock deltas, the same tokens evicted, the same
FULL and SWA evictable sizes after every call, and the same tree at the end.
"""

from __future__ import annotations

from array import array

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mini_engine.config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request
from suites.unit.conform.test_swa_radix_vs_sglang import our_nodes, sg_nodes, sgswa  # noqa: F401 (the fixture)


def _engine(ps: int, pages: int, window: int, stagger: int, overlap: bool, seed: int):
    cfg = EngineConfig(page_size=ps, pool_tokens=pages * ps, max_context=512, max_running=4, chunked_prefill=64,
                       window=window, overlap=overlap, audit="raise")
    e = Engine(cfg)
    e.manager.prefix.log = []
    rng = np.random.default_rng(seed)
    groups = [rng.integers(1, 400, 200).tolist() for _ in range(2)]
    reqs = [Request(rid=i, prompt=groups[i % 2][: 60 + 17 * (i % 5)] + rng.integers(1, 400, 5 + 7 * (i % 3)).tolist(),
                    max_new_tokens=20 + 9 * (i % 4), arrival_step=i * stagger) for i in range(12)]
    res = e.run(reqs)
    assert res.verdict == "ok", res.error
    return e, res.stats


class _Replay:
    def __init__(self, sgt, e):
        m = e.manager
        self.sgt = sgt
        self.alloc, self.sg = sgt.build(m.mem.num_pages, m.mem.swa_num_pages, m.ps, m.mem.window)
        # The engine's pages came and went on its own side (allocations, window frees,
        # releases), so SGLang's pools see only the tree's frees: they are recorded, not
        # applied (a page the engine reused would be a double free there). The full -> SWA
        # map stays SGLang's own, which the tree reads and clears.
        self.freed = []
        for inner in (self.alloc.full_attn_allocator, self.alloc.swa_attn_allocator):
            inner.free = inner.free_page_ids = self.freed.append
            inner.free_segment = lambda index, start_pos=0: self.freed.append(index)
        self.nodes: dict[int, int] = {}  # our node id -> SGLang's
        self.receipts: dict[int, object] = {}  # row -> SGLang's lock receipt

    def run(self, log):
        sgt, torch, ops = self.sgt, self.sgt.torch, set()
        for op, args, result, evictable in log:
            ops.add(op)
            if op == "match":
                res = self.sg.match_prefix(sgt.base.MatchPrefixParams(key=sgt.RadixKey(array("q", args[0]))))
                assert res.device_prefix_len == result[0], (op, len(args[0]))
                self.nodes[result[1]] = res.last_device_node
            elif op == "insert":
                key, value, swa, evicted, prev = args
                full = torch.tensor(value, dtype=torch.int64)
                self.alloc.set_full_to_swa_mapping(full, torch.tensor(swa, dtype=torch.int64))
                res = self.sg.insert(sgt.base.InsertParams(key=sgt.RadixKey(array("q", key)), value=full,
                                                           prev_prefix_len=prev,
                                                           component_evicted_seqlens={sgt.SWA: evicted}))
                assert res.prefix_len == result[0]
                self.nodes[result[1]] = res.last_device_node
            elif op == "lock":
                got = self.sg.inc_lock_ref(self.nodes[args[0]])
                assert got.delta == result
                self.receipts[args[1]] = got
            elif op == "unlock":
                got = self.receipts.pop(args[1])
                node = self.nodes[args[0]]
                self.sg.dec_lock_ref(node, sgt.base.DecLockRefParams(
                    node_id=node, component_lock_uuids=dict(got.component_lock_uuids)))
            elif op == "move":  # KVManager.batch_rows moved requests (and their locks) to other rows
                moved = {r: self.receipts.pop(r) for r in args[0] if r in self.receipts}
                self.receipts.update((row, moved[was]) for was, row in zip(*args) if was in moved)
            elif op == "evict":
                got = self.sg.evict(sgt.base.EvictParams(num_tokens=args[0], swa_num_tokens=args[1]))
                assert (got.num_tokens_evicted, got.swa_num_tokens_evicted) == tuple(result)
            assert (self.sg.full_evictable_size(), self.sg.swa_evictable_size()) == evictable, op
        return ops


class _Trees:
    """What our_nodes / sg_nodes read: the two trees."""

    def __init__(self, ours, sgt, sg):
        self.our, self.sgt, self.sg = ours, sgt, sg


@pytest.mark.parametrize("ps, pages, window, stagger, overlap", [
    (16, 60, 32, 3, False), (4, 200, 16, 2, True), (1, 700, 8, 5, False), (8, 40, 24, 1, True)])
def test_engine_swa_tree_calls_replay_on_sglangs_tree(sgswa, ps, pages, window, stagger, overlap):  # noqa: F811
    e, stats = _engine(ps, pages, window, stagger, overlap, seed=ps)
    replay = _Replay(sgswa, e)
    ops = replay.run(e.manager.prefix.log)
    assert {"match", "insert", "lock", "unlock"} <= ops
    assert our_nodes(_Trees(e.manager.prefix.tree, sgswa, replay.sg)) == sg_nodes(_Trees(None, sgswa, replay.sg))
    if ps == 16:
        assert "evict" in ops and stats["tree_evicted_pages"] > 0


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(ps=st.sampled_from([1, 4, 16]), window=st.sampled_from([8, 16, 40]), pages=st.integers(30, 120),
       stagger=st.integers(0, 4), overlap=st.booleans(), seed=st.integers(0, 1000))
def test_shared_prompt_swa_runs_hold_k14_and_replay(sgswa, ps, window, pages, stagger, overlap, seed):  # noqa: F811
    """Any shared-prompt SWA run: the engine's audit (K1-K14) raises on a violation, and its
    tree calls replay on SGLang's class with the same results."""
    pages = max(pages, 1200 // ps)  # room for the longest request whole
    e, _ = _engine(ps, pages, window, stagger, overlap, seed)
    replay = _Replay(sgswa, e)
    replay.run(e.manager.prefix.log)
    assert our_nodes(_Trees(e.manager.prefix.tree, sgswa, replay.sg)) == sg_nodes(_Trees(None, sgswa, replay.sg))
