"""KVManager: everything a request gets from the KV memory layer.

The scheduler talks only to this class. All planning is host data (ints and numpy
arrays; no torch here): a device copy of the tables belongs to the model backend and
follows their change logs, so no call here syncs except the legacy dedup free, which
counts its sync.

KVManager is composed of parts, one object per concept, over the shared state in
KVTables (tables.py: the pools, rows, ledger, live states and counters): Growth
(extents/growth.py: extents: extend, prepare, the *_fits queries), SWACursor
(extents/swa_cursor.py: SWA window eviction, PD prealloc) and Release (extents/release.py: the
free rules of a finished request). Their public calls are bound here as the
manager's own, so a call costs no extra hop. This file holds admission, commits,
the counters and the state checks.
"""

from __future__ import annotations

import numpy as np

from mini_engine.memory.audit.check_all import check_all
from mini_engine.memory.audit.record import Auditor, Violation
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.extents.growth import Growth
from mini_engine.memory.extents.release import Release
from mini_engine.memory.extents.swa_cursor import SWACursor
from mini_engine.memory.kv_state import WRITER_KINDS, ReqKVState, state_rows
from mini_engine.memory.pool.allocator import PagedAllocator
from mini_engine.memory.pool.free_list import FreeGroupBlock
from mini_engine.memory.pool.swa import SWAPool
from mini_engine.memory.tables import KVTables
from mini_engine.memory.trace.writer import TraceWriter
from mini_engine.memory.tree.prefix import BIGRAM_ALGOS, PrefixCache
from mini_engine.memory.tree.swa_prefix import SWAPrefixCache

__all__ = ["KVManager", "WRITER_KINDS"]


