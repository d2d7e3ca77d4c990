"""KVManager: everything a request gets from the KV memory layer.

The scheduler talks only to this class. All planning is host data (ints and numpy
arrays; no torch here): a device copy of the tables belongs to the model backend and
follows their change logs, so no call here syncs except the legacy dedup free, which
counts its sync.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from mini_engine.errors import ConfigError, EvictFloorError, InvariantViolation, check_positive
from mini_engine.memory.allocator import PagedAllocator
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.invariants import Auditor, Violation, check_all
from mini_engine.memory.kv_state import WRITER_CODE, WRITER_KINDS, KVRows, ReqKVState
from mini_engine.memory.ledger import PageLedger
from mini_engine.memory.req_to_token import ReqToTokenPool
from mini_engine.memory.sizing import next_extents, pd_swa_tail_len, swa_evict_target
from mini_engine.memory.swa import SWAPool
from mini_engine.memory.trace import TraceWriter

__all__ = ["KVManager", "WRITER_KINDS"]
# The rows of a batch of states, one C-level pass (a generator costs ~5x more per request).
_ROW = attrgetter("row")


def _column(get, states: list[ReqKVState]) -> np.ndarray:
    return np.fromiter(map(get, states), dtype=np.int64, count=len(states))


class KVManager:
    def __init__(self, mem: MemoryConfig, auditor: Auditor | None = None, trace: TraceWriter | None = None):
        self.mem = mem.validate()
        self.ps = mem.page_size
        self.profile = mem.profile
        # Whether a decode step's reservation page-ceils (the algorithm's writer, or plain decode's).
        self.step_aligned = self.profile.aligns(mem.algo or "decode")
        self.auditor = auditor
        self.trace = trace
        self.full = PagedAllocator(mem.num_pages, mem.page_size, "full", trace, auditor)
        self.swa = (SWAPool(mem.swa_num_pages, mem.page_size, mem.num_pages, trace, auditor)
                    if mem.swa else None)
        self.req_to_token = ReqToTokenPool(mem.max_reqs, mem.row_width)
        pools = {"full": mem.num_pages, "swa": mem.swa_num_pages or 0}
        self.ledger = PageLedger(pools, mem.max_reqs)
        self.states: dict[int, ReqKVState] = {}  # live requests by row
        # Every live request's lengths, by row: a batch reads and commits them in one pass.
        self.rows = KVRows(mem.max_reqs)
        self._last_batch: tuple[list, np.ndarray] = ([], np.empty(0, dtype=np.int64))  # _rows_of's memo
        self.step = 0
        # Running sums over live requests, so the per-step counters are O(1).
        self._sum_extent = 0
        self._sum_committed = 0
        # Stranded slots (ceil_ps(extent) - extent) of live requests, by who wrote the extent.
        self.stranded_by_writer = {k: 0 for k in WRITER_KINDS}
        self.short_pool: str | None = None  # the pool that refused the last failed allocation
        self.row_overflow_slots = 0  # reservations cut at the row's end (K4), summed
        # Each row's last reservation (committed at the prepare, reserve; 0 = none or clamped),
        # so K4 can be re-checked after the fact; by row, so a batch records it in one write.
        self.reserve_base = np.zeros(mem.max_reqs, dtype=np.int64)
        self.reserve_of = np.zeros(mem.max_reqs, dtype=np.int64)
        # What state checks saw last time, for K2/K6 as state properties.
        self._seen: dict[int, tuple[object, int, int]] = {}
        self._seen_leaked: dict[str, int] = {}

    @property
    def aligned(self) -> bool:
        """Every writer page-ceils its extent (the host-aligned rules): no slot is ever stranded."""
        return self.profile.all_aligned

    # -- counters the engine reads every step (O(1), host only) -------------------
    @property
    def syncs(self) -> int:
        return self.full.syncs + (self.swa.allocator.syncs if self.swa else 0)

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
        return self.ledger.total["full"] * self.ps - self._sum_extent

    @property
    def reserved_unwritten_slots(self) -> int:
        return self._sum_extent - self._sum_committed

    @property
    def num_free_pages(self) -> int:
        return self.full.num_free_pages

    @property
    def total_pages(self) -> int:
        return self.mem.num_pages

    def leaked_pages(self, pool: str | None = None) -> int:
        """Pages neither free nor held by a live request (both pools summed unless pool is given)."""
        out = 0
        if pool in (None, "full"):
            out += self.full.num_pages - self.full.num_free_pages - self.ledger.total["full"]
        if self.swa and pool in (None, "swa"):
            a = self.swa.allocator
            out += a.num_pages - a.num_free_pages - self.ledger.total["swa"]
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

    def free_group(self) -> _FreeGroupBlock:
        """Hold every free of both pools to the end of the block, then release them in
        SGLang's group order (the allocator's free_group_begin), as SGLang does around
        one batch's result processing and its SWA eviction."""
        return _FreeGroupBlock(self._allocators())

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

    def extend(self, state: ReqKVState, new_len: int) -> bool:
        """Cover positions < new_len (a prefill chunk or a plain decode token)."""
        new_len = check_positive("new_len", new_len, minimum=0)
        target = self._extent_for(state, new_len, "extend")
        if target <= state.allocated:
            return True
        return self._grow([state], np.array([target], dtype=np.int64), writer="prefill",
                          aligned=self.profile.aligns("extend"))

    def prepare(self, states: list[ReqKVState], reserve: int, *, algo: str | None = None) -> bool:
        """Speculative decode reservation for a batch: one allocation, all-or-nothing."""
        reserve = check_positive("reserve", reserve)
        if not states:
            return True
        ps, width = self.ps, self.mem.row_width
        aligned = self.step_aligned if algo is None else self.profile.aligns(algo)
        rows = self._rows_of(states)
        cur = self.rows.allocated[rows]
        com = self.rows.committed[rows]
        nxt = next_extents(cur, com, reserve, ps, aligned)
        # K4: the row must have headroom for the reservation, plus the page round-up
        # when the reservation page-ceils.
        # short = (width - com < reserve + pad) | (nxt > width); nxt > width needs cur > width or
        # com > width - reserve - pad, so two reductions tell whether any row is short.
        pad = ps - 1 if aligned else 0
        cut = int(com.max()) > width - reserve - pad or int(nxt.max()) > width
        if cut:
            short = (width - com < reserve + pad) | (nxt > width)
            self.row_overflow_slots += int(np.maximum(nxt - width, 0).sum())
            for i in np.flatnonzero(short):
                self._report(Violation("K4", states[i].rid, self.step, {
                    "committed": int(com[i]), "reserve": reserve, "nxt": int(nxt[i]),
                    "row_width": width, "page_size": ps}))
            nxt = np.minimum(nxt, width)
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
        if not self._grow(states, nxt, cur, rows, writer=writer, aligned=aligned, decode=decode):
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
        rows = self._rows_of(states)
        cur = self.rows.allocated[rows]
        nxt = next_extents(cur, self.rows.committed[rows], reserve, self.ps, self.step_aligned)
        return self._fits(states, cur, np.maximum(np.minimum(nxt, self.mem.row_width), cur))

    def extend_fits(self, states: list[ReqKVState], new_lens: list[int]) -> bool:
        """Whether extend_batch(states, new_lens) would get its pages, allocating nothing."""
        if not states:
            return True
        cur = self.rows.allocated[_column(_ROW, states)]
        targets = np.array([self._extent_for(s, n, "extend") for s, n in zip(states, new_lens)], dtype=np.int64)
        return self._fits(states, cur, np.maximum(targets, cur))

    def extend_batch(self, states: list[ReqKVState], new_lens: list[int]) -> bool:
        """One prefill batch's allocation, all-or-nothing: each state covers positions < its
        new_len, in one allocator call (SGLang's alloc_for_extend makes one alloc_extend
        for the whole batch, so under need_sort its merge test sees the batch's total)."""
        if not states:
            return True
        targets = np.array([self._extent_for(s, check_positive("new_len", n, minimum=0), "extend")
                            for s, n in zip(states, new_lens)], dtype=np.int64)
        return self._grow(states, targets, writer="prefill", aligned=self.profile.aligns("extend"))

    def commit(self, state: ReqKVState, n: int) -> None:
        """The forward wrote final KV for n more positions."""
        new = state.committed + n
        if n < 0 or new > state.allocated:
            self._report(Violation("K3", state.rid, self.step, {
                "committed": state.committed, "n": n, "allocated": state.allocated}))
            new = min(max(new, state.committed), state.allocated)
        self._sum_committed += new - state.committed
        state.committed = new

    def _rows_of(self, states: list[ReqKVState]) -> np.ndarray:
        """The states' rows; a decode batch is usually the last one again, whose rows are kept
        (a state's row is fixed for its life, so the same states have the same rows)."""
        last, rows = self._last_batch
        if states != last:  # ReqKVState compares by identity
            rows = _column(_ROW, states)
            self._last_batch = (list(states), rows)
        return rows

    def commit_batch(self, states: list[ReqKVState], counts: np.ndarray, rows: np.ndarray | None = None) -> None:
        """commit(states[i], counts[i]) for a whole decode batch, in one numpy pass.

        rows: the states' rows, when the caller has already gathered them.
        """
        if rows is None:
            rows = _column(_ROW, states)
        counts = np.asarray(counts, dtype=np.int64)
        if not len(counts):
            return
        com, ext = self.rows.committed[rows], self.rows.allocated[rows]
        new = com + counts
        if int(counts.min()) < 0 or int((ext - new).min()) < 0:  # K3, reported per request as commit does
            for i in np.flatnonzero((counts < 0) | (new > ext)).tolist():
                self._report(Violation("K3", states[i].rid, self.step, {
                    "committed": int(com[i]), "n": int(counts[i]), "allocated": int(ext[i])}))
            new = np.minimum(np.maximum(new, com), ext)
            self._sum_committed += int((new - com).sum())
        else:
            self._sum_committed += int(counts.sum())
        self.rows.committed[rows] = new

    def evict_swa(self, state: ReqKVState, pre_len: int | None = None, *, interval: int | None = None) -> int:
        """SGLang's window rule once pre_len (default: committed) positions are final; returns SWA pages freed.

        interval: the eviction interval (the profile's in decode, 1 within chunked
        prefill); the threshold follows the profile's prefix cache (sizing.swa_evict_target).
        """
        if self.swa is None:
            return 0
        p = self.profile
        old = state.swa_evicted
        if pre_len is None:
            pre_len = state.committed
        new = swa_evict_target(pre_len, old, self.mem.window, self.ps,
                               p.swa_eviction_interval if interval is None else interval, p.prefix_cache)
        if new <= old:
            return 0
        new = self._write_cursor(state, new)
        freed = self.swa.evict(self.req_to_token.host[state.row], old, new)
        self._give_back("swa", state, freed)
        return len(freed)

    def pd_prealloc(self, state: ReqKVState, fill_len: int) -> bool:
        """Decode side of PD: full KV for fill_len transferred tokens, SWA only for the tail.

        The cursor is checked (K6) at its write: a caller that skips the floor fails there.
        """
        fill_len = check_positive("fill_len", fill_len)
        if state.allocated or state.committed:
            raise ValueError(f"pd_prealloc needs a fresh request; {state.rid} already has extent {state.allocated}")
        target = self._extent_for(state, fill_len, "pd")
        if self.swa is not None and self.ps > 1:  # SGLang takes the tail path only when ps > 1
            window = self.mem.window
            tail = pd_swa_tail_len(fill_len, window, self.ps, self.profile.pd_radix)
            value = fill_len - tail
            if self.trace is not None:
                self.trace.write({"op": "swa_prealloc", "fill_len": fill_len, "window": window,
                                  "tail": fill_len - value, "evicted": value})
            self._write_cursor(state, value, fill_len=fill_len, window=window)
        if not self._grow([state], np.array([target], dtype=np.int64), writer="pd",
                          aligned=self.profile.aligns("pd")):
            state.swa_evicted = 0  # the prealloc did not happen: the fresh state is restored whole
            return False
        self._sum_committed += fill_len
        state.committed = fill_len
        return True

    def release(self, state: ReqKVState) -> int:
        """Free the request's pages under the profile's free rule and return its row."""
        row, extent, ps = state.row, state.allocated, self.ps
        if self.states.get(row) is not state:
            # A stale state's row may already belong to another request: freeing it would free theirs.
            raise ValueError(f"release of request {state.rid}: it is not live (released already?)")
        host_row = self.req_to_token.host[row]
        cursor = state.swa_evicted
        if self.profile.free == "dedup":
            if extent:
                self._give_back("full", state, self.full.free(host_row[:extent]))
            if self.swa is not None:
                self._give_back("swa", state, self.swa.release_dedup(host_row, cursor, extent))
        else:
            for start, end, swa in self._release_pieces(state.committed, extent, cursor):
                if swa:  # SGLang frees the SWA copy first, then the full page
                    self._give_back("swa", state, self.swa.free_positions(host_row, start, end))
                self._give_back("full", state, self.full.free_segment(host_row, start, end))
            if self.swa is not None:
                self.swa.clear_row(host_row, cursor, extent)
        self.ledger.drop_row("full", row)
        if self.swa is not None:
            self.ledger.drop_row("swa", row)
        self._sum_extent -= extent
        self._sum_committed -= state.committed
        if state.writer:
            self.stranded_by_writer[state.writer] -= -(-extent // ps) * ps - extent
        self.reserve_base[row] = self.reserve_of[row] = 0
        self.req_to_token.free(row, extent)
        del self.states[row]
        self._seen.pop(row, None)
        state.detach()  # its row is free for the next request; the state keeps its values
        state.released = True
        return row

    def slots(self, state: ReqKVState, start: int, end: int) -> np.ndarray:
        """Host slots of positions [start, end): where a forward writes (a read-only view)."""
        if not 0 <= start <= end <= state.allocated:
            raise ValueError(f"positions [{start}, {end}) of request {state.rid} are outside its extent {state.allocated}")
        return self.req_to_token.host[state.row, start:end]

    def check(self, step: int | None = None, batch=None, mirror=None) -> list[Violation]:
        """Run the state checks K1-K10 and report each violation through the auditor.

        batch: the engine's decode BatchArrays; mirror: the backend's device copy of
        the tables, when it keeps one (K10 reads both)."""
        if step is not None:
            self.step = step
        if self.auditor is not None:
            self.auditor.step = self.step
        found = check_all(self, self.step, batch, mirror)
        for v in found:
            self._report(v)
        # Checks close a step: event violations from here on belong to the next one.
        self.step += 1
        if self.auditor is not None:
            self.auditor.step = self.step
        return found

    # -- internals ----------------------------------------------------------------
    def _release_pieces(self, owned: int, extent: int, cursor: int) -> list[tuple[int, int, bool]]:
        """The (start, end, with_swa) position ranges a release frees, in SGLang's order.

        SGLang's release_kv_cache frees the row [protected, owned) (protected is 0:
        kvbench has no prefix tree), then the over-allocation [ceil_ps(owned),
        allocated); within each, the part below the SWA cursor goes back full-side
        only, first. Each range is one page-id free per pool, and which pages land
        in front of the free list depends on that order. The ranges are clipped at
        the free rule's end (_free_end), so together they free exactly its pages.
        """
        ps, end = self.ps, self._free_end(extent)
        owned = min(owned, extent)
        top = -(-owned // ps) * ps
        out = []
        for a, b in ((0, min(top, end)), (top, end)):
            if b <= a:
                continue
            dead = min(max(cursor, a), b) if self.swa is not None else a
            if dead > a:
                out.append((a, dead, False))
            if b > dead:
                out.append((dead, b, self.swa is not None))
        return out

    def _free_end(self, extent: int) -> int:
        """End of the pages a host free takes, by stride over the recorded extent.

        segment (SGLang): every page the extent touches, the row's segment
        [0, owned) plus the over-allocation [ceil_ps(owned), extent), so nothing
        leaks. floor: whole pages of the extent only, so an unaligned extent drops
        its last page (one leaked page per such release).
        """
        if self.profile.free == "floor":
            return extent // self.ps * self.ps
        return -(-extent // self.ps) * self.ps

    def _extent_for(self, state: ReqKVState, n: int, writer: str) -> int:
        """The extent a writer records to cover positions < n: page-ceiled if the profile aligns it."""
        target = -(-n // self.ps) * self.ps if self.profile.aligns(writer) else n
        if target > self.mem.row_width:
            raise ConfigError(
                f"row_width={self.mem.row_width} is too small for {n} positions of request "
                f"{state.rid} (extent {target}); size rows with sizing.row_width")
        return target

    def _grow(self, states: list[ReqKVState], targets: np.ndarray, cur: np.ndarray | None = None,
              rows: np.ndarray | None = None, *, writer: str, aligned: bool, decode: bool = False) -> bool:
        """Allocate positions [allocated, target) of each state in both pools, all-or-nothing.

        cur, rows: the states' extents and rows, when the caller has already gathered them;
        writer / aligned: who records the new extents and whether they are page-ceiled;
        decode: the call is SGLang's alloc_decode (one slot per request).
        The allocator gets the whole batch, requests that do not grow included, as
        SGLang's does: under need_sort its merge test counts them.
        """
        if rows is None:
            rows = _column(_ROW, states)
        if cur is None:
            cur = self.rows.allocated[rows]
        targets = np.maximum(targets, cur)
        delta = targets - cur
        if not delta.any():
            return True  # SGLang makes no call when nothing is needed
        host = self.req_to_token.host
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
            last = np.where(cur > 0, host.reshape(-1)[rows * host.shape[1] + np.maximum(cur - 1, 0)], -1)
        else:  # every extent ends on a page boundary: no page is continued, last_loc is never read
            last = None
        # From page boundaries, the new pages are ceil((target - cur) / ps).
        npages = self.full.pages_needed(cur, targets) if mid else (delta + (ps - 1)) // ps
        if int(npages.sum()) > self.full.num_free_pages:
            self.short_pool = "full"
            return False
        if self.swa is not None:
            # SWA pages start at the cursor: a fresh PD request holds none below it.
            base = self.rows.swa_evicted[rows]
            swa_prefix = np.maximum(cur, base)
            swa_target = np.maximum(targets, swa_prefix)
            if int(self.swa.allocator.pages_needed(swa_prefix, swa_target).sum()) \
                    > self.swa.allocator.num_free_pages:
                self.short_pool = "swa"
                return False
        got = self.full.traced_allocate(cur, targets, last, decode=decode, trusted=True, npages=npages,
                                        whole=whole and ps > 1)
        page_rows = np.repeat(rows, got.pages_per_req)  # the row of each new page
        if got.page_starts is not None:  # whole pages: a row's slots are written page by page
            self.req_to_token.write_pages(page_rows, got.page_starts, got.slots, self.ps)
        else:
            self.req_to_token.write_flat(np.repeat(rows, got.lens), got.positions, got.slots)
        self.ledger.take("full", page_rows, got.pages)
        if self.swa is not None:
            # Continue the SWA copy of the last page only where growth continues the row.
            swa_last = np.where((swa_prefix == cur) & (cur > 0), self.swa.translate(np.maximum(last, 0)), -1)
            sg = self.swa.allocator.traced_allocate(swa_prefix, swa_target, swa_last, trusted=True,
                                                    decode=decode and bool((swa_target - swa_prefix == 1).all()))
            self.swa.set_map(host[np.repeat(rows, sg.lens), sg.positions], sg.slots)
            self.ledger.take("swa", np.repeat(rows, sg.pages_per_req), sg.pages)
        self._set_extents(rows, targets, delta, cur_mod, new_mod, writer, aligned)
        return True

    def _fits(self, states: list[ReqKVState], cur: np.ndarray, targets: np.ndarray) -> bool:
        """Whether both pools have the pages to grow each state from cur to its target
        (targets >= cur); when not, short_pool names the pool that is short."""
        if int(self.full.pages_needed(cur, targets).sum()) > self.full.num_free_pages:
            self.short_pool = "full"
            return False
        if self.swa is not None:
            swa_prefix = np.maximum(cur, self.rows.swa_evicted[_column(_ROW, states)])
            if int(self.swa.allocator.pages_needed(swa_prefix, np.maximum(targets, swa_prefix)).sum()) \
                    > self.swa.allocator.num_free_pages:
                self.short_pool = "swa"
                return False
        return True

    def _set_extents(self, rows: np.ndarray, targets: np.ndarray, delta: np.ndarray, cur_mod: np.ndarray | None,
                     new_mod: np.ndarray | None, writer: str, aligned: bool) -> None:
        """Record the grown extents (delta = targets - old extents >= 0, so K2 holds by
        construction) and move the running sums, all in vector passes over the batch.
        cur_mod, new_mod: the old and the new extents % page_size (None: all on page boundaries)."""
        ps, by, kv = self.ps, self.stranded_by_writer, self.rows
        self._sum_extent += int(delta.sum())
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

    def _write_cursor(self, state: ReqKVState, value: int, **context: int) -> int:
        """The one writer of swa_evicted_seqlen; K6 fires here, at the write."""
        prev, ps = state.swa_evicted, self.ps
        if value < 0 or value % ps or value < prev:
            values = {"value": value, "previous": prev, "page_size": ps, **context}
            v = Violation("K6", state.rid, self.step, values)
            if self.auditor is not None:
                self.auditor.record(v)
            if self.auditor is None or self.auditor.mode != "record":
                raise EvictFloorError(state.rid, value, prev, ps, **context)
            value = max(prev, max(0, value) // ps * ps)
        state.swa_evicted = value
        return value

    def _give_back(self, pool: str, state: ReqKVState, freed: np.ndarray) -> None:
        stray = self.ledger.give_back(pool, state.row, freed)
        if len(stray):
            self._report(Violation("K8", state.rid, self.step, {
                "pool": pool, "reason": "freed pages the request did not hold",
                "pages": stray[:8].tolist()}))

    def _report(self, v: Violation) -> None:
        if self.auditor is None:
            raise InvariantViolation(v)
        self.auditor.report(v)


class _FreeGroupBlock:
    """KVManager.free_group's block (a class: a generator context costs a few us per step)."""

    __slots__ = ("pools",)

    def __init__(self, pools: list[PagedAllocator]):
        self.pools = pools

    def __enter__(self) -> None:
        for a in self.pools:
            a.free_group_begin()

    def __exit__(self, *exc) -> None:
        for a in self.pools:
            a.free_group_end()


def _jsonable(x: object) -> object:
    return x if isinstance(x, (int, str, float)) or x is None else str(x)
