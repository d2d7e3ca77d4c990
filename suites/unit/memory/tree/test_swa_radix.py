"""The SWA-aware radix tree (mini_engine/memory/tree/swa_radix.py): worked examples and a property.

The tree is checked call by call against SGLang's own UnifiedRadixCache (FULL + SWA) in
suites/unit/conform/test_swa_radix_vs_sglang.py; the numbers here are the ones that
class gives for the same calls (page size 4, window 8, one 24-token prompt, tokens 1..24),
written out so a reader can follow them by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.memory.audit.tree_checks import swa_tree_violations
from mini_engine.memory.tree.swa_radix import SWARadixCache

PS, WINDOW = 4, 8
TOKENS = list(range(1, 25))


class Pools:
    """Full slots 4.. and SWA slots 100.., handed out in order; frees recorded."""

    def __init__(self):
        self.map = np.zeros(1024, dtype=np.int64)
        self.next_full, self.next_swa = 4, 100
        self.freed_full: list[int] = []
        self.freed_swa: list[int] = []

    def alloc(self, n: int) -> np.ndarray:
        full = np.arange(self.next_full, self.next_full + n, dtype=np.int64)
        self.map[full] = np.arange(self.next_swa, self.next_swa + n)
        self.next_full += n
        self.next_swa += n
        return full

    def free_full(self, slots):
        self.freed_full.extend(np.asarray(slots).tolist())

    def free_swa(self, full_slots):
        full_slots = np.asarray(full_slots, dtype=np.int64)
        self.freed_swa.extend(self.map[full_slots][self.map[full_slots] > 0].tolist())
        self.map[full_slots] = 0

    def window_frees(self, slots):
        """The request's window rule: the SWA pages behind its cursor go back."""
        self.free_swa(slots)


def _tree():
    pools = Pools()
    return pools, SWARadixCache(PS, WINDOW, pools.map, pools.free_full, pools.free_swa)


def test_insert_past_the_cursor_tombstones_the_old_part_and_caps_the_window():
    pools, tree = _tree()
    slots = pools.alloc(24)
    pools.window_frees(slots[:8])  # the request's cursor stood at 8
    assert tree.insert(TOKENS, slots, evicted=8)[0] == 0
    # [0:8] a tombstone (FULL only), [8:16] and [16:24]: the leaf capped at one window.
    assert (tree.full_evictable, tree.swa_evictable) == (24, 16)
    got, node = tree.match_prefix(TOKENS[:23])  # 20 aligned: splits [16:24] at 20
    assert len(got) == 20 and got.tolist() == slots[:20].tolist()
    delta, uuid = tree.inc_lock_ref(node)
    # FULL locks all 20; SWA locks [16:20] and [8:16] (12 tokens cover the window of 8).
    assert (delta, tree.full_evictable, tree.swa_evictable, tree.swa_protected) == (-20, 4, 4, 12)
    assert uuid is not None
    # Only the unlocked leaf [20:24] can go: its FULL and SWA slots both.
    assert tree.evict(0, 4) == (4, 4)
    assert (tree.full_evictable, tree.swa_evictable) == (0, 0)
    assert tree.dec_lock_ref(node, uuid) == 20
    assert (tree.full_evictable, tree.swa_evictable, tree.swa_protected) == (20, 12, 0)
    assert swa_tree_violations(tree) == []


def test_a_tombstone_ends_the_match_until_a_window_of_live_swa_follows():
    pools, tree = _tree()
    first = pools.alloc(24)
    tree.insert(TOKENS, first, evicted=0)
    assert (tree.full_evictable, tree.swa_evictable) == (24, 24)
    # SWA eviction takes the least recent SWA node, [0:16] (its window tail [16:24] was
    # published after it): an internal node, so a tombstone; all 16 of its SWA tokens go.
    assert tree.evict(0, 4) == (0, 16)
    assert (tree.full_evictable, tree.swa_evictable) == (24, 8)
    assert len(tree.match_prefix(TOKENS[:23])[0]) == 0  # [16:20] after the tombstone: 4 < 8
    assert len(tree.match_prefix(TOKENS[:16])[0]) == 0
    # A second request with the same prompt and its cursor at 8 brings [8:16] back.
    second = pools.alloc(24)
    pools.window_frees(second[:8])
    pools.freed_full.clear()
    assert tree.insert(TOKENS, second, evicted=8)[0] == 24
    assert (tree.full_evictable, tree.swa_evictable) == (24, 16)
    # Freed FULL: its own [0:8] (SWA already gone), the tombstone's old [8:16], its own [16:24].
    assert sorted(pools.freed_full) == sorted(second[:8].tolist() + first[8:16].tolist() + second[16:24].tolist())
    assert len(tree.match_prefix(TOKENS[:23])[0]) == 20  # [8:16] live: a whole window again
    assert swa_tree_violations(tree) == []


@settings(max_examples=80, deadline=None)
@given(ps=st.sampled_from([1, 2, 4, 16]), window=st.sampled_from([1, 4, 8, 24]),
       plan=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 80), st.floats(0, 1), st.integers(0, 40)),
                     min_size=1, max_size=12))
