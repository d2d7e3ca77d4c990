"""KVTables: the state of the KV memory layer that its parts share.

The pools, the req_to_token rows, the page ledger, the live states and the running
sums and counters, declared in one place. KVManager builds them and hands them to
its parts (growth, the SWA cursor, release), which read and write them here; each
part keeps only its own state besides. A part binds the tables it uses once, at
construction (they are never replaced), and goes through this object for the
counters it moves.
"""

from __future__ import annotations

import numpy as np

from mini_engine.errors import InvariantViolation
from mini_engine.memory.audit.live import Seen
from mini_engine.memory.audit.record import Auditor, Violation
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.kv_state import WRITER_KINDS, KVRows, ReqKVState, state_rows
from mini_engine.memory.pool.allocator import PagedAllocator
from mini_engine.memory.pool.evict_amount import reclaim_swa
from mini_engine.memory.pool.ledger import PageLedger
from mini_engine.memory.pool.req_to_token import ReqToTokenPool
from mini_engine.memory.pool.swa import SWAPool
from mini_engine.memory.trace.writer import TraceWriter


def move_rows(per_row: dict, old: list[int], new: list[int]) -> None:
    """Re-key a per-row dict after KVManager.batch_rows moved the requests of rows `old`
    to rows `new` (a prefix tree's locks and what goes with them)."""
    moved = {r: per_row.pop(r) for r in old if r in per_row}
    per_row.update((row, moved[was]) for was, row in zip(old, new) if was in moved)


