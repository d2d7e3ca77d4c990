"""PagedAllocator: the free pages of one KV pool, in SGLang 0.5.23's order.

Page p covers slots [p*ps, (p+1)*ps). Pages are numbered 1..N; page 0 is a dummy
that padded rows point at and is never handed out. Allocation keeps
slot % ps == position % ps, so a partly filled last page is continued in place.

The order of the free list is SGLang 0.5.23's, call for call (same calls -> same
page ids as its own allocator; `kvbench conform` checks it): allocation takes
pages from the front of the free list; where frees put pages back, need_sort's
staging and free groups are free_list.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mini_engine.errors import check_choice, check_positive
from mini_engine.memory.pool.free_list import FreeGroup, FreeList

if TYPE_CHECKING:
    from mini_engine.memory.audit.record import Auditor
    from mini_engine.memory.trace.writer import TraceWriter

POOLS = ("full", "swa")


@dataclass
class Allocation:
    """One batched allocation, flat: what the manager needs without a per-request loop."""

    slots: np.ndarray  # int64, positions of request 0, then request 1, ...
    lens: np.ndarray  # int64 [B], slots per request
    pages: np.ndarray  # int64, the new pages, request-major
    pages_per_req: np.ndarray  # int64 [B]
    positions_: np.ndarray | None = None  # see positions
    # When every request grew by whole pages: the position of each new page's first slot
    # (so a writer can address whole pages); None otherwise.
    page_starts: np.ndarray | None = None
    page_size: int = 1

    @property
    def positions(self) -> np.ndarray:
        """int64, the position of each slot in its request's row (from page_starts when only
        those were made: the whole-page writer does not need it)."""
        if self.positions_ is None:
            within = np.arange(self.page_size, dtype=np.int64)
            self.positions_ = (self.page_starts[:, None] + within).reshape(-1)
        return self.positions_

    def split(self) -> list[np.ndarray]:
        return np.split(self.slots, np.cumsum(self.lens)[:-1]) if len(self.lens) else []


class PagedAllocator(FreeList):
    def __init__(self, num_pages: int, page_size: int, pool: str = "full",
                 trace: TraceWriter | None = None, auditor: Auditor | None = None,
                 *, need_sort: bool = False):
        self.num_pages = check_positive("num_pages", num_pages)
        self.page_size = check_positive("page_size", page_size)
        self.pool = check_choice("pool", pool, POOLS)
        self.trace = trace
        self.auditor = auditor
        self.need_sort = bool(need_sort)
        self.syncs = 0  # device reads a real engine would pay (dedup free only)
        # The same uniques as SGLang pays them: one per free group (or lone free call) that
        # holds a unique free, since the group frees its slots in one call (free_group_end).
        self.release_syncs = 0
        self._free = np.arange(1, num_pages + 1, dtype=np.int64)
        self._released: list[np.ndarray] = []  # staged frees (need_sort only)
        self._group: FreeGroup | None = None
        self._num_released = 0
        self._freed_any = False  # need_sort can only be chosen before the first free
        self._is_free = np.ones(num_pages + 1, dtype=bool)
        self._is_free[0] = False
        self._within = np.arange(self.page_size, dtype=np.int64)  # offsets within a page
        self._offsets = np.arange(0, dtype=np.int64)  # k * page_size for k = 0, 1, ... (grown on demand)

    # -- queries ---------------------------------------------------------------
    @property
    def num_free_pages(self) -> int:
        return len(self._free) + self._num_released

    def available_size(self) -> int:
        """Free slots (whole free pages times page size)."""
        return self.num_free_pages * self.page_size

    def free_page_ids(self) -> np.ndarray:
        """Every free page, for audits (not the hot path)."""
        return np.concatenate([self._free, *self._released]) if self._released else self._free.copy()

    def free_parts(self) -> list[np.ndarray]:
        """The free list and the staged frees, as they are (read-only views, for audits)."""
        return [self._free, *self._released]

    def is_free(self, pages: np.ndarray) -> np.ndarray:
        return self._is_free[pages]

    # -- allocation ------------------------------------------------------------
    def _page_offsets(self, n: int) -> np.ndarray:
        """[0, ps, 2 ps, ...) of length n, a view of a kept array."""
        if len(self._offsets) < n:
            self._offsets = np.arange(max(n, 2 * len(self._offsets)), dtype=np.int64) * self.page_size
        return self._offsets[:n]

    def pages_needed(self, prefix_lens: np.ndarray, seq_lens: np.ndarray) -> np.ndarray:
        ps = self.page_size
        return (seq_lens + (ps - 1)) // ps - (prefix_lens + (ps - 1)) // ps

    def allocate(self, prefix_lens, seq_lens, last_locs, *, decode: bool = False,
                 trusted: bool = False, npages: np.ndarray | None = None,
                 whole: bool | None = None) -> Allocation | None:
        """Flat form of alloc_extend; all-or-nothing (None and no page taken when short).

        decode marks SGLang's alloc_decode (plain decode, one token per request):
        same slots, but its own merge test under need_sort. trusted: the caller (the
        KVManager) built int64 arrays from its own rows, so the boundary checks of
        outside input (a replayed trace, a test) are skipped on the per-step path;
        it may pass npages (pages_needed, already computed) and whole (whether every
        prefix and seq length is on a page boundary), and last_locs is read only
        where a page is continued (prefix not on a page boundary): None when there is none.
        """
        if trusted:
            prefix, seq, last = prefix_lens, seq_lens, last_locs
        else:
            prefix, seq, last = self._outside_input(prefix_lens, seq_lens, last_locs)
        ps = self.page_size
        if npages is None or not trusted:
            npages = self.pages_needed(prefix, seq)
        total = int(npages.sum())
        if self._released and self._may_run_short(int((seq - prefix).sum()), len(prefix), decode):
            self._merge_released()
        if total > len(self._free):
            return None
        pages = self._free[:total]
        self._free = self._free[total:]
        self._is_free[pages] = False

        lens = seq - prefix
        if decode and trusted:
            # alloc_decode: one slot each, the next of last_loc's page, or a new page's first
            # slot where the position starts a page (npages is 1 exactly there, in order).
            if last is None:  # every position starts a page
                slots = pages * ps
            else:
                slots = last + 1
                slots[npages > 0] = pages * ps
            return Allocation(slots=slots, lens=lens, pages=pages, pages_per_req=npages, positions_=prefix)
        if whole is None or not trusted:
            whole = ps > 1 and not ((prefix | seq) % ps).any()
        if whole and ps > 1:
            # Every request grows by whole pages (the aligned writers' common step): a new page's
            # slots are the whole page, its positions a whole page of the row; no per-request work.
            # Each new page's first position: the request's prefix, one page further per page.
            if int(npages.max(initial=0)) <= 1:  # at most one new page each (most decode steps)
                starts = prefix[npages > 0]
            else:
                starts = np.repeat(prefix - (np.cumsum(npages) - npages) * ps, npages) + self._page_offsets(total)
            return Allocation(slots=(pages[:, None] * ps + self._within).reshape(-1), lens=lens, pages=pages,
                              pages_per_req=npages, page_starts=starts, page_size=ps)
        slots, pos = self._table_slots(prefix, lens, npages, pages, last)
        return Allocation(slots=slots, lens=lens, pages=pages,
                          pages_per_req=npages, positions_=pos)

    def _outside_input(self, prefix_lens, seq_lens, last_locs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The lengths of an untrusted call (a replayed trace, a test) as int64 arrays, checked
        before any page is taken: a refused call must leave the pool as it was."""
        prefix = np.asarray(prefix_lens, dtype=np.int64).reshape(-1)
        seq = np.asarray(seq_lens, dtype=np.int64).reshape(-1)
        last = np.asarray(last_locs, dtype=np.int64).reshape(-1)
        if not (len(prefix) == len(seq) == len(last)):
            raise ValueError("prefix_lens, seq_lens and last_locs must have one entry per request")
        if len(prefix) and ((seq < prefix).any() or (prefix < 0).any()):
            raise ValueError("alloc_extend needs 0 <= prefix_len <= seq_len for every request")
        ps = self.page_size
        if ps > 1:
            bad = (prefix % ps != 0) & (seq > prefix) & (last % ps != (prefix - 1) % ps)
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(
                    f"last_loc {int(last[i])} is not the slot of position {int(prefix[i]) - 1} "
                    f"in a paged row (page_size {ps})")
        return prefix, seq, last

    def _table_slots(self, prefix: np.ndarray, lens: np.ndarray, npages: np.ndarray, pages: np.ndarray,
                     last: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The slots and positions of a general allocation (any prefix, any length).

        Slots go through a table of the pages each request touches, in position order: a
        continued last page (last_loc's page, when prefix is mid-page), then its new pages
        as they come off the free list. slot % ps == position % ps on every page, so a
        slot is its page * ps + position % ps: a few whole-array passes, no per-request work.
        """
        ps = self.page_size
        first_page = prefix // ps
        cont = (lens > 0) & (prefix % ps != 0)  # growth continues last_loc's page
        touched = npages + cont  # pages each request writes: its new ones and a continued one
        table_off = np.cumsum(touched) - touched
        table = np.empty(int(touched.sum()), dtype=np.int64)
        if cont.any():
            is_new = np.ones(len(table), dtype=bool)
            is_new[table_off[cont]] = False
            table[table_off[cont]] = last[cont] // ps
            table[is_new] = pages
        else:
            table[:] = pages
        n = int(lens.sum())
        pos = np.arange(n, dtype=np.int64) + np.repeat(prefix - (np.cumsum(lens) - lens), lens)
        at = np.repeat(table_off - first_page, lens)
        if ps & (ps - 1) == 0:  # a power of two: shifts and masks, several times cheaper than // and %
            shift = ps.bit_length() - 1
            slots = (table[(pos >> shift) + at] << shift) | (pos & (ps - 1))
        else:
            slots = table[pos // ps + at] * ps + pos % ps
        return slots, pos

    def alloc_extend(self, prefix_lens, seq_lens, last_locs) -> list[np.ndarray] | None:
        """One slot array per request: rest of the last page, whole new pages, a new partial page."""
        got = self.traced_allocate(prefix_lens, seq_lens, last_locs)
        return None if got is None else got.split()

    def traced_allocate(self, prefix_lens, seq_lens, last_locs, *, decode: bool = False,
                        trusted: bool = False, npages: np.ndarray | None = None,
                        whole: bool | None = None) -> Allocation | None:
        """allocate() plus the trace record alloc_extend would write (the manager's path).

        A decode call is written as the alloc_extend it is, marked "decode": true so
        a replay takes SGLang's alloc_decode merge test.
        """
        got = self.allocate(prefix_lens, seq_lens, last_locs, decode=decode, trusted=trusted, npages=npages,
                            whole=whole)
        if self.trace is not None:
            rec = {
                "op": "alloc_extend", "pool": self.pool,
                "prefix_lens": _ints(prefix_lens), "seq_lens": _ints(seq_lens),
                "last_locs": _ints(last_locs),
                "out": None if got is None else [s.tolist() for s in got.split()],
                "available": self.available_size(),
            }
            if decode:
                rec["decode"] = True
            self.trace.write(rec)
        return got

    def alloc_decode(self, seq_lens, last_locs) -> list[np.ndarray] | None:
        """One slot per request at position seq_len - 1 (SGLang's alloc_decode)."""
        seq = np.asarray(seq_lens, dtype=np.int64).reshape(-1)
        got = self.traced_allocate(seq - 1, seq, last_locs, decode=True)
        return None if got is None else got.split()


def _ints(x) -> list[int]:
    return np.asarray(x, dtype=np.int64).reshape(-1).tolist()
