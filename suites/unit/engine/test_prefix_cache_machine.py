"""A hypothesis state machine over the engine with shared-prefix requests and a radix tree.

Requests draw their prompts from a few prefix groups (plus own tokens), arrive while
others run, and the pool is small enough that the tree must evict and admission must
retract. After every step the tree's invariants hold: every pool page is free, held by
one request or held by the tree (K8, no leak); no locked node was evicted (K12); lock
counts equal the requests locking through each node and are never negative (K13); the
tree's sizes add up node by node.
"""

from __future__ import annotations

import numpy as np
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.memory.audit.tree_checks import check_k12, check_k13
from mini_engine.request import Request


def _nodes(tree):
    stack = list(tree.root.children.values())
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children.values())


class PrefixEngine(RuleBasedStateMachine):
    @initialize(ps=st.sampled_from([1, 4, 16]), pages=st.integers(16, 40), spec=st.sampled_from(["none", "eagle"]),
                overlap=st.sampled_from(["on", "off"]), seed=st.integers(0, 3))
    def start(self, ps, pages, spec, overlap, seed):
        pages = pages * (16 // ps)  # about the same token capacity at every page size
        self.cfg = EngineConfig(page_size=ps, pool_tokens=pages * ps, max_context=320, max_running=8,
                                chunked_prefill=128, spec=spec, audit="raise", overlap=overlap, seed=seed)
        self.engine = Engine(self.cfg)
        rng = np.random.default_rng(seed)
        self.groups = [rng.integers(1, 500, 96).tolist() for _ in range(3)]
        self.rng = rng
        self.next_rid = 0

    @rule(group=st.integers(0, 2), shared=st.integers(0, 96), own=st.integers(1, 40), out=st.integers(1, 64))
    def submit(self, group, shared, own, out):
        prompt = self.groups[group][:shared] + self.rng.integers(1, 500, own).tolist()
        r = Request(rid=self.next_rid, prompt=prompt, max_new_tokens=out, arrival_step=self.engine.step_no)
        self.next_rid += 1
        self.engine.submit([r])

    @rule(group=st.integers(0, 2), k=st.integers(2, 4))
    def burst(self, group, k):
        # Many long-running requests at once: decode outgrows admission's estimate, so it retracts.
        for _ in range(k):
            self.submit(group, 96, 8, 60)

    @rule(n=st.integers(1, 6))
    def steps(self, n):
        for _ in range(n):
            self.engine.tick()

    @invariant()
    def tree_holds(self):
        if not hasattr(self, "engine"):
            return
        m = self.engine.manager
        assert m.prefix is not None
        tree = m.prefix.tree
        # conservation: free + requests + tree == pool, and the tree's own counts agree
        assert m.num_free_pages + m.pages_held + m.tree_pages == m.total_pages
        assert m.leaked_pages("full") == 0
        assert int(np.count_nonzero(m.prefix.in_tree)) == m.tree_pages
        locked = unlocked = 0
        for n in _nodes(tree):
            assert n.lock_ref >= 0
            if n.lock_ref:
                locked += len(n.key)
            else:
                unlocked += len(n.key)
        assert (locked, unlocked) == (tree.protected_size, tree.evictable_size)
        assert check_k12(m, 0) == [] and check_k13(m, 0) == []
        assert not self.engine.auditor.counts, self.engine.auditor.records[:3]

    def teardown(self):
        if not hasattr(self, "engine"):
            return
        e = self.engine
        res = e.run()  # to completion, then the drain releases whatever still runs
        assert res.verdict == "ok", res.error
        m = e.manager
        event(f"tree evicted: {m.prefix.evicted_pages > 0}")
        event(f"prefix hit: {m.prefix.hit_tokens > 0}")
        event(f"retracted: {e.sched.retractions > 0}")
        assert not m.prefix.locks and m.tree_pages == m.prefix.evictable_pages
        assert m.num_free_pages + m.tree_pages == m.total_pages


PrefixEngine.TestCase.settings = settings(max_examples=30, stateful_step_count=20, deadline=None)
TestPrefixEngine = PrefixEngine.TestCase