class KVTables:
    def __init__(self, mem: MemoryConfig, auditor: Auditor | None, trace: TraceWriter | None,
                 full: PagedAllocator, swa: SWAPool | None):
        self.mem = mem
        self.ps = mem.page_size
        self.rules = mem.rules
        self.auditor = auditor
        self.trace = trace
        self.full = full
        self.swa = swa
        self.req_to_token = ReqToTokenPool(mem.max_reqs, mem.row_width)
        self.ledger = PageLedger({"full": mem.num_pages, "swa": mem.swa_num_pages or 0}, mem.max_reqs)
        self.states: dict[int, ReqKVState] = {}  # live requests by row
        # Every live request's lengths, by row: a batch reads and commits them in one pass.
        self.rows = KVRows(mem.max_reqs)
        self.step = 0  # stamps event violations; the state checks close a step
        # Running sums over live requests, so the per-step counters are O(1).
        self.sum_extent = 0
        self.sum_committed = 0
        self.sum_protected = 0  # positions of live rows that the prefix tree holds (cache_protected_len)
        self.prefix = None  # the radix prefix cache (memory/tree/prefix.py), when the profile runs one
        # Stranded slots (ceil_ps(extent) - extent) of live requests, by who wrote the extent.
        self.stranded_by_writer = {k: 0 for k in WRITER_KINDS}
        self.short_pool: str | None = None  # the pool that refused the last failed allocation
        self.reclaim_short = False  # the last PD prealloc failed at 0.5.23's SWA tail reclaim (make_room_pd)
        # The allocation a refused PD prealloc did not make, kept while tracing (trace_refused):
        # (allocator, prefix, seq, last).
        self.refused: tuple | None = None
        # Row overflow (mini_engine.memory.extents.overflow): distinct positions past a row that
        # reservations reached, and positions of another row the writes past a row hit.
        self.row_overflow_slots = 0
        self.row_overwritten_slots = 0
        self.asked_end = np.zeros(mem.max_reqs, dtype=np.int64)  # by row: furthest end asked
        # Each row's last reservation (committed at the prepare, reserve; 0 = none or clamped),
        # so K4 can be re-checked after the fact; by row, so a batch records it in one write.
        self.reserve_base = np.zeros(mem.max_reqs, dtype=np.int64)
        self.reserve_of = np.zeros(mem.max_reqs, dtype=np.int64)
        # What the last state check saw (K2, K6), and the leaked pages it last reported.
        self.seen = Seen(mem.max_reqs)
        self.seen_leaked: dict[str, int] = {}
        self._last_batch: tuple[list, np.ndarray] = ([], np.empty(0, dtype=np.int64))  # rows_of's memo

    def rows_of(self, states: list[ReqKVState]) -> np.ndarray:
        """The states' rows; a decode batch is usually the last one again, whose rows are kept
        (a state's row is fixed for its life, so the same states have the same rows)."""
        last, rows = self._last_batch
        if states != last:  # ReqKVState compares by identity
            rows = state_rows(states)
            self._last_batch = (list(states), rows)
        return rows

    def forget_rows_memo(self) -> None:
        """rows_of's memo is stale: states moved to other rows (KVManager.batch_rows)."""
        self._last_batch = ([], np.empty(0, dtype=np.int64))

    def start_at_match(self, state, slots: np.ndarray) -> None:
        """A fresh request starts at its prefix match (either tree's adopt): the matched
        slots fill its row as committed and protected positions (the tree's, not its own)."""
        if state.allocated or state.committed:
            raise ValueError(f"adopt needs a fresh request; {state.rid} already has extent {state.allocated}")
        m, row = len(slots), state.row
        if m:
            self.req_to_token.write_flat(np.full(m, row, dtype=np.int64), np.arange(m, dtype=np.int64), slots)
            self.rows.allocated[row] = self.rows.committed[row] = m
            self.sum_extent += m
            self.sum_committed += m
            self.sum_protected += m
        state.protected = m

    def make_room(self, tokens: int) -> None:
        """An allocation that wants `tokens` tokens allocatable is coming: the prefix tree
        evicts first if a pool is short (SGLang's evict_to_free_tokens; with an SWA pool,
        the one demand is checked against both pools, as SGLang's SWA allocator does)."""
        if self.prefix is None:
            return
        free = self.full.num_free_pages
        if self.swa is not None:
            free = min(free, self.swa.allocator.num_free_pages)
        if tokens > free * self.ps:
            self.prefix.make_room(tokens)

    def make_room_pd(self, full_tokens: int, swa_tokens: int) -> bool:
        """A PD prealloc's evictions (disaggregation/decode.py), which are not the alloc
        paths': full_tokens: its new full pages' tokens (_required_alloc_tokens);
        swa_tokens: its SWA tail's, page-ceiled. Full attention: the full shortfall. With an
        SWA pool, 0.5.23 on the tail path first reclaims the tail's SWA shortfall alone
        (reclaim_for_prealloc), then evicts the full pool's alone (_pre_alloc's
        evict_for_alloc; at ps 1 only that one); 0.5.18 evicts only the full tokens short
        of the smaller pool (available_size) and never reclaims SWA for a prealloc.
        False: 0.5.23's reclaim left the SWA pool short of the tail. pop_preallocated
        checks that before _pre_alloc, with or without a tree, and aborts the request
        there, so the full pool is not evicted for it."""
        ps = self.ps
        # pd_radix_tail marks the releases with 0.5.23's PD SWA rules, the reclaim among them
        # (0.5.18 has neither); ps > 1 with an SWA pool is its tail path (_uses_swa_tail_prealloc).
        if self.swa is not None and self.rules.pd_radix_tail and ps > 1:
            prefix = self.prefix
            if not reclaim_swa(lambda: self.swa.allocator.num_free_pages * ps,
                               (lambda n: prefix.evict_short(0, n)) if prefix is not None else (lambda n: None),
                               swa_tokens):
                return False
        if self.prefix is None:
            return True
        if self.swa is not None and not self.rules.pd_radix:
            # No decode-side tree: this one holds prompts' pages (kvbench runs prompts and PD
            # arrivals in one engine), which a decode node would not hold at all: give back
            # both pools' shortfalls, as an alloc path's eviction does.
            self.prefix.evict_short(max(0, full_tokens - self.full.num_free_pages * ps),
                                    max(0, swa_tokens - self.swa.allocator.num_free_pages * ps))
        elif self.swa is None:
            self.make_room(full_tokens)
        elif not self.rules.pd_radix_tail:
            free = min(self.full.num_free_pages, self.swa.allocator.num_free_pages)
            self.prefix.evict_short(max(0, full_tokens - free * ps), 0)
        else:
            self.prefix.evict_short(max(0, full_tokens - self.full.num_free_pages * ps), 0)
        return True

    def report(self, v: Violation) -> None:
        if self.auditor is None:
            raise InvariantViolation(v)
        self.auditor.report(v)

    def give_back(self, pool: str, state: ReqKVState, freed: np.ndarray) -> None:
        """Freed pages leave the request's ledger; a page it did not hold is K8."""
        stray = self.ledger.give_back(pool, state.row, freed)
        if len(stray):
            self.report(Violation("K8", state.rid, self.step, {
                "pool": pool, "reason": "freed pages the request did not hold",
                "pages": stray[:8].tolist()}))