class KVManager:
    def __init__(self, mem: MemoryConfig, auditor: Auditor | None = None, trace: TraceWriter | None = None):
        mem = mem.validate()
        full = PagedAllocator(mem.num_pages, mem.page_size, "full", trace, auditor)
        swa = SWAPool(mem.swa_num_pages, mem.page_size, mem.num_pages, trace, auditor) if mem.swa else None
        self.tables = t = KVTables(mem, auditor, trace, full, swa)
        # The shared tables, under the names the engine, the batch builder and the checks read.
        self.mem, self.ps, self.rules, self.auditor, self.trace = mem, t.ps, t.rules, auditor, trace
        self.full, self.swa, self.req_to_token, self.ledger, self.rows = full, swa, t.req_to_token, t.ledger, t.rows
        self.states, self.stranded_by_writer = t.states, t.stranded_by_writer
        self.reserve_base, self.reserve_of, self.seen, self.seen_leaked = t.reserve_base, t.reserve_of, t.seen, t.seen_leaked
        # The parts, and their calls bound as the manager's.
        self.growth = Growth(t)
        self.swa_cursor = SWACursor(t, self.growth)
        self.releaser = Release(t)
        g = self.growth
        self.step_aligned = g.step_aligned
        self.extend, self.extend_batch, self.prepare = g.extend, g.extend_batch, g.prepare
        self.prepare_fits, self.extend_fits = g.prepare_fits, g.extend_fits
        self.evict_swa, self.pd_prealloc = self.swa_cursor.evict_swa, self.swa_cursor.pd_prealloc
        self.release = self.releaser.release
        self.make_room = t.make_room  # evict from the prefix tree until that many tokens are allocatable
        # SGLang's radix prefix cache: the SWA-aware tree for a model with an SWA pool
        # (memory/tree/swa_prefix.py), else the full one; prefix_cache = "chunk" is --disable-radix-cache.
        if mem.rules.prefix_cache == "radix":
            bigram = mem.algo in BIGRAM_ALGOS
            t.prefix = SWAPrefixCache(t, bigram=bigram) if swa is not None else PrefixCache(t, bigram=bigram)
        self.prefix = t.prefix

    def disable_prefix_cache(self) -> bool:
        """Drop the tree before it holds anything (SGLang's PD decode side forces
        --disable-radix-cache); returns whether the manager runs without one now."""
        if self.prefix is not None and not self.prefix.pages and not self.prefix.locks:
            self.tables.prefix = self.prefix = None
        return self.prefix is None

    # -- counters the parts move (KVTables holds them) -------------------------------
    @property
    def step(self) -> int:
        return self.tables.step

    @step.setter
    def step(self, value: int) -> None:
        self.tables.step = value

    @property
    def short_pool(self) -> str | None:
        """The pool that refused the last failed allocation."""
        return self.tables.short_pool

    def trace_refused(self) -> None:
        """Trace the allocation the last failed growth did not make, refused (out null), as
        SGLang makes it where it calls its allocator anyway (a PD prealloc the budget
        admitted: _pre_alloc, then its assertion); kvbench conform replays it there."""
        if self.tables.refused is not None:  # kept only while tracing (growth.grow)
            pool, prefix, seq, last = self.tables.refused
            pool.traced_allocate(prefix, seq, last)

    @property
    def reclaim_short(self) -> bool:
        """Whether the last PD prealloc failed at 0.5.23's SWA tail reclaim (SGLang aborts there)."""
        return self.tables.reclaim_short

    @property
    def row_overflow_slots(self) -> int:
        """Distinct positions past a row that reservations reached (K4; memory.overflow)."""
        return self.tables.row_overflow_slots

    @property
    def row_overwritten_slots(self) -> int:
        """Positions of another req_to_token row that writes past a row hit (issue 33579)."""
        return self.tables.row_overwritten_slots

    @property
    def aligned(self) -> bool:
        """Every writer page-ceils its extent (the host-aligned rules): no slot is ever stranded."""
        return self.rules.all_aligned

    # -- counters the engine reads every step (O(1), host only) -------------------
    @property
    def syncs(self) -> int:
        return self.full.syncs + (self.swa.allocator.syncs if self.swa else 0)

    @property
    def release_syncs(self) -> int:
        """The unique frees' syncs as SGLang pays them: one per free group holding one (with
        0.5.18's SWA allocator, its free_swa's unique and mask too: extents/release_unique.py)."""
        return self.full.release_syncs + (self.swa.allocator.release_syncs if self.swa else 0)

    @property
    def pages_held(self) -> int:
        """Full-pool pages held by live requests (swa_pages_held for the SWA pool)."""
        return self.ledger.total["full"]

    @property
    def swa_pages_held(self) -> int:
        return self.ledger.total["swa"]

    @property
    def stranded_slots(self) -> int:
        """Slots of held pages beyond the recorded extents: off the free list, recorded nowhere."""
        t = self.tables
        return self.ledger.total["full"] * self.ps - (t.sum_extent - t.sum_protected)

    @property
    def reserved_unwritten_slots(self) -> int:
        t = self.tables
        return t.sum_extent - t.sum_committed

    @property
    def tree_pages(self) -> int:
        """Full-pool pages held by the prefix tree (locked or evictable)."""
        return self.prefix.pages if self.prefix is not None else 0

    @property
    def evictable_swa_pages(self) -> int:
        """SWA-pool pages of the SWA-aware tree no request locks (admission counts them as available)."""
        return self.evictable_swa_tokens // self.ps

    @property
    def evictable_swa_tokens(self) -> int:
        """The same in tokens (SGLang's swa_evictable_size); an SWA pool's prefix tree is
        always the SWA-aware one (see __init__)."""
        return self.prefix.tree.swa_evictable if self.swa is not None and self.prefix is not None else 0

    @property
    def tree_swa_pages(self) -> int:
        """SWA-pool pages held by the SWA-aware tree (0 without one)."""
        return self.prefix.swa_pages if self.swa is not None and self.prefix is not None else 0

    @property
    def pages_in_use(self) -> int:
        """Full-pool pages running requests use: their own (pages_held) and the locked tree
        pages their prefixes sit on, each once. The memory a batch occupies, whichever of
        the request or the tree owns a page: without a tree it is pages_held."""
        return self.ledger.total["full"] + (self.prefix.tree.protected_pages if self.prefix is not None else 0)

    @property
    def evictable_pages(self) -> int:
        """Tree pages no request locks: SGLang's admission counts them as available."""
        return self.prefix.evictable_pages if self.prefix is not None else 0

    @property
    def num_free_pages(self) -> int:
        return self.full.num_free_pages

    @property
    def total_pages(self) -> int:
        return self.mem.num_pages

    def leaked_pages(self, pool: str | None = None) -> int:
        """Pages neither free nor held by a live request or the prefix tree (both pools summed unless pool is given)."""
        out = 0
        if pool in (None, "full"):
            out += self.full.num_pages - self.full.num_free_pages - self.ledger.total["full"] - self.tree_pages
        if self.swa and pool in (None, "swa"):
            a = self.swa.allocator
            out += a.num_pages - a.num_free_pages - self.ledger.total["swa"] - self.tree_swa_pages
        return out

    @property
    def num_free_rows(self) -> int:
        return self.req_to_token.num_free_rows

    # -- the free-list order SGLang's scheduler gives its allocator ------------------
    def stage_frees(self) -> bool:
        """Both pools stage their frees and merge them sorted (SGLang's need_sort, set on
        the decode side of PD disaggregation). Only before the first free: a pool keeps
        one order for its life. Returns whether the pools stage their frees."""
        pools = self._allocators()
        if not all(a.need_sort for a in pools) and not any(a.has_freed for a in pools):
            for a in pools:
                a.stage_frees()
        return all(a.need_sort for a in pools)

    def free_group(self) -> FreeGroupBlock:
        """Hold every free of both pools to the end of the block, then release them in
        SGLang's group order (the allocator's free_group_begin), as SGLang does around
        one batch's result processing and its SWA eviction."""
        return FreeGroupBlock(self._allocators())

    def _allocators(self) -> list[PagedAllocator]:
        return [self.full] + ([self.swa.allocator] if self.swa is not None else [])

    # -- request lifecycle --------------------------------------------------------
    def admit(self, rid: object) -> ReqKVState | None:
        row = self.req_to_token.alloc()
        if row is None:
            return None
        self.rows.reset(row)
        state = ReqKVState(rid=rid, row=row, rows=self.rows)
        self.states[row] = state
        return state

    def batch_rows(self, states: list[ReqKVState]) -> None:
        """Give one prefill batch's new requests their rows as SGLang does, in one call.

        admit pops a row per request, so the batch's first request holds the free
        list's last row; SGLang's ReqToTokenPool.alloc takes ``free_slots[-n:]`` for
        the batch's n new requests in batch order, so its first request gets the n-th
        row from the end and its last the last. Same rows, reversed: which row a
        request sits in decides which row its overflow writes into (memory.overflow).
        Only before the batch's allocation: a state may hold a matched prefix (its
        row's slots, its tree lock) but no page of its own yet."""
        old = [s.row for s in states]
        new = old[::-1]
        if old == new:
            return
        held = self.ledger.held
        if any(int(held[pool][old].sum()) for pool in held):
            raise ValueError("batch_rows: rows are handed out before the batch's allocation")
        t, kv = self.tables, self.rows
        t.forget_rows_memo()  # the states' rows change
        self.req_to_token.move_rows(old, new)
        for arr in (kv.committed, kv.allocated, kv.swa_evicted, kv.writer, kv.aligned,
                    t.asked_end, t.reserve_base, t.reserve_of):
            arr[new] = arr[old]
        for s, row in zip(states, new):
            s.move_to(row)
            self.states[row] = s
        if self.prefix is not None:
            self.prefix.move_rows(old, new)  # the tree's locks are kept per row

    def commit(self, state: ReqKVState, n: int) -> None:
        """The forward wrote final KV for n more positions."""
        new = state.committed + n
        if n < 0 or new > state.allocated:
            self.tables.report(Violation("K3", state.rid, self.step, {
                "committed": state.committed, "n": n, "allocated": state.allocated}))
            new = min(max(new, state.committed), state.allocated)
        self.tables.sum_committed += new - state.committed
        state.committed = new

    def commit_batch(self, states: list[ReqKVState], counts: np.ndarray, rows: np.ndarray | None = None) -> None:
        """commit(states[i], counts[i]) for a whole decode batch, in one numpy pass.

        rows: the states' rows, when the caller has already gathered them.
        """
        if rows is None:
            rows = state_rows(states)
        counts = np.asarray(counts, dtype=np.int64)
        if not len(counts):
            return
        com, ext = self.rows.committed[rows], self.rows.allocated[rows]
        new = com + counts
        if int(counts.min()) < 0 or int((ext - new).min()) < 0:  # K3, reported per request as commit does
            for i in np.flatnonzero((counts < 0) | (new > ext)).tolist():
                self.tables.report(Violation("K3", states[i].rid, self.step, {
                    "committed": int(com[i]), "n": int(counts[i]), "allocated": int(ext[i])}))
            new = np.minimum(np.maximum(new, com), ext)
            self.tables.sum_committed += int((new - com).sum())
        else:
            self.tables.sum_committed += int(counts.sum())
        self.rows.committed[rows] = new

    def slots(self, state: ReqKVState, start: int, end: int) -> np.ndarray:
        """Host slots of positions [start, end): where a forward writes (a read-only view)."""
        if not 0 <= start <= end <= state.allocated:
            raise ValueError(f"positions [{start}, {end}) of request {state.rid} are outside its extent {state.allocated}")
        return self.req_to_token.host[state.row, start:end]

    def check(self, step: int | None = None, batch=None, mirror=None) -> list[Violation]:
        """Run the state checks K1-K14 (audit/check_all.py), each violation reported through the auditor.

        batch: the engine's decode BatchArrays; mirror: the backend's device copy of
        the tables, when it keeps one (K10 reads both)."""
        if step is not None:
            self.step = step
        if self.auditor is not None:
            self.auditor.step = self.step
        found = check_all(self, self.step, batch, mirror)
        for v in found:
            self.tables.report(v)
        # Checks close a step: event violations from here on belong to the next one.
        self.step += 1
        if self.auditor is not None:
            self.auditor.step = self.step
        return found
