"""SWAPrefixCache: the SWA-aware radix tree (swa_radix.py) as a part of KVManager (hybrid SWA models).

The same calls as PrefixCache (memory/tree/prefix.py), which the scheduler and the release make
alike; what differs is that a tree page may be in either pool:

* admission (``match``, ``adopt``): the tree's window-gated match of ``tokens[:len - 1]``;
  its FULL slots fill the row (their SWA slots, where the tree has them, are read through
  the pool's map) and the node is locked (FULL path + SWA window, its receipt kept per row).
* ``checkpoint``: insert the page-aligned ``[0, up_to)`` with the request's SWA cursor
  (``swa_evicted``: older positions become tombstones) and its protected length (SGLang's
  ``prev_prefix_len``). The tree frees the row's duplicates itself (through ``_free_full``
  / ``_free_swa``, which give the request's pages back from its ledger); the FULL and SWA
  pages the tree kept leave the request's ledger for the tree's; the row is repointed at
  the tree's slots and ``protected`` becomes the aligned length.
* the window cursor (extents/swa_cursor.py) never frees below ``protected`` (SGLang floors its
  ``swa_evicted_seqlen`` at ``cache_protected_len``): those slots are the tree's.
* ``make_room``: an allocation that wants more tokens than either pool has free evicts
  both shortfalls from the tree in one call (``EvictParams(num_tokens, swa_num_tokens)``).

* ``release_swa``: the early release of a lock's SWA part (SGLang's
  ``release_swa_prefix_lock`` / ``release_swa``, the tree's ``dec_swa_lock_only``); the
  lock's unlock then releases its FULL part only (``skip_swa``). SGLang calls it from
  ``maybe_evict_swa`` under ``SGLANG_OPT_RELEASE_PREFILL_SWA`` (off by default) and on the
  PD decode side after a decode-radix hit on the SWA tail path; the scheduler makes the
  second (prefix_admission.pd_releases_swa).

With a trace open, every call is one ``swa_`` record (memory/trace/tree_calls.py,
``swa_tree_trace``; DESIGN.md section 5): what a replay on SGLang's UnifiedRadixCache
needs to make the same call, what kvbench got, and the FULL and SWA evictable sizes after.

EAGLE keys this tree by bigrams too (SGLang's tree core turns every key into its bigram
view when ``is_eagle``): a key of n tokens is n - 1 bigrams, bigram i sits on slot i, so
the SWA cursor and the protected length count the same positions either way.

No second insert at the prompt boundary (PrefixCache's): SGLang 0.5.23's
``checkpoint_into_tree`` makes it only when the tree has the one FULL component, so the
FULL + SWA tree keeps a finished request's prompt and outputs as one leaf there too.
"""

from __future__ import annotations

import numpy as np

from mini_engine.memory.kv_state import ReqKVState
from mini_engine.memory.tables import KVTables, move_rows
from mini_engine.memory.trace.tree_calls import raw_len, swa_tree_trace, tree_key
from mini_engine.memory.tree.prefix import count_hit
from mini_engine.memory.tree.swa_locks import Receipt
from mini_engine.memory.tree.swa_radix import SWANode, SWARadixCache


