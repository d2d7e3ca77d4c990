"""Growth: how KVManager raises extents (prefill, decode, speculative reservations).

Every allocation of a request's positions goes through _grow, the one writer of
the extent (K2): a batch is planned, checked against both pools and allocated in
one call, all-or-nothing. The *_fits queries ask the same question without
allocating. A part of KVManager (manager.py): the tables it grows are the shared
KVTables; its own state is the plan prepare_fits leaves for prepare.
"""

from __future__ import annotations

import numpy as np

from mini_engine.errors import ConfigError, check_positive
from mini_engine.memory.extents.overflow import RowOverflow
from mini_engine.memory.kv_state import WRITER_CODE, WRITER_KINDS, ReqKVState, state_rows
from mini_engine.memory.pool.evict_amount import alloc_demand
from mini_engine.memory.rules import ALIGN_NAMES
from mini_engine.memory.sizing import next_extents
from mini_engine.memory.tables import KVTables


PREFILL_ALIGN = ALIGN_NAMES["prefill"]  # the prefill writer as the align knob names it ("extend")

class Growth:
    def __init__(self, t: KVTables):
        self.t = t
        # The tables and rules it reads, bound once (never replaced).
        self.mem, self.ps, self.rules, self.trace = t.mem, t.ps, t.rules, t.trace
        self.full, self.swa, self.req_to_token, self.ledger, self.rows = t.full, t.swa, t.req_to_token, t.ledger, t.rows
        self.stranded_by_writer, self.reserve_base, self.reserve_of = t.stranded_by_writer, t.reserve_base, t.reserve_of
        self.report, self.rows_of = t.report, t.rows_of
        # Whether a decode step's reservation page-ceils (the algorithm's writer, or plain decode's).
        self.step_aligned = self.rules.aligns(t.mem.algo or "decode")
        self._fits_plan: tuple | None = None  # prepare_fits's gathered rows and planned extents, for prepare
        self.overflow = RowOverflow(t)  # reservations past the row's end (K4, issue 33579)

    def extend(self, state: ReqKVState, new_len: int) -> bool:
        """Cover positions < new_len (a prefill chunk or a plain decode token)."""
        new_len = check_positive("new_len", new_len, minimum=0)
        target = self.extent_for(state, new_len, PREFILL_ALIGN)
        if target <= state.allocated:
            return True
        return self.grow([state], np.array([target], dtype=np.int64), writer="prefill",
                          aligned=self.rules.aligns(PREFILL_ALIGN))

    def prepare(self, states: list[ReqKVState], reserve: int, *, algo: str | None = None,
                after_fits: bool = False) -> bool:
        """Speculative decode reservation for a batch: one allocation, all-or-nothing.

        after_fits: the caller asked prepare_fits(states, reserve) last and changed no
        extent or committed length since (SGLang's SWA eviction between the check and
        the allocation changes neither), so its gathered rows and planned extents are reused."""
        reserve = check_positive("reserve", reserve)
        if not states:
            return True
        ps = self.ps
        aligned = self.step_aligned if algo is None else self.rules.aligns(algo)
        planned, self._fits_plan = self._fits_plan, None
        if after_fits and planned is not None and planned[0] is states and planned[1:3] == (reserve, aligned):
            rows, cur, com, nxt = planned[3:]
        else:
            rows = self.rows_of(states)
            cur = self.rows.allocated[rows]
            com = self.rows.committed[rows]
            nxt = next_extents(cur, com, reserve, ps, aligned)
        # K4: the row must have headroom for the reservation, plus the page round-up
        # when the reservation page-ceils. A short row's reservation is written past the
        # row or cut at its end, by the profile's rule (mini_engine.memory.extents.overflow).
        pad = ps - 1 if aligned else 0
        cut = self.overflow.any_short(com, nxt, reserve, pad)
        if cut:
            nxt, short = self.overflow.plan(states, rows, com, nxt, reserve, pad)
        if self.trace is not None:
            self.trace.write({
                "op": "prepare", "algo": algo or self.mem.algo or "none",
                "policy": "aligned" if aligned else "unaligned", "aligned": aligned, "reserve": reserve,
                "reqs": [{"rid": _jsonable(s.rid), "committed": int(c), "cur": int(x), "nxt": int(y)}
                         for s, c, x, y in zip(states, com, cur, nxt)],
            })
        writer = "spec" if algo or self.mem.algo else "decode"
        # Plain decode that grows every request by one slot is SGLang's alloc_decode.
        decode = writer == "decode" and bool((nxt - cur == 1).all())
        if not self.grow(states, nxt, cur, rows, writer=writer, aligned=aligned, decode=decode):
            return False
        # K4's record of the reservation. A clamped one was reported above; the state
        # check audits the honoured ones.
        self.reserve_base[rows] = com
        self.reserve_of[rows] = np.where(short, 0, reserve) if cut else reserve
        return True

    def prepare_fits(self, states: list[ReqKVState], reserve: int) -> bool:
        """Whether prepare(states, reserve) would get its slots from the pools as they
        are now, allocating nothing (SGLang's ScheduleBatch.check_decode_mem, which
        update_running_batch asks before prepare_for_decode evicts the SWA window).
        When not, short_pool names the pool that is short."""
        if not states:
            return True
        rows = self.rows_of(states)
        cur = self.rows.allocated[rows]
        com = self.rows.committed[rows]
        nxt = next_extents(cur, com, reserve, self.ps, self.step_aligned)
        self._fits_plan = (states, reserve, self.step_aligned, rows, cur, com, nxt)  # for prepare(after_fits=True)
        return self._fits(states, cur, np.maximum(self.overflow.fits_target(nxt), cur))

    def extend_fits(self, states: list[ReqKVState], new_lens: list[int]) -> bool:
        """Whether extend_batch(states, new_lens) would get its pages, allocating nothing."""
        if not states:
            return True
        cur = self.rows.allocated[state_rows(states)]
        # extent_for over the batch in one pass: the scheduler asks again at every chunk it plans.
        n = np.fromiter(new_lens, dtype=np.int64, count=len(new_lens))
        targets = -(-n // self.ps) * self.ps if self.rules.aligns(PREFILL_ALIGN) else n
        over = np.flatnonzero(targets > self.mem.row_width)
        if len(over):
            self.extent_for(states[over[0]], int(n[over[0]]), PREFILL_ALIGN)  # its one-line error
        # SGLang's PrefillAdder evicts nothing; the batch's alloc_for_extend does (its own amount).
        return self._fits(states, cur, np.maximum(targets, cur), evict=False)

    def extend_batch(self, states: list[ReqKVState], new_lens: list[int]) -> bool:
        """One prefill batch's allocation, all-or-nothing: each state covers positions < its
        new_len, in one allocator call (SGLang's alloc_for_extend makes one alloc_extend
        for the whole batch, so under need_sort its merge test sees the batch's total)."""
        if not states:
            return True
        targets = np.array([self.extent_for(s, check_positive("new_len", n, minimum=0), PREFILL_ALIGN)
                            for s, n in zip(states, new_lens)], dtype=np.int64)
        return self.grow(states, targets, writer="prefill", aligned=self.rules.aligns(PREFILL_ALIGN))

    # -- internals ----------------------------------------------------------------
    def extent_for(self, state: ReqKVState, n: int, writer: str) -> int:
        """The extent a writer records to cover positions < n: page-ceiled if the profile aligns it."""
        target = -(-n // self.ps) * self.ps if self.rules.aligns(writer) else n
        if target > self.mem.row_width:
            raise ConfigError(
                f"row_width={self.mem.row_width} is too small for {n} positions of request "
                f"{state.rid} (extent {target}); size rows with sizing.row_width")
        return target

    def grow(self, states: list[ReqKVState], targets: np.ndarray, cur: np.ndarray | None = None,
              rows: np.ndarray | None = None, *, writer: str, aligned: bool, decode: bool = False) -> bool:
        """Allocate positions [allocated, target) of each state in both pools, all-or-nothing.

        cur, rows: the states' extents and rows, when the caller has already gathered them;
        writer / aligned: who records the new extents and whether they are page-ceiled;
        decode: the call is SGLang's alloc_decode (one slot per request).
        The allocator gets the whole batch, requests that do not grow included, as
        SGLang's does: under need_sort its merge test counts them.
        """
        if rows is None:
            rows = state_rows(states)
        if cur is None:
            cur = self.rows.allocated[rows]
        targets = np.maximum(targets, cur)
        delta = targets - cur
        if not delta.any():
            return True  # SGLang makes no call when nothing is needed
        ps = self.ps
        # whole: every old and new extent is on a page boundary (the aligned writers' common
        # step), so no page is continued and no tail is stranded, one test for the batch.
        whole = not ((cur | targets) % ps).any()
        if whole:
            cur_mod = new_mod = None
            mid = False
        else:
            cur_mod = cur % ps  # where growth continues a page (and the stranded tails of the old extents)
            new_mod = targets % ps
            mid = bool(cur_mod.any())
        if mid or self.trace is not None or self.swa is not None:
            # The slot of position cur - 1 (one flat gather: cheaper than 2-D fancy indexing).
            # Through the flat table: an extent past the row reads the next row, as SGLang's does.
            last = np.where(cur > 0, self.req_to_token.read_flat(rows, np.maximum(cur - 1, 0)), -1)
        else:  # every extent ends on a page boundary: no page is continued, last_loc is never read
            last = None
        # From page boundaries, the new pages are ceil((target - cur) / ps).
        npages = self.full.pages_needed(cur, targets) if mid else (delta + (ps - 1)) // ps
        total = int(npages.sum())
        if self.swa is not None:
            # SWA pages start at the cursor: a fresh PD request holds none below it.
            swa_prefix = np.maximum(cur, self.rows.swa_evicted[rows])
            swa_target = np.maximum(targets, swa_prefix)
            swa_pages = int(self.swa.allocator.pages_needed(swa_prefix, swa_target).sum())
        # SGLang evicts from the prefix tree in its alloc paths, each wanting its own amount;
        # a PD prealloc its own way (per pool).
        if writer == "pd":
            self.t.refused = None
            self.t.reclaim_short = not self.t.make_room_pd(total * ps, swa_pages * ps if self.swa is not None else 0)
            if self.t.reclaim_short:
                self.t.short_pool = "swa"
                return False
        else:
            self.t.make_room(alloc_demand(writer, int(delta.sum()), total, len(states), ps))
        # What a refused PD prealloc would have asked (traced where SGLang makes the call anyway).
        keep = writer == "pd" and self.trace is not None
        if total > self.full.num_free_pages:
            self.t.short_pool = "full"
            if keep:
                self.t.refused = (self.full, cur, targets, last if last is not None else np.full_like(cur, -1))
            return False
        if self.swa is not None:
            if swa_pages > self.swa.allocator.num_free_pages:
                self.t.short_pool = "swa"
                if keep:
                    self.t.refused = (self.swa.allocator, swa_prefix, swa_target, self._swa_last(swa_prefix, cur, last))
                return False
        self._take(rows, cur, targets, last, npages, whole and ps > 1, decode,
                   (swa_prefix, swa_target) if self.swa is not None else None)
        self._set_extents(rows, targets, delta, cur_mod, new_mod, writer, aligned)
        return True

    def _take(self, rows: np.ndarray, cur: np.ndarray, targets: np.ndarray, last: np.ndarray | None,
              npages: np.ndarray, whole: bool, decode: bool, swa: tuple[np.ndarray, np.ndarray] | None) -> None:
        """Allocate what grow checked fits: the full pool's slots into the rows (past a row's
        end where the profile writes there), then the SWA pool's from the cursor (swa: its
        prefix and target lengths), each page into the ledger."""
        got = self.full.traced_allocate(cur, targets, last, decode=decode, trusted=True, npages=npages,
                                        whole=whole)
        page_rows = np.repeat(rows, got.pages_per_req)  # the row of each new page
        past = int(targets.max()) > self.mem.row_width  # a reservation written past its row
        if got.page_starts is not None and not past:  # whole pages: a row's slots are written page by page
            self.req_to_token.write_pages(page_rows, got.page_starts, got.slots, self.ps)
        else:
            slot_rows = np.repeat(rows, got.lens)
            self.req_to_token.write_flat(slot_rows, got.positions, got.slots)
            if past:
                self.overflow.written(slot_rows, got.positions)
        self.ledger.take("full", page_rows, got.pages)
        if swa is not None:
            swa_prefix, swa_target = swa
            sg = self.swa.allocator.traced_allocate(swa_prefix, swa_target, self._swa_last(swa_prefix, cur, last),
                                                    trusted=True,
                                                    decode=decode and bool((swa_target - swa_prefix == 1).all()))
            self.swa.set_map(self.req_to_token.read_flat(np.repeat(rows, sg.lens), sg.positions), sg.slots)
            self.ledger.take("swa", np.repeat(rows, sg.pages_per_req), sg.pages)

    def _swa_last(self, swa_prefix: np.ndarray, cur: np.ndarray, last: np.ndarray) -> np.ndarray:
        """The SWA copy of the last page to continue: only where growth continues the row."""
        return np.where((swa_prefix == cur) & (cur > 0), self.swa.translate(np.maximum(last, 0)), -1)

    def _fits(self, states: list[ReqKVState], cur: np.ndarray, targets: np.ndarray, *, evict: bool = True) -> bool:
        """Whether both pools have the pages to grow each state from cur to its target
        (targets >= cur); when not, short_pool names the pool that is short. evict: make the
        room now (SGLang's check_decode_mem evicts the step's exact pages before it compares);
        else count the tree's evictable pages as free (the allocation will evict them)."""
        need = int(self.full.pages_needed(cur, targets).sum())
        free = self.full.num_free_pages
        if evict:
            self.t.make_room(need * self.ps)
            free = self.full.num_free_pages
        elif self.t.prefix is not None:
            free += self.t.prefix.evictable_pages
        if need > free:
            self.t.short_pool = "full"
            return False
        if self.swa is not None:
            swa_prefix = np.maximum(cur, self.rows.swa_evicted[state_rows(states)])
            swa_free = self.swa.allocator.num_free_pages
            if not evict and self.t.prefix is not None:  # the SWA-aware tree's evictable SWA pages
                swa_free += self.t.prefix.tree.swa_evictable // self.ps
            if int(self.swa.allocator.pages_needed(swa_prefix, np.maximum(targets, swa_prefix)).sum()) > swa_free:
                self.t.short_pool = "swa"
                return False
        return True

    def _set_extents(self, rows: np.ndarray, targets: np.ndarray, delta: np.ndarray, cur_mod: np.ndarray | None,
                     new_mod: np.ndarray | None, writer: str, aligned: bool) -> None:
        """Record the grown extents (delta = targets - old extents >= 0, so K2 holds by
        construction) and move the running sums, all in vector passes over the batch.
        cur_mod, new_mod: the old and the new extents % page_size (None: all on page boundaries)."""
        ps, by, kv = self.ps, self.stranded_by_writer, self.rows
        self.t.sum_extent += int(delta.sum())
        grow = None if int(delta.min()) > 0 else delta > 0  # None: every request grows
        if new_mod is not None and new_mod.any():  # the stranded tail ceil_ps(extent) - extent of the new extents
            tail = np.where(new_mod > 0, ps - new_mod, 0)
            by[writer] += int((tail if grow is None else tail[grow]).sum())
        if cur_mod is not None and cur_mod.any():  # the stranded tail each state's last writer recorded
            old_tail = np.where(cur_mod > 0, ps - cur_mod, 0)
            got, codes = (rows, old_tail) if grow is None else (rows[grow], old_tail[grow])
            lost = np.bincount(kv.writer[got].astype(np.int64) + 1, weights=codes, minlength=len(WRITER_KINDS) + 1)
            for code in np.flatnonzero(lost[1:]).tolist():  # a tail without a writer (-1) counts nowhere
                by[WRITER_KINDS[code]] -= int(lost[code + 1])
        kv.allocated[rows] = targets  # a request that does not grow gets its own extent back
        grown = rows if grow is None else rows[grow]  # only those that grow get a new writer
        kv.writer[grown] = WRITER_CODE[writer]
        kv.aligned[grown] = aligned


def _jsonable(x: object) -> object:
    return x if isinstance(x, (int, str, float)) or x is None else str(x)
