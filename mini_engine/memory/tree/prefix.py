"""PrefixCache: SGLang's radix prefix cache as a part of KVManager (full attention).

The tree itself is radix_cache.py (SGLang's RadixCache, page-granular); this part
moves pages between a request's row and the tree the way SGLang 0.5.23's
UnifiedRadixCache (FULL component) and mem_cache/common.py do:

* admission (``match``, ``adopt``): the longest cached prefix of the request's
  first ``len - 1`` tokens (``_compute_max_prefix_len``: one token is always
  computed), page-aligned. Its slots are written into the request's row, its
  length becomes the extent, the committed length and ``cache_protected_len``,
  and the node it ends on is locked. Those pages are the tree's: they are not
  allocated again and are never in the request's ledger.
* ``checkpoint`` (SGLang's ``checkpoint_into_tree``, after a prefill chunk and at
  finish): insert the page-aligned ``[0, up_to)``; the row's own copies of what the
  tree already held (``[protected, prefix_len)``) are freed, one free per tree node the
  insert walked, as the insert's FreeDeviceKV actions do (0.5.18's RadixCache caller:
  the whole range in one free; ``MemoryRules.dedup_per_node``), what the insert added
  leaves the request's ledger for the tree's; the row is repointed at the tree's
  slots, the lock moves to the insert's last node and ``protected`` becomes the
  aligned length. With a prompt shorter than the key, a second insert of the
  prompt splits the leaf at the prompt boundary (SGLang does, so eviction can drop
  the output KV and keep the prompt).
* release (memory/extents/release.py) frees ``[protected, owned)`` and the over-allocation,
  then ``unlock``s; a retraction inserts nothing (``checkpoint=False``).
* ``make_room``: an allocation short of free tokens evicts the shortfall from the
  tree first (SGLang's ``evict_to_free_tokens``), the tokens wanted being SGLang's for
  that alloc path (memory/pool/evict_amount.py) or, after a retraction, the scheduler's.

EAGLE keys the tree by bigrams (``RadixKey(is_bigram=spec_algorithm.is_eagle())``):
a key of n tokens is n - 1 bigrams long, so the page alignment is one token shorter.

Not here: SWA models (SGLang's UnifiedRadixCache with the SWA component). KVManager runs
their tree through memory/tree/swa_prefix.py (the same calls) over memory/tree/swa_radix.py
(tombstones, the window-gated match, window locks, SWA eviction).
"""

from __future__ import annotations

import numpy as np

from mini_engine.memory.audit.record import Violation
from mini_engine.memory.kv_state import ReqKVState
from mini_engine.memory.tables import KVTables, move_rows
from mini_engine.memory.trace.tree_calls import TreeTrace, evicted_pages, raw_len, tree_key
from mini_engine.memory.tree.radix_cache import RadixCache, RadixNode

BIGRAM_ALGOS = ("eagle", "eagle3")


def count_hit(cache, matched: int, lookup: int, first: bool) -> None:
    """An admission's hit, counted as SGLang's req.cached_tokens counts it: on a request's first
    admission only (prepare_for_extend skips a request with retracted_stain set, 0.5.23 and
    0.5.18 alike); a re-admission's hit goes to readmit_hit_tokens."""
    if first:
        cache.lookup_tokens += lookup
        cache.hit_tokens += matched
    else:
        cache.readmit_hit_tokens += matched