class SWAPrefixCache:
    def __init__(self, t: KVTables, *, bigram: bool = False):
        self.t = t
        self.bigram = bigram  # EAGLE's bigram keys (SGLang's tree_core.is_eagle)
        self.ps, self.full, self.swa, self.ledger = t.ps, t.full, t.swa, t.ledger
        self.req_to_token = t.req_to_token
        self.tree = SWARadixCache(t.ps, t.mem.window, t.swa.map_host, self._free_full, self._free_swa,
                                  release=t.rules.release)
        self.locks: dict[int, SWANode] = {}  # row -> the node its request holds locked
        self.receipts: dict[int, Receipt] = {}  # row -> the tree's receipt of that lock (swa_locks.py)
        self.branching: dict = {}  # rid -> its match's SWA branching point (key positions), or None
        self.holders: dict = {}  # row -> the request holding that lock (its trace records name it)
        self.swa_released: set[int] = set()  # rows whose lock's SWA part went early (release_swa)
        self.in_tree = np.zeros(t.mem.num_pages + 1, dtype=bool)  # FULL page -> the tree's (K8)
        self.in_tree_swa = np.zeros(t.mem.swa_num_pages + 1, dtype=bool)  # SWA page -> the tree's (K8)
        self.lookup_tokens = self.hit_tokens = self.readmit_hit_tokens = 0  # as PrefixCache's (count_hit)
        self.evicted_pages = self.peak_pages = 0
        # The tree calls, one trace record each when the run writes a trace (kvbench conform
        # runs them again on SGLang's UnifiedRadixCache: harness/conform/swa_tree.py).
        self.log = swa_tree_trace(t.trace, self.tree, t.mem.window, bigram) if t.trace is not None else None
        self._state: ReqKVState | None = None  # the request whose checkpoint is under way

    # -- figures ---------------------------------------------------------------------
    @property
    def pages(self) -> int:
        return self.tree.total_size() // self.ps

    @property
    def evictable_pages(self) -> int:
        return self.tree.full_evictable // self.ps

    @property
    def swa_pages(self) -> int:
        return self.tree.swa_size() // self.ps

    def _note(self, op: str, fields: dict, raw=None) -> None:
        if self.log is not None:
            self.log.write("swa_" + op, fields, raw)

    # -- the tree's frees --------------------------------------------------------------
    def _split_owner(self, pages: np.ndarray, in_tree: np.ndarray, pool: str) -> int:
        """Pages leaving the tree or the request under way: the tree's lose their mark, the
        request's leave its ledger. Returns how many were the tree's."""
        mine = in_tree[pages]
        in_tree[pages[mine]] = False
        own = pages[~mine]
        if len(own):
            self.t.give_back(pool, self._state, own)
        return int(mine.sum())

    def _free_full(self, slots: np.ndarray) -> None:
        pages = np.asarray(slots, dtype=np.int64)[::self.ps] // self.ps
        if len(pages):
            self.evicted_pages += self._split_owner(pages, self.in_tree, "full")
            self.full.free_pages(pages)

    def _free_swa(self, full_slots: np.ndarray) -> None:
        full_slots = np.asarray(full_slots, dtype=np.int64)
        swa = self.swa.map_host[full_slots[::self.ps]]
        pages = swa[swa > 0] // self.ps
        self.swa.clear_map(full_slots)
        if len(pages):
            self._split_owner(pages, self.in_tree_swa, "swa")
            self.swa.allocator.free_pages(pages)

    # -- admission ---------------------------------------------------------------------
    def match(self, tokens, rid=None, whole: bool = False) -> tuple[np.ndarray, SWANode]:
        """rid: the request's (names its tokens in the trace); whole: match all the tokens
        (PrefixCache.match)."""
        return self._match(tokens, rid, whole, touch=False)

    def touch(self, tokens, rid=None) -> None:
        """Refresh the recency of tokens' cached path (PrefixCache.touch): the walk of a match
        of all of them, the SWA window's LRU included; the request's branching point is not
        set (SGLang's touch_prefix drops the match result)."""
        self._match(tokens, rid, True, touch=True)

    def _match(self, tokens, rid, whole: bool, touch: bool) -> tuple[np.ndarray, SWANode]:
        tokens = np.asarray(tokens, dtype=np.int64)
        n = len(tokens) if whole else max(len(tokens) - 1, 0)
        slots, node = self.tree.match_prefix(tree_key(tokens[:n], self.bigram))
        # SGLang's branching point (finalize_match_result_in_tree_core, set on the request
        # at match): the page-aligned FULL hit where it runs past the SWA-valid match.
        hit = self.tree.full_hit // self.ps * self.ps
        if not touch and self.t.rules.swa_branching and rid is not None:
            self.branching[rid] = hit if hit > len(slots) else None
        # full_hit: the page-aligned FULL hit, so a replay checks the branching point too.
        mark = {"touch": True} if touch else {}
        self._note("match", {"rid": rid, "len": n, "matched": len(slots), "node": node.id, "full_hit": hit, **mark},
                   tokens)
        return slots, node

    def adopt(self, state: ReqKVState, slots: np.ndarray, node: SWANode, lookup: int = 0,
              first: bool = True) -> int:
        count_hit(self, len(slots), lookup, first)
        self.t.start_at_match(state, slots)
        return self._lock(state.row, node, state.rid)

    # -- insert ------------------------------------------------------------------------
    def checkpoint(self, state: ReqKVState, tokens, prompt_len: int, up_to: int) -> None:
        tokens = np.asarray(tokens, dtype=np.int64)[:up_to]
        key = tree_key(tokens, self.bigram)
        aligned = len(key) // self.ps * self.ps
        row, prot = state.row, state.protected
        if aligned < prot:
            return  # nothing past what the request already shares (a bigram key one short)
        host_row = self.req_to_token.host[row]
        swa_of = self.swa.map_host[host_row[:aligned]].copy() if self.log is not None else None
        self._state = state
        value = host_row[:aligned].copy()
        try:
            prefix_len, node = self.tree.insert(key[:aligned], value, evicted=state.swa_evicted,
                                                prev_prefix_len=prot)
        finally:
            self._state = None
        if self.log is not None:  # the SWA slots too: a replay rebuilds the pool's map from them
            self._note("insert", {"rid": state.rid, "len": raw_len(aligned, self.bigram), "slots": value, "swa_slots": swa_of,
                                  "swa_evicted_seqlen": state.swa_evicted, "prev_prefix_len": prot,
                                  "cached": prefix_len, "node": node.id}, tokens)
        if aligned > prot:
            path = self.tree.path_slots(node)
            kept = host_row[prot:aligned:self.ps] == path[prot:aligned:self.ps]
            pages = host_row[prot:aligned:self.ps][kept] // self.ps  # the row's pages the tree keeps
            self.ledger.give_back("full", row, pages)
            self.in_tree[pages] = True
            self.req_to_token.write_flat(np.full(aligned - prot, row, dtype=np.int64),
                                         np.arange(prot, aligned, dtype=np.int64), path[prot:aligned])
            self.t.sum_protected += aligned - prot
            state.protected = aligned
        x = node  # the SWA pages on the path are the tree's now (the request's leave its ledger)
        while x is not self.tree.root:
            if x.swa is not None:
                pages = x.swa[::self.ps] // self.ps
                self.ledger.give_back("swa", row, pages)
                self.in_tree_swa[pages] = True
            x = x.parent
        self.unlock(row)
        self._lock(row, node, state.rid)
        self.peak_pages = max(self.peak_pages, self.pages)

    # -- locks -------------------------------------------------------------------------
    def _lock(self, row: int, node: SWANode, rid) -> int:
        delta, receipt = self.tree.inc_lock_ref(node)
        self.locks[row], self.receipts[row], self.holders[row] = node, receipt, rid
        # delta: the change of the FULL evictable size, as SGLang's result gives it (<= 0);
        # rid: the unlock that releases this lock names it too. The
        # request, not its row: KVManager.batch_rows moves a locked request to another row.
        self._note("lock", {"node": node.id, "rid": rid, "delta": -delta})
        return delta // self.ps

    def move_rows(self, old: list[int], new: list[int]) -> None:
        """The requests of rows `old` now sit in rows `new` (KVManager.batch_rows): their
        locks and those locks' receipts move with them."""
        for per_row in (self.locks, self.receipts, self.holders):
            move_rows(per_row, old, new)
        released = {was for was in old if was in self.swa_released}
        self.swa_released -= released
        self.swa_released |= {row for was, row in zip(old, new) if was in released}

    def release_swa(self, row: int, any_lock: bool = False) -> bool:
        """SGLang's release_swa_prefix_lock: the request's window has moved past its prefix,
        so the SWA part of its lock goes now (the FULL part stays until unlock). Once per
        lock, and only for a lock that reached a whole window (SGLang releases a receipt
        with an SWA uuid only). any_lock: UnifiedRadixCache.release_swa itself, which the PD
        decode side calls after a hit, without that test: a lock short of a window releases
        its SWA part up to the root. Returns whether it released."""
        node = self.locks.get(row)
        if node is None or row in self.swa_released or (self.receipts[row].uuid is None and not any_lock):
            return False
        self.tree.dec_swa_lock_only(node, self.receipts[row])
        self.swa_released.add(row)
        self._note("release_swa", {"node": node.id, "rid": self.holders[row]})
        return True

    def unlock(self, row: int) -> None:
        node = self.locks.pop(row, None)
        if node is not None:
            skip = row in self.swa_released  # SGLang's TreeLock.swa_released: the FULL part only
            self.swa_released.discard(row)
            delta = self.tree.dec_lock_ref(node, self.receipts.pop(row), skip_swa=skip)
            fields = {"node": node.id, "rid": self.holders.pop(row), "delta": delta}
            self._note("unlock", {**fields, "skip_swa": True} if skip else fields)

    def forget(self, state: ReqKVState) -> None:
        self.branching.pop(state.rid, None)  # a retraction resets it (Req.reset_for_retract)
        self.t.sum_protected -= state.protected
        self.unlock(state.row)

    # -- eviction ----------------------------------------------------------------------
    def make_room(self, tokens: int) -> None:
        """SGLang's SWA evict_to_free_tokens (allocator/swa.py): one demand for both pools,
        each pool's shortfall in tokens, evicted in one call (EvictParams(num_tokens,
        swa_num_tokens)); how many tokens an allocation wants is memory/pool/evict_amount.py's."""
        self.evict_short(max(0, tokens - self.full.num_free_pages * self.ps),
                         max(0, tokens - self.swa.allocator.num_free_pages * self.ps))

    def evict_short(self, full: int, swa: int) -> None:
        """One eviction of the given FULL and SWA shortfalls, in tokens (0: that pool is not
        asked), when the tree holds something evictable for them."""
        if (full and self.tree.full_evictable) or (swa and self.tree.swa_evictable):
            freed, swa_freed = self.tree.evict(full, swa)
            self._note("evict", {"num_tokens": full, "swa_num_tokens": swa, "evicted": freed, "swa_evicted": swa_freed})
