"""PagedAllocator against a plain reference model, over random call sequences."""

from __future__ import annotations

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from mini_engine.memory.pool.allocator import PagedAllocator


class AllocatorModel(RuleBasedStateMachine):
    """Requests are lists of slots by position; the model knows which pages are whose."""

    @initialize(ps=st.sampled_from([1, 2, 4, 16]), pages=st.integers(1, 40))
    def setup(self, ps, pages):
        self.ps, self.n = ps, pages
        self.a = PagedAllocator(pages, ps)
        self.reqs: list[list[int]] = []

    @rule(data=st.data())
    def extend_batch(self, data):
        k = data.draw(st.integers(1, 4))
        grow = data.draw(st.lists(st.integers(0, 3 * self.ps + 3), min_size=k, max_size=k))
        # Negative targets are new requests; existing ones appear at most once per batch.
        targets = data.draw(st.lists(st.integers(-k, len(self.reqs) - 1), min_size=k, max_size=k, unique=True))
        rows = [self.reqs[t] if t >= 0 else [] for t in targets]
        prefix = [len(r) for r in rows]
        seq = [p + g for p, g in zip(prefix, grow)]
        last = [r[-1] if r else -1 for r in rows]
        free_before = self.a.num_free_pages
        need = sum(-(-s // self.ps) - (-(-p // self.ps)) for p, s in zip(prefix, seq))
        out = self.a.alloc_extend(prefix, seq, last)
        if need > free_before:
            assert out is None and self.a.num_free_pages == free_before
            return
        assert out is not None and self.a.num_free_pages == free_before - need
        for r, p, o in zip(rows, prefix, out):
            assert [s % self.ps for s in o.tolist()] == [(p + i) % self.ps for i in range(len(o))]
            r.extend(o.tolist())
        for t, r in zip(targets, rows):
            if t < 0:
                self.reqs.append(r)

    @precondition(lambda self: self.reqs)
    @rule(data=st.data())
    def decode_step(self, data):
        # The manager's per-step call: trusted int64 arrays, one slot each (alloc_decode's fast path).
        k = data.draw(st.integers(1, len(self.reqs)))
        picked = data.draw(st.lists(st.integers(0, len(self.reqs) - 1), min_size=k, max_size=k, unique=True))
        rows = [self.reqs[i] for i in picked]
        prefix = np.array([len(r) for r in rows], dtype=np.int64)
        last = np.array([r[-1] if r else -1 for r in rows], dtype=np.int64)
        npages = (prefix % self.ps == 0).astype(np.int64)
        free_before = self.a.num_free_pages
        got = self.a.allocate(prefix, prefix + 1, last, decode=True, trusted=True, npages=npages)
        if int(npages.sum()) > free_before:
            assert got is None and self.a.num_free_pages == free_before
            return
        assert got is not None and got.positions.tolist() == prefix.tolist()
        for r, p, slot in zip(rows, prefix.tolist(), got.slots.tolist()):
            assert slot % self.ps == p % self.ps and (p % self.ps == 0 or slot == r[-1] + 1)
            r.append(slot)

    @precondition(lambda self: self.reqs)
    @rule(data=st.data(), dedup=st.booleans())
    def free_request(self, data, dedup):
        r = self.reqs.pop(data.draw(st.integers(0, len(self.reqs) - 1)))
        if dedup:
            self.a.free(np.array(r, dtype=np.int64))
        else:
            self.a.free_pages(np.unique(np.array(r, dtype=np.int64) // self.ps))

    @invariant()
    def conserved(self):
        if not hasattr(self, "a"):
            return
        held = [s // self.ps for r in self.reqs for s in r]
        held_pages = set(held)
        free = self.a.free_page_ids().tolist()
        assert 0 not in held_pages and 0 not in free
        assert len(free) == len(set(free)) and not held_pages & set(free)
        assert len(held_pages) + len(free) == self.n
        slots = [s for r in self.reqs for s in r]
        assert len(slots) == len(set(slots))  # no slot handed out twice


def test_allocator_matches_reference_model():
    run_state_machine_as_test(AllocatorModel, settings=settings(max_examples=40, stateful_step_count=40,
                                                                deadline=None))
