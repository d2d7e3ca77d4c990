"""The memory layer under long random sequences: a hypothesis state machine.

Each machine admits requests, prefills them in chunks or preallocates them as PD
transfers, runs speculative reservations with random accepted lengths and plain
decodes, evicts SWA by the window rule, releases, and filters/merges a batch,
checking K1-K10 after every rule.

Aligned policy: no violation ever, and the pools are full after the drain.
Unaligned policy (ps > 1): an oracle that knows nothing of the checks predicts,
from the request lengths alone, which requests strand slots and how many pages
leak; the test fails unless K1 and K8 report exactly that.

KVBENCH_HYPOTHESIS=long runs many more and longer sequences.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.batch import BatchArrays
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.memory.sizing import dflash_reserve, eagle_reserve, eagle_width, row_width

LONG = os.environ.get("KVBENCH_HYPOTHESIS") == "long"
SETTINGS = settings(
    max_examples=150 if LONG else 15,
    stateful_step_count=300 if LONG else 50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
UNALIGNED_SETTINGS = settings(SETTINGS, max_examples=150 if LONG else 8)
MAX_CTX = 160
MAX_REQS = 6


def machine(ps: int, algo: str, policy: str, free_policy: str):
    class MemoryMachine(RuleBasedStateMachine):
        @initialize(data=st.data())
        def setup(self, data):
            if algo == "dflash":
                bs = data.draw(st.sampled_from([1, 2, 4, 8, 16]), label="block_size")
                self.reserve, self.max_accept = dflash_reserve(bs), bs
            else:
                topk = data.draw(st.sampled_from([1, 2, 4]), label="topk")
                steps = data.draw(st.integers(1, 4), label="steps")
                ndt = data.draw(st.integers(1, 8), label="num_draft_tokens")
                self.reserve = eagle_reserve(ps, topk, steps, ndt)
                self.max_accept = min(steps + 1, eagle_width(ps, topk, steps, ndt))
            width = row_width(MAX_CTX, self.reserve, ps, True)
            per_req = -(-width // ps)
            num_pages = data.draw(st.integers(per_req, per_req * MAX_REQS), label="num_pages")
            swa = data.draw(st.booleans(), label="swa")
            window = data.draw(st.integers(1, 64), label="window") if swa else None
            self.mem = MemoryConfig(ps, num_pages, MAX_REQS, width, policy=policy, free_policy=free_policy, prefix_cache="chunk",
                                    swa_num_pages=num_pages if swa else None, window=window,
                                    draft_window=data.draw(st.integers(1, 48), label="draft_window"))
            self.auditor = Auditor("record")
            self.m = KVManager(self.mem, self.auditor)
            self.prefill: dict[object, int] = {}  # rid -> prompt length of a request in prefill
            self.prefill_states: dict[object, object] = {}
            self.decoding: list = []
            self.batch = BatchArrays.from_states([])
            self.next_rid = 0
            self.step = 0
            self.expected_leaks = 0
            self.leaks_seen = 0

        # -- rules ----------------------------------------------------------------
        @rule(data=st.data())
        def admit(self, data):
            s = self.m.admit(self.next_rid)
            if s is None:
                return
            self.next_rid += 1
            if data.draw(st.booleans(), label="pd"):
                fill = data.draw(st.integers(1, MAX_CTX), label="fill_len")
                if self.m.pd_prealloc(s, fill):
                    self._join(s)
                else:
                    self._release(s)
            else:
                self.prefill[s.rid] = data.draw(st.integers(1, MAX_CTX), label="prompt")
                self.prefill_states[s.rid] = s

        @rule(data=st.data())
        def prefill_chunk(self, data):
            if not self.prefill:
                return
            rid = data.draw(st.sampled_from(sorted(self.prefill)), label="rid")
            s = self.prefill_states[rid]
            chunk = data.draw(st.integers(1, 64), label="chunk")
            n = min(chunk, self.prefill[rid] - s.committed)
            if self.m.extend(s, s.committed + n):
                self.m.commit(s, n)
                if s.committed == self.prefill[rid]:
                    del self.prefill[rid], self.prefill_states[rid]
                    self._join(s)

        @rule(data=st.data())
        def spec_step(self, data):
            ready = [i for i, s in enumerate(self.decoding) if s.committed <= MAX_CTX]
            if not ready:
                return
            if not self.m.prepare([self.decoding[i] for i in ready], self.reserve):
                return
            counts = np.zeros(len(self.decoding), dtype=np.int64)
            for i in ready:
                counts[i] = data.draw(st.integers(1, self.max_accept), label="accepted")
                self.m.commit(self.decoding[i], int(counts[i]))
                self.m.evict_swa(self.decoding[i], self.decoding[i].committed, interval=1)
            self._batch_step(ready, self.reserve, counts)

        @rule()
        def plain_decode(self):
            moved = []
            for i, s in enumerate(self.decoding):
                if s.committed < MAX_CTX and self.m.extend(s, s.committed + 1):
                    self.m.commit(s, 1)
                    self.m.evict_swa(s, s.committed, interval=1)
                    moved.append(i)
            counts = np.zeros(len(self.decoding), dtype=np.int64)
            counts[moved] = 1
            self._batch_step(moved, 1, counts)

        @rule(data=st.data())
        def release(self, data):
            if self.decoding:
                i = data.draw(st.integers(0, len(self.decoding) - 1), label="leaver")
                s = self.decoding[i]
                keep = [j for j in range(len(self.decoding)) if j != i]
                self.decoding = [self.decoding[j] for j in keep]
                self.batch.filter(keep)
                self._release(s)

        @rule()
        def abort_prefill(self):
            if self.prefill:
                rid = min(self.prefill)
                s = self.prefill_states.pop(rid)
                del self.prefill[rid]
                self._release(s)

        # -- helpers --------------------------------------------------------------
        def _batch_step(self, moved, reserve, counts):
            # The engine's path, never a rebuild from the states: the batch plans the
            # extents of the rows that moved from its own arrays, records them, then
            # adds the accepted counts; K10 compares the result with the manager.
            extents = self.batch.allocated.copy()
            plan = self.batch.plan_extents(reserve, ps, self.m.step_aligned, self.mem.row_width)
            extents[moved] = plan[moved]
            self.batch.set_allocated(extents)
            self.batch.commit(counts)

        def _join(self, s):
            self.decoding.append(s)
            self.batch.merge(BatchArrays.from_states([s]))

        def _release(self, s):
            # The oracle: from lengths only, pages the free policy cannot find again.
            if free_policy == "floor" and s.allocated % ps:
                self.expected_leaks += 1  # full pool: the page holding the unaligned tail
                if self.m.swa is not None and s.allocated > s.swa_evicted:
                    self.expected_leaks += 1
            self.m.release(s)

        # -- after every rule ----------------------------------------------------
        @invariant()
        def audited(self):
            if not hasattr(self, "m"):
                return
            self.step += 1
            before = dict(self.auditor.counts)
            found = self.m.check(self.step, self.batch)
            assert self.m.leaked_pages() == self.expected_leaks
            if policy == "aligned":
                assert found == [], [str(v) for v in found]
                assert self.auditor.total == 0
                return
            # Exact writers strand the tail of a page: capacity lost, not a K1 breach.
            assert not [v for v in found if v.id == "K1"], [str(v) for v in found]
            k8 = [v for v in found if v.id == "K8"]
            new = self.auditor.counts.get("K8", 0) - before.get("K8", 0)
            assert new == len(k8)
            leaks_now = sum(v.values["new_leaks"] for v in k8)
            assert leaks_now == self.expected_leaks - self.leaks_seen
            self.leaks_seen = self.expected_leaks
            assert {v.id for v in found} <= {"K1", "K8"}, [str(v) for v in found]

        def teardown(self):
            if not hasattr(self, "m"):
                return
            for s in list(self.m.states.values()):
                self._release(s)
            found = self.m.check(self.step + 1)
            assert self.m.leaked_pages() == self.expected_leaks
            if policy == "aligned":
                assert found == [] and self.expected_leaks == 0
                assert self.m.num_free_pages == self.m.total_pages
                if self.m.swa is not None:
                    assert self.m.swa.allocator.num_free_pages == self.mem.swa_num_pages
                assert self.m.pages_held == self.m.stranded_slots == self.m.reserved_unwritten_slots == 0

    MemoryMachine.__name__ = f"MemoryMachine_{algo}_{policy}_{free_policy}_ps{ps}"
    return MemoryMachine


PAGE_SIZES = [1, 2, 16, 64, 256]


@pytest.mark.parametrize("free_policy", ["segment", "floor", "dedup"])
@pytest.mark.parametrize("algo", ["dflash", "eagle"])
@pytest.mark.parametrize("ps", PAGE_SIZES)
def test_aligned_policy_never_violates_and_drains_full(ps, algo, free_policy):
    run_state_machine_as_test(machine(ps, algo, "aligned", free_policy), settings=SETTINGS)


@pytest.mark.parametrize("free_policy", ["segment", "floor", "dedup"])
@pytest.mark.parametrize("algo", ["dflash", "eagle"])
@pytest.mark.parametrize("ps", [p for p in PAGE_SIZES if p > 1])
def test_unaligned_policy_is_caught_exactly(ps, algo, free_policy):
    # Fewer random runs than the aligned machine: test_unaligned_random_run_is_flagged pins
    # the leak rule on a worked run of every (ps, algo, free policy); this one looks for
    # sequences that break the exact count (a third of the suite's time at 15 examples).
    run_state_machine_as_test(machine(ps, algo, "unaligned", free_policy), settings=UNALIGNED_SETTINGS)


@pytest.mark.parametrize("free_policy", ["segment", "floor"])
@pytest.mark.parametrize("algo", ["dflash", "eagle"])
@pytest.mark.parametrize("ps", [p for p in PAGE_SIZES if p > 1])
def test_unaligned_random_run_is_flagged(ps, algo, free_policy):
    """A fixed random run of exact extents: SGLang's segment free loses nothing; a floor
    free (the floor-free what-if) must be reported as leaks (K8), and K1 stays quiet."""
    import random

    rng = random.Random(ps)
    reserve = dflash_reserve(4) if algo == "dflash" else eagle_reserve(ps, 2, 3, 4)
    width = row_width(MAX_CTX, reserve, ps, True)
    mem = MemoryConfig(ps, -(-width // ps) * MAX_REQS, MAX_REQS, width, policy="unaligned",
                       free_policy=free_policy)
    aud = Auditor("record")
    m = KVManager(mem, aud)
    live = []
    for step in range(200):
        if len(live) < MAX_REQS and rng.random() < 0.3:
            s = m.admit(step)
            n = rng.randint(1, MAX_CTX)
            if m.extend(s, n):  # leaks shrink the pool: a refused prefill is fine here
                m.commit(s, n)
                live.append(s)
            else:
                m.release(s)
        elif live and rng.random() < 0.8:
            ready = [s for s in live if s.committed <= MAX_CTX]
            if ready and m.prepare(ready, reserve):
                for s in ready:
                    m.commit(s, rng.randint(1, 4))
        elif live:
            m.release(live.pop(rng.randrange(len(live))))
        m.check(step)
    assert m.stranded_slots > 0 or any(s.allocated % ps for s in live) or not live
    if free_policy == "segment":
        assert aud.counts == {} and m.leaked_pages() == 0
    else:
        assert aud.counts.get("K8", 0) > 0 and m.leaked_pages() > 0
        assert set(aud.counts) == {"K8"}