def test_shared_prompt_requests_keep_every_slot_once(ps, window, plan):
    """Requests over three prompts sharing a prefix: match, lock, insert with a cursor,
    unlock, evict. Every FULL and SWA slot handed out is in the tree or freed, once; K14 holds."""
    pools = Pools()
    tree = SWARadixCache(ps, window, pools.map, pools.free_full, pools.free_swa)
    shared = list(range(1, 41))
    prompts = [shared + list(range(1000 * (k + 1), 1000 * (k + 1) + 40)) for k in range(3)]
    handed_full, handed_swa = [], []
    for b, n, cursor, evict in plan:
        tokens = prompts[b][:n]
        aligned = n // ps * ps
        matched, node = tree.match_prefix(tokens)
        m = len(matched)
        _, uuid = tree.inc_lock_ref(node)
        fresh = pools.alloc(aligned - m)
        handed_full += fresh.tolist()
        handed_swa += pools.map[fresh].tolist()
        row = np.concatenate([matched, fresh])
        evicted = m + int(cursor * (aligned - m)) // ps * ps
        pools.window_frees(row[m:evicted])
        _, last = tree.insert(tokens[:aligned], row, evicted=evicted, prev_prefix_len=m)
        tree.dec_lock_ref(node, uuid)
        tree.evict(evict, evict)
        assert swa_tree_violations(tree) == []
    in_full = [s for x in tree.nodes() for s in x.full.tolist()]
    in_swa = [s for x in tree.nodes() if x.swa is not None for s in x.swa.tolist()]
    assert sorted(in_full + pools.freed_full) == sorted(handed_full)
    assert sorted(in_swa + pools.freed_swa) == sorted(handed_swa)


@pytest.mark.parametrize("release, evicted", [("0.5.23", (0, 1)), ("0.5.18", (1, 1))])
def test_a_split_orders_the_swa_lru_as_each_release_does(release, evicted):
    """The same calls run on each release's own UnifiedRadixCache in
    suites/unit/conform/test_swa_radix_vs_sglang.py::test_the_worked_cases_on_the_installed_release
    (CI: both releases): page size 1, window 1, a three-token request inserted with its SWA live and
    released, then a one-token match that splits its path. 0.5.23 leaves the back half of a
    split where it was in the SWA LRU and tombstones the middle node for one SWA token; 0.5.18
    moves both halves to the most recent end, so the leaf is least recent and goes whole."""
    pools = Pools()
    tree = SWARadixCache(1, 1, pools.map, pools.free_full, pools.free_swa, release=release)
    tokens = [42, 32, 26]
    _, node = tree.match_prefix(tokens)
    _, uuid = tree.inc_lock_ref(node)
    _, last = tree.insert(tokens, pools.alloc(3))
    tree.dec_lock_ref(node, uuid)
    tree.dec_lock_ref(last, tree.inc_lock_ref(last)[1])
    tree.match_prefix(tokens[:1])
    assert tree.evict(0, 1) == evicted
    assert swa_tree_violations(tree) == []


def test_0518s_swa_lock_passes_over_tombstones():
    """0.5.18's window lock counts live SWA tokens only: it passes over a tombstone, leaving it
    unlocked (0.5.23 counts the tombstone's key toward the window and locks it). On each
    release's own tree: test_swa_radix_vs_sglang.py::test_the_worked_cases_on_the_installed_release."""
    for release, locked in (("0.5.23", 1), ("0.5.18", 0)):
        pools = Pools()
        tree = SWARadixCache(4, 4, pools.map, pools.free_full, pools.free_swa, release=release)
        slots = pools.alloc(12)
        pools.window_frees(slots)  # the cursor stood at 12: the whole key lost its SWA
        _, tomb = tree.insert(list(range(1, 13)), slots, evicted=12)  # a tombstone leaf
        _, receipt = tree.inc_lock_ref(tomb)
        assert tomb.swa is None and tomb.swa_lock == locked
        tree.dec_lock_ref(tomb, receipt)
        assert swa_tree_violations(tree) == [] and all(x.swa_lock == 0 for x in tree.nodes())


@pytest.mark.parametrize("release, pinned", [("0.5.23", 0), ("0.5.18", 4)])
def test_what_a_window_lock_takes_is_read_before_it_is_taken(release, pinned):
    """Admission prices the SWA a match's lock would pin before locking (prefix_admission.
    swa_pinned_by_match reads tree.lock_pins: swa_locks.window, the walk the lock itself runs). A tombstone
    leaf (its SWA freed behind the request's cursor) under a live node, page size 4, window 4:
    0.5.23's lock counts the tombstone as the window and pins no SWA; 0.5.18's passes over it
    and pins the live node above, 4 tokens. The lock then moves exactly that much."""
    pools = Pools()
    tree = SWARadixCache(4, 4, pools.map, pools.free_full, pools.free_swa, release=release)
    tokens = list(range(1, 17))
    tree.insert(tokens[:8], pools.alloc(8))
    matched, _ = tree.match_prefix(tokens)
    fresh = pools.alloc(8)
    pools.window_frees(fresh)
    _, leaf = tree.insert(tokens, np.concatenate([matched, fresh]), evicted=16, prev_prefix_len=len(matched))
    assert tree.lock_pins(leaf) == pinned
    before = tree.swa_evictable
    _, receipt = tree.inc_lock_ref(leaf)
    assert before - tree.swa_evictable == pinned
    tree.dec_lock_ref(leaf, receipt)
    assert tree.swa_evictable == before and swa_tree_violations(tree) == []
