"""kvbench's SWA-aware tree (mini_engine/memory/tree/swa_radix.py) against the installed SGLang's own
UnifiedRadixCache with the FULL and SWA components (harness/conform/sglang_swa_radix.py builds it on a CPU).

Both trees get the same calls: requests that match, lock, allocate the rest of their key
from SGLang's SWA allocator, free the SWA pages behind a cursor (the window rule), insert
with that cursor and the matched length, and unlock; evictions of FULL and of SWA tokens.
After every call: the matched lengths, the length already cached, the FULL lock deltas, the
tokens each eviction frees, the four sizes (FULL / SWA, evictable / protected), and the
whole tree (every node's key, FULL slots, SWA slots or tombstone, both lock counts) agree.
"""

from __future__ import annotations

from array import array
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mini_engine.memory.pool.evict_amount import reclaim_swa
from mini_engine.memory.tree.swa_radix import SWARadixCache
from mini_engine.memory.audit.tree_checks import swa_tree_violations
from mini_engine.memory.trace.tree_calls import tree_key

FULL_PAGES, SWA_PAGES = 48, 24


@pytest.fixture(scope="module")
def sgswa(sg, sg_serving):
    # kvbench's tree runs the installed release's tree core (MemoryRules.release).
    return SimpleNamespace(**vars(sg_serving), release="0.5.18" if sg.version == "0.5.18" else "0.5.23")


class Pair:
    """The two trees, called alike; slots come from SGLang's allocator, both trees share them."""

    def __init__(self, sgt, ps: int, window: int, bigram: bool = False):
        self.sgt, self.ps, self.window, self.bigram = sgt, ps, window, bigram
        self.alloc, self.sg = sgt.build(FULL_PAGES, SWA_PAGES, ps, window, bigram)
        self.map = np.zeros((FULL_PAGES + 1) * ps, dtype=np.int64)  # our full -> SWA map
        self.freed_full: list[int] = []
        self.freed_swa: list[int] = []
        self.our = SWARadixCache(ps, window, self.map, self._free_full, self._free_swa, release=sgt.release)

    def _free_full(self, slots):
        self.freed_full.extend(np.asarray(slots).tolist())

    def _free_swa(self, full_slots):
        full_slots = np.asarray(full_slots, dtype=np.int64)
        self.freed_swa.extend(self.map[full_slots].tolist())
        self.map[full_slots] = 0

    def key(self, tokens):
        """SGLang's key of raw tokens (EAGLE: their bigram view, as its scheduler builds it)."""
        return self.sgt.RadixKey(array("q", tokens), is_bigram=self.bigram)

    def our_key(self, tokens):
        return tree_key(tokens, self.bigram)

    def alloc_slots(self, n: int) -> np.ndarray | None:
        torch = self.sgt.torch
        if n == 0:
            return np.empty(0, np.int64)
        if self.ps == 1:  # SGLang's SWA allocator takes its token path at page size 1
            got = self.alloc.alloc(n)
        elif self.sgt.release == "0.5.18":
            # 0.5.18's alloc_extend kernel does not run in triton's CPU interpreter: whole pages
            # from each pool (n is page-aligned here) and the map between them, as it would set.
            full, swa = self.alloc.full_attn_allocator, self.alloc.swa_attn_allocator
            if full.available_size() < n or swa.available_size() < n:
                return None
            got = full.alloc(n)
            self.alloc.set_full_to_swa_mapping(got, swa.alloc(n))
        else:
            z = torch.zeros(1, dtype=torch.int64)
            seq = torch.tensor([n], dtype=torch.int64)
            got = self.alloc.alloc_extend(z, z.clone(), seq, seq.clone(), torch.tensor([-1]), n)
        if got is None:
            return None
        got = got.numpy().astype(np.int64)
        self.map[got] = self.alloc.full_to_swa_index_mapping[got].numpy()
        return got

    def free_swa_below(self, slots: np.ndarray) -> None:
        """The window rule ran: the request's SWA pages of these (page-aligned) slots go back."""
        if len(slots):
            if hasattr(self.alloc, "free_swa_segment"):
                self.alloc.free_swa_segment(self.sgt.torch.tensor(slots), start_pos=0)
            else:  # 0.5.18's
                self.alloc.free_swa(self.sgt.torch.tensor(slots))
            self._free_swa(slots)


