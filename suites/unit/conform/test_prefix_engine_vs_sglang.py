"""The engine's tree calls (mini_engine/memory/prefix.py) replayed on SGLang 0.5.23's own RadixCache.

An engine run with shared prefixes, a pool small enough to evict, logs every call its
PrefixCache makes on the tree: matches, inserts (with the slots), locks, unlocks and
evictions. The same calls, in order, on SGLang's tree (compiled from the installed
source as test_radix_cache_vs_sglang.py does, its clock a counter) must give the same
matched lengths, the same length already cached per insert, the same lock deltas, the
same evicted slots and the same evictable size after every call.
"""

from __future__ import annotations

from array import array
from types import SimpleNamespace

import numpy as np
import pytest

from mini_engine.config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request
from suites.unit.conform.test_radix_cache_vs_sglang import sgtree  # noqa: F401 (the fixture)


class _Recorder:
    """SGLang's tree frees an evicted leaf through its allocator: keep the slots."""

    def __init__(self, torch):
        self.torch, self.freed, self.device = torch, [], "cpu"

    def free_segment(self, value, start_pos=0):
        self.freed.extend(value.tolist())

    def free(self, value):
        self.freed.extend(value.tolist())


def _engine_log(ps: int, pages: int, stagger: int):
    cfg = EngineConfig(page_size=ps, pool_tokens=pages * ps, max_context=512, max_running=4, chunked_prefill=256,
                       audit="raise")
    e = Engine(cfg)
    e.manager.prefix.log = []
    rng = np.random.default_rng(ps)
    groups = [rng.integers(1, 400, 200).tolist() for _ in range(2)]
    reqs = [Request(rid=i, prompt=groups[i % 2][: 60 + 17 * (i % 5)] + rng.integers(1, 400, 5 + 7 * (i % 3)).tolist(),
                    max_new_tokens=20 + 9 * (i % 4), arrival_step=i * stagger) for i in range(14)]
    res = e.run(reqs)
    assert res.verdict == "ok", res.error
    return e.manager.prefix.log, res.stats


@pytest.mark.parametrize("ps, pages, stagger", [(16, 30, 3), (4, 200, 2), (1, 700, 5)])
def test_engine_tree_calls_replay_on_sglangs_tree(sgtree, ps, pages, stagger):  # noqa: F811
    log, stats = _engine_log(ps, pages, stagger)
    torch, ns = sgtree.torch, sgtree.ns
    freed = _Recorder(torch)
    params = SimpleNamespace(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=freed,
                             page_size=ps, is_eagle=False, eviction_policy="lru", eviction_policy_config=None,
                             enable_kv_cache_events=False, dynamo_kv_event_format=False,
                             kv_event_lora_names=None, enable_metrics=False)
    tree = ns["RadixCache"](params)
    nodes = {}  # our node id -> SGLang's node
    ops = set()
    for op, args, result, evictable in log:
        ops.add(op)
        if op == "match":
            res = tree.match_prefix(ns["MatchPrefixParams"](key=ns["RadixKey"](array("q", args[0]))))
            assert res.device_prefix_len == result[0]
            nodes[result[1]] = res.last_device_node
        elif op == "insert":
            res = tree.insert(ns["InsertParams"](key=ns["RadixKey"](array("q", args[0])),
                                                  value=torch.tensor(args[1], dtype=torch.int64)))
            assert res.prefix_len == result[0]
            nodes[result[1]] = res.last_device_node
        elif op == "lock":
            assert tree.inc_lock_ref(nodes[args[0]]).delta == result
        elif op == "unlock":
            assert tree.dec_lock_ref(nodes[args[0]]).delta == result
        elif op == "evict":
            freed.freed = []
            got = tree.evict(ns["EvictParams"](num_tokens=args[0]))
            assert got.num_tokens_evicted == result[0] and sorted(freed.freed) == result[1]
        assert tree.evictable_size() == evictable, (op, args[:1])
    assert {"match", "insert", "lock", "unlock"} <= ops
    if ps == 16:
        assert "evict" in ops and stats["tree_evicted_pages"] > 0