class PrefixCache:
    def __init__(self, t: KVTables, *, bigram: bool = False):
        self.t = t
        self.ps, self.full, self.ledger, self.req_to_token = t.ps, t.full, t.ledger, t.req_to_token
        self.bigram = bigram
        self.tree = RadixCache(t.ps, free=self._evicted)
        self.locks: dict[int, RadixNode] = {}  # row -> the node its request holds locked
        self.in_tree = np.zeros(t.mem.num_pages + 1, dtype=bool)  # page -> held by the tree (K8)
        # SGLang's req.cached_tokens: a request's first admission only (a retracted request's
        # re-admission is not counted, its retracted_stain); the re-admissions' hits apart.
        self.lookup_tokens = 0  # tokens of every first admission's lookup
        self.hit_tokens = 0  # of those, matched in the tree (not computed again)
        self.readmit_hit_tokens = 0  # matched on a retracted request's re-admission
        self.evicted_pages = 0
        self.peak_pages = 0
        # The tree calls, one trace record each when the run writes a trace (memory/trace/tree_calls.py;
        # kvbench replay and conform run them again on kvbench's and SGLang's trees).
        self.log = TreeTrace(t.trace, self.tree, bigram) if t.trace is not None else None
        self._evicting: list[int] = []  # the slots of the eviction under way (log only)

    def _note(self, op: str, fields: dict, raw=None) -> None:
        if self.log is not None:
            self.log.write(op, fields, raw)

    # -- figures ---------------------------------------------------------------------
    @property
    def pages(self) -> int:
        return self.tree.pages

    @property
    def evictable_pages(self) -> int:
        return self.tree.evictable_pages

    # -- keys ------------------------------------------------------------------------
    def _key(self, tokens: np.ndarray) -> np.ndarray:
        """The tree key of tokens: the tokens, or (EAGLE) one bigram per adjacent pair."""
        return tree_key(tokens, self.bigram)

    # -- admission ---------------------------------------------------------------------
    def match(self, tokens, rid=None, whole: bool = False) -> tuple[np.ndarray, RadixNode]:
        """(slots, node) of the longest cached prefix of tokens[:len - 1], page-aligned.
        rid: the request's (names its tokens in the trace); whole: of all the tokens (a PD
        arrival computes none of its prompt here)."""
        return self._match(tokens, rid, whole, {})

    def touch(self, tokens, rid=None) -> None:
        """Refresh the recency of tokens' cached path, as a match of all of them would
        (SGLang's touch_prefix: the tree walk alone, its key prompt + outputs uncut, a
        split where it ends inside a node); nothing is locked or counted. The trace
        records it as the match it is (marked ``touch``), so a replay walks the same path."""
        self._match(tokens, rid, True, {"touch": True})

    def _match(self, tokens, rid, whole: bool, mark: dict) -> tuple[np.ndarray, RadixNode]:
        tokens = np.asarray(tokens, dtype=np.int64)
        n = len(tokens) if whole else max(len(tokens) - 1, 0)
        key = self._key(tokens[:n])
        slots, node = self.tree.match_prefix(key)
        self._note("match", {"rid": rid, "len": n, "matched": len(slots), "node": node.id, **mark}, tokens)
        return slots, node

    def adopt(self, state: ReqKVState, slots: np.ndarray, node: RadixNode, lookup: int = 0,
              first: bool = True) -> int:
        """A fresh request starts at its match: the slots fill its row, the node is locked.
        lookup: the tokens it looked up (the hit rate's denominator); first: its first
        admission (else a retracted request's re-admission: count_hit). Returns the change
        of the tree's evictable pages (<= 0)."""
        count_hit(self, len(slots), lookup, first)
        self.t.start_at_match(state, slots)
        return self._lock(state.row, node)

    # -- insert ------------------------------------------------------------------------
    def checkpoint(self, state: ReqKVState, tokens, prompt_len: int, up_to: int) -> None:
        """Insert the request's page-aligned [0, up_to) and move its lock to the insert's end."""
        tokens = np.asarray(tokens, dtype=np.int64)[:up_to]
        key = self._key(tokens)
        aligned = len(key) // self.ps * self.ps
        row, prot = state.row, state.protected
        if aligned < prot:
            return  # nothing past what the request already shares (a bigram key one short)
        host_row = self.req_to_token.host[row]
        prefix_len = self.tree.insert(key[:aligned], host_row[:aligned].copy())
        node = self.tree.last_node
        self._note("insert", {"rid": state.rid, "len": raw_len(aligned, self.bigram), "slots": host_row[:aligned],
                              "prev_prefix_len": prot, "cached": prefix_len, "node": node.id}, tokens)
        if prefix_len > prot:  # the row's own copies of pages the tree already had, freed by the insert
            segments = self.tree.overlap_past(prot) if self.t.rules.dedup_per_node else [(prot, prefix_len)]
            for s, e in segments:
                self.t.give_back("full", state, self.full.free_segment(host_row, s, e))
        p_key = self._key(tokens[:prompt_len])
        p_len = len(p_key) // self.ps * self.ps
        if 0 < p_len < aligned:  # split the leaf at the prompt boundary (SGLang's second insert)
            got = self.tree.insert(p_key[:p_len], host_row[:p_len].copy())
            self._note("insert", {"rid": state.rid, "len": raw_len(p_len, self.bigram), "slots": host_row[:p_len],
                                  "prev_prefix_len": p_len, "cached": got, "node": self.tree.last_node.id}, tokens)
        new_at = max(prefix_len, prot)
        if aligned > new_at:  # the insert's new pages: the tree's now, off the request's ledger
            pages = host_row[new_at:aligned:self.ps] // self.ps
            stray = self.ledger.give_back("full", row, pages)
            if len(stray):
                self.t.report(Violation("K8", state.rid, self.t.step, {
                    "pool": "full", "reason": "the tree took pages the request did not hold",
                    "pages": stray[:8].tolist()}))
            self.in_tree[pages] = True
        if aligned > prot:
            new = self.tree.path_slots(node)
            self.req_to_token.write_flat(np.full(aligned - prot, row, dtype=np.int64),
                                         np.arange(prot, aligned, dtype=np.int64), new[prot:aligned])
            self.t.sum_protected += aligned - prot
            state.protected = aligned
        self.unlock(row)
        self._lock(row, node)
        self.peak_pages = max(self.peak_pages, self.tree.pages)

    # -- locks -------------------------------------------------------------------------
    def _lock(self, row: int, node: RadixNode) -> int:
        self.locks[row] = node
        delta = self.tree.inc_lock_ref(node)
        self._note("lock", {"node": node.id, "delta": delta})
        return delta // self.ps

    def move_rows(self, old: list[int], new: list[int]) -> None:
        """The requests of rows `old` now sit in rows `new` (KVManager.batch_rows)."""
        move_rows(self.locks, old, new)

    def unlock(self, row: int) -> None:
        node = self.locks.pop(row, None)
        if node is not None:
            self._note("unlock", {"node": node.id, "delta": self.tree.dec_lock_ref(node)})

    def forget(self, state: ReqKVState) -> None:
        """The request leaves (release): its protected length leaves the running sum, its lock goes."""
        self.t.sum_protected -= state.protected
        self.unlock(state.row)

    # -- eviction ----------------------------------------------------------------------
    def make_room(self, tokens: int) -> None:
        """Evict least recently used leaves until `tokens` tokens are allocatable (or none is
        evictable): SGLang's evict_to_free_tokens asks the tree for the shortfall in tokens,
        and the tree evicts whole leaves until at least that many are gone. How many tokens
        an allocation wants is SGLang's per path (memory/pool/evict_amount.py)."""
        short = tokens - self.full.num_free_pages * self.ps
        if short > 0 and self.tree.evictable_size:
            self._evicting = []
            freed = self.tree.evict(short)
            self._note("evict", {"num_tokens": short, "evicted": freed,
                                 "pages": evicted_pages(self._evicting, self.ps)})

    def _evicted(self, slots: np.ndarray) -> None:
        pages = np.asarray(slots, dtype=np.int64)[::self.ps] // self.ps
        if self.log is not None:
            self._evicting.extend(np.asarray(slots).tolist())
        self.in_tree[pages] = False
        self.evicted_pages += len(pages)
        self.full.free_pages(pages)