def sg_nodes(pair):
    out, stack = {}, [(pair.sg.tree_core.root_node, ())]
    while stack:
        node, path = stack.pop()
        for child in node.children.values():
            # An EAGLE node's key holds its raw tokens (one more than its bigrams): ours holds the bigrams.
            key = path + tuple(tree_key(list(child.key.token_ids), child.key.is_bigram).tolist())
            full = child.component_data[pair.sgt.FULL]
            swa = child.component_data[pair.sgt.SWA]
            out[key] = (full.value.tolist() if full.value is not None else None,
                        swa.value.tolist() if swa.value is not None else None, full.lock_ref, swa.lock_ref)
            stack.append((child, key))
    return out


def our_nodes(pair):
    out, stack = {}, [(pair.our.root, ())]
    while stack:
        node, path = stack.pop()
        for child in node.children.values():
            key = path + tuple(child.key.tolist())
            out[key] = (child.full.tolist() if child.full is not None else None,
                        child.swa.tolist() if child.swa is not None else None, child.full_lock, child.swa_lock)
            stack.append((child, key))
    return out


BASES = 3


@st.composite
def _sequences(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    root = rng.integers(1, 50, 96).tolist()
    seqs = [root]
    for _ in range(BASES - 1):
        cut = draw(st.integers(0, 80))
        seqs.append(root[:cut] + rng.integers(50, 100, 96 - cut).tolist())
    return seqs


class SWATreeMachine(RuleBasedStateMachine):
    sgt = None  # set by the test

    @initialize(ps=st.sampled_from([1, 2, 4, 8]), window=st.sampled_from([1, 3, 8, 16]), seqs=_sequences(),
                bigram=st.booleans())
    def start(self, ps, window, seqs, bigram):
        self.pair = Pair(self.sgt, ps, window, bigram)
        self.seqs = seqs
        # [our node, our uuid, SGLang's node id, SGLang's receipt, its SWA part released early]
        self.locks: list[list] = []

    def _match(self, tokens):
        p = self.pair
        slots, node = p.our.match_prefix(p.our_key(tokens))
        res = p.sg.match_prefix(p.sgt.base.MatchPrefixParams(key=p.key(tokens)))
        assert p.sgt.matched_len(res) == len(slots)
        return slots, node, res.last_device_node

    def _lock(self, node, sg_id):
        p = self.pair
        delta, uuid = p.our.inc_lock_ref(node)
        got = p.sg.inc_lock_ref(sg_id)
        assert -delta == got.delta
        return [node, uuid, sg_id, got, False]

    def _params(self, lock):
        return self.pair.sgt.unlock_params(lock[2], lock[3])

    def _unlock(self, lock):
        p = self.pair
        node, uuid, sg_id, _, released = lock
        p.our.dec_lock_ref(node, uuid, skip_swa=released)
        p.sg.dec_lock_ref(sg_id, self._params(lock), skip_swa=released)

    @rule(b=st.integers(0, BASES - 1), n=st.integers(1, 96), cursor=st.floats(0, 1), keep=st.booleans())
    def request(self, b, n, cursor, keep):
        """A request: match, lock, allocate the rest, the window frees its SWA behind the
        cursor, insert, move the lock to the insert's node (kept, or released at once)."""
        p, ps = self.pair, self.pair.ps
        tokens = self.seqs[b][:n]
        aligned = len(p.our_key(tokens)) // ps * ps  # a slot per key position (EAGLE: per bigram)
        slots, node, sg_id = self._match(tokens)
        m = len(slots)
        lock = self._lock(node, sg_id)
        fresh = p.alloc_slots(aligned - m)
        if fresh is None:
            self._unlock(lock)
            return
        row = np.concatenate([slots, fresh])
        evicted = m + int(cursor * (aligned - m)) // ps * ps
        p.free_swa_below(row[m:evicted])
        prefix, ours = p.our.insert(p.our_key(tokens)[:aligned], row, evicted=evicted, prev_prefix_len=m)
        res = p.sg.insert(p.sgt.insert_params(p.key(tokens), p.sgt.torch.tensor(row), m, evicted))
        assert res.prefix_len == prefix
        self._unlock(lock)
        new = self._lock(ours, res.last_device_node)
        if keep:
            self.locks.append(new)
        else:
            self._unlock(new)

    @rule(b=st.integers(0, BASES - 1), n=st.integers(0, 96))
    def match(self, b, n):
        self._match(self.seqs[b][:n])

    @precondition(lambda self: self.locks)
    @rule(i=st.integers(0, 10**6))
    def unlock(self, i):
        self._unlock(self.locks.pop(i % len(self.locks)))

    @precondition(lambda self: self.locks)
    @rule(i=st.integers(0, 10**6))
    def release_swa(self, i):
        """A running request's window left its prefix: its lock's SWA part goes early (once),
        SGLang's release_swa on its TreeLock; the FULL part stays until the unlock."""
        lock = self.locks[i % len(self.locks)]
        if lock[4]:
            return
        p = self.pair
        p.our.dec_swa_lock_only(lock[0], lock[1])
        p.sgt.release_swa(p.sg, lock[2], self._params(lock))
        lock[4] = True

    @rule(full=st.integers(0, 64), swa=st.integers(0, 64))
    def evict(self, full, swa):
        p = self.pair
        ours = p.our.evict(full, swa)
        got = p.sg.evict(p.sgt.base.EvictParams(num_tokens=full, swa_num_tokens=swa))
        assert ours == (got.num_tokens_evicted, got.swa_num_tokens_evicted)

    @precondition(lambda self: self.pair.sgt.release == "0.5.23")
    @rule(tail=st.integers(0, 48))
    def reclaim_for_prealloc(self, tail):
        """A PD prealloc's SWA tail on 0.5.23's tail path: kvbench's reclaim (evict_amount.
        reclaim_swa, what tables.make_room_pd runs) on its tree against SGLang's own
        SWATokenToKVPoolAllocator.reclaim_for_prealloc on its tree: the same SWA tokens
        evicted, and the same verdict (SGLang aborts the request where it is short)."""
        p = self.pair
        swa_tokens = -(-tail // p.ps) * p.ps
        before, mine = int(p.alloc.swa_available_size()), len(p.freed_swa)
        ok = reclaim_swa(lambda: before + len(p.freed_swa) - mine, lambda n: p.our.evict(0, n), swa_tokens)
        short = p.alloc.reclaim_for_prealloc(p.sg, 0, swa_tokens)
        assert (ok, len(p.freed_swa) - mine) == (short is None, int(p.alloc.swa_available_size()) - before)

    @invariant()
    def trees_agree(self):
        if not hasattr(self, "pair"):
            return
        p = self.pair
        assert p.our.full_evictable == p.sg.full_evictable_size()
        assert p.our.full_protected == p.sg.full_protected_size()
        assert p.our.swa_evictable == p.sg.swa_evictable_size()
        assert p.our.swa_protected == p.sg.swa_protected_size()
        assert our_nodes(p) == sg_nodes(p)
        assert swa_tree_violations(p.our) == []


def test_swa_tree_equals_sglangs(sgswa):
    SWATreeMachine.sgt = sgswa
    run = SWATreeMachine.TestCase
    run.settings = settings(max_examples=60, stateful_step_count=25, deadline=None,
                            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    run().runTest()


def _machine(sgswa, ps: int, window: int, seq: list[int]) -> SWATreeMachine:
    SWATreeMachine.sgt = sgswa
    m = SWATreeMachine()
    m.start(ps, window, [seq], False)
    return m


def test_the_worked_cases_on_the_installed_release(sgswa):
    """The worked cases of suites/unit/memory/tree/test_swa_radix.py, each run on the installed
    release's own tree beside kvbench's (the trees compared node by node, locks included):
    the split order (ps 1, window 1: 0.5.23 tombstones the middle node for one SWA token,
    0.5.18 evicts the leaf whole), and the window lock over a tombstone (ps 4, window 4:
    0.5.23 locks the tombstone and pins no SWA, 0.5.18 passes over it and pins the live
    node above, 4 tokens)."""
    old = sgswa.release == "0.5.18"
    m = _machine(sgswa, 1, 1, [42, 32, 26])
    m.request(b=0, n=3, cursor=0.0, keep=False)  # inserted with its SWA live, lock released
    m.match(b=0, n=1)  # splits the path
    got = m.pair.sg.evict(m.pair.sgt.base.EvictParams(num_tokens=0, swa_num_tokens=1))
    assert (got.num_tokens_evicted, got.swa_num_tokens_evicted) == ((1, 1) if old else (0, 1))
    assert m.pair.our.evict(0, 1) == (got.num_tokens_evicted, got.swa_num_tokens_evicted)
    m.trees_agree()

    m = _machine(sgswa, 4, 4, list(range(1, 17)))
    m.request(b=0, n=8, cursor=0.0, keep=False)  # the first 8 tokens, SWA live
    before = m.pair.sg.swa_evictable_size()
    m.request(b=0, n=16, cursor=1.0, keep=True)  # 8 more, their SWA freed behind the cursor: a tombstone leaf
    assert before - m.pair.sg.swa_evictable_size() == (4 if old else 0)  # the SWA the lock pins
    m.trees_agree()
