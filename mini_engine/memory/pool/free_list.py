"""FreeList: how a PagedAllocator's freed pages go back on its free list, in SGLang 0.5.23's order.

Allocation takes pages from the front of the free list (allocator.py); where a
free puts them decides which page ids the next allocations get:

* ps > 1 (PagedTokenToKVPoolAllocator): a free puts its pages in front of the
  list, in the order given (LIFO: the pages freed last are handed out first);
  the dedup free gives them sorted (a unique);
* ps == 1 (TokenToKVPoolAllocator): a free appends the slots at the back, in the
  order given, without a dedup;
* need_sort (SGLang sets it on both sides of PD disaggregation): frees are staged
  and merged back, sorted, only when an allocation might run short. The test is
  SGLang's, not the exact count: extend merges when
  extend_tokens // ps + batch + 1 > len(free), decode when batch > len(free), ps 1
  when tokens > len(free). A merge happens before the capacity check, so a refused
  call can still reorder the list (never change its set);
* a free group (free_group_begin / free_group_end) holds every free to its end,
  then releases them in SGLang's group order (see free_group_begin).

A part of PagedAllocator (allocator.py), which owns the list these methods keep.
"""

from __future__ import annotations

import numpy as np

from mini_engine.errors import InvariantViolation
from mini_engine.memory.audit.record import Violation


class FreeList:
    # -- staging (need_sort) ----------------------------------------------------
    @property
    def has_freed(self) -> bool:
        """Whether any free was made (held in an open group included)."""
        return self._freed_any or (self._group is not None and bool(self._group.entries))

    def stage_frees(self) -> None:
        """Turn on need_sort (SGLang's PD pools), which must hold from the first free on."""
        if self.need_sort:
            return
        if self.has_freed:
            raise RuntimeError(f"need_sort on pool {self.pool} after it freed pages: "
                               "a pool has one free-list order for its whole life")
        self.need_sort = True

    # -- freeing ---------------------------------------------------------------
    def free(self, indices) -> np.ndarray:
        """Legacy dedup free: the unique pages of slot indices.

        On a device, unique has a data-dependent output shape, so the host must wait
        for it: one sync.
        """
        # A copy: the caller's array may be a view of a row that is rewritten while
        # these pages are still held (a free group, need_sort's staging list).
        idx = np.array(indices, dtype=np.int64).reshape(-1)
        # ps 1: SGLang's token allocator frees the slots as given, no unique.
        pages = idx if self.page_size == 1 else np.unique(idx // self.page_size)
        # Counted per call, held or not: kvbench's dedup release rule pays a unique per
        # release (SGLang itself frees rows by segment, without one). At ps 1 there is no
        # unique (the token allocator appends the slots), so no sync.
        if self.page_size > 1:
            self.syncs += 1
            if self._group is None:
                self.release_syncs += 1  # a lone unique; a group's is counted once at its end
        return self._release("free", idx, pages)

    def free_pages(self, page_ids) -> np.ndarray:
        """Host whole-page free: the caller computed the pages, no dedup, no sync."""
        pages = np.array(page_ids, dtype=np.int64).reshape(-1)  # a copy, as in free()
        return self._release("free_pages", pages, pages)

    def pay_syncs(self, kind: str, n: int) -> None:
        """Syncs a composite allocator above this pool pays around one of its frees
        (SGLang 0.5.18's SWA free_swa: extents/release_unique.py): per call, or once per free group
        and kind, since that allocator holds a group's calls of one kind and frees them as one.
        """
        self.syncs += n
        if self._group is None:
            self.release_syncs += n
        else:
            self._group.end_syncs[kind] = n

    def _release(self, op: str, given: np.ndarray, pages: np.ndarray) -> np.ndarray:
        """One free call (op: free | free_pages, given: what the caller passed): held in the
        open free group, else put on the free list and traced as the call it is."""
        if self._group is not None:
            return self._group.add(op, given, self._check(pages))
        freed = self._put(self._check(pages))
        if self.trace is not None:
            self._trace_free(op, given)
        return freed

    def free_segment(self, row_slots: np.ndarray, start: int, end: int, *, offset: int = 0) -> np.ndarray:
        """Free the pages of positions [start, end): one representative slot per page.

        row_slots[i] is the slot of position offset + i. start must be page aligned
        (K5): a segment that starts mid-page would free a page still live below it.
        """
        ps = self.page_size
        if start % ps != 0:
            self._violation("K5", start=start, end=end, page_size=ps,
                            reason="segment start is not page aligned")
            start = -(-start // ps) * ps
        if end <= start:
            return np.empty(0, dtype=np.int64)
        reps = np.asarray(row_slots)[start - offset:end - offset:ps]
        return self.free_pages(reps.astype(np.int64) // ps)

    # -- free groups -----------------------------------------------------------
    def free_group_begin(self) -> None:
        """Hold every free until free_group_end, as SGLang does around one batch's releases.

        Each free is checked (K5) when it is called; its pages reach the free list at
        the end, in SGLang's order: at ps > 1 the dedup frees as one unique
        and the page-id frees as one list in call order, the full pool's unique first
        and the SWA pool's page ids first (which of the two lands in front differs:
        SGLang's SWA allocator ends its page-id group before its slot group); at ps 1
        every free in call order. The trace records those end-of-group calls, which are
        the calls the pool's own allocator receives.
        """
        if self._group is not None:
            raise RuntimeError("free groups cannot be nested")
        self._group = FreeGroup()

    def free_group_end(self) -> None:
        group, self._group = self._group, None
        if group is None:
            raise RuntimeError("free_group_end without free_group_begin")
        self.release_syncs += sum(group.end_syncs.values())
        if self.page_size == 1:
            self._flush("free_pages", group.entries)
            return
        for op in ("free_pages", "free") if self.pool == "swa" else ("free", "free_pages"):
            self._flush(op, [e for e in group.entries if e[0] == op])

    def _flush(self, op: str, entries: list) -> None:
        if not entries:
            return
        given = np.concatenate([e[1] for e in entries])
        pages = np.concatenate([e[2] for e in entries])
        if op == "free" and self.page_size > 1:
            pages = np.unique(pages)  # its sync was counted at each held free
            self.release_syncs += 1  # SGLang's one unique over the group's slots
        self._put(pages)
        if self.trace is not None:
            self._trace_free(op, given)

    # -- internals -------------------------------------------------------------
    def _trace_free(self, op: str, given: np.ndarray) -> None:
        """The record of one free call the pool's allocator receives (free: slot indices,
        free_pages: page ids)."""
        key = "indices" if op == "free" else "page_ids"
        rec = {"op": op, "pool": self.pool, key: given.tolist(), "available": self.available_size()}
        if self.need_sort:
            rec["need_sort"] = True  # a replay stages this pool's frees too
        self.trace.write(rec)

    def _check(self, pages: np.ndarray) -> np.ndarray:
        """The pages a free may release (K5 for the others), marked free from now on."""
        if len(pages) == 0:
            return pages
        bad = (pages <= 0) | (pages > self.num_pages)
        if bad.any():
            self._violation("K5", pages=pages[bad][:8].tolist(), reason="page out of range or dummy page 0")
            pages = pages[~bad]
        again = self._is_free[pages]
        if again.any():
            self._violation("K5", pages=pages[again][:8].tolist(), reason="page freed twice")
            pages = pages[~again]
        if len(pages) > 1:
            uniq, first = np.unique(pages, return_index=True)
            if len(uniq) != len(pages):
                self._violation("K5", reason="page freed twice in one call",
                                pages=pages[:8].tolist())
                pages = pages[np.sort(first)]  # each page once, in the order given
        self._is_free[pages] = True
        return pages

    def _put(self, pages: np.ndarray) -> np.ndarray:
        """Put checked pages on the free list, where SGLang's allocator puts them."""
        if len(pages) == 0:
            return pages
        self._freed_any = True
        if self.need_sort:
            self._released.append(pages)
            self._num_released += len(pages)
        elif self.page_size == 1:
            self._free = np.concatenate([self._free, pages])
        else:
            self._free = np.concatenate([pages, self._free])
        return pages

    def _may_run_short(self, tokens: int, batch: int, decode: bool) -> bool:
        """SGLang's test for merging the staged frees before an allocation."""
        if self.page_size == 1:
            return tokens > len(self._free)
        if decode:
            return batch > len(self._free)
        return tokens // self.page_size + batch + 1 > len(self._free)

    def _merge_released(self) -> None:
        self._free = np.sort(np.concatenate([self._free, *self._released]))
        self._released = []
        self._num_released = 0

    def _violation(self, kid: str, **values) -> None:
        v = Violation(kid, None, -1, {"pool": self.pool, **values})
        if self.auditor is None:
            raise InvariantViolation(v)
        self.auditor.report(v)


class FreeGroup:
    """The frees held by an open free group: (op, what the caller gave, checked pages), and
    the syncs a composite allocator above the pool pays at the group's end, by kind (pay_syncs)."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, np.ndarray, np.ndarray]] = []
        self.end_syncs: dict[str, int] = {}

    def add(self, op: str, given: np.ndarray, pages: np.ndarray) -> np.ndarray:
        self.entries.append((op, given, pages))
        return pages


class FreeGroupBlock:
    """KVManager.free_group's block (a class: a generator context costs a few us per step)."""

    __slots__ = ("pools",)

    def __init__(self, pools: list[FreeList]):  # the pools' PagedAllocators
        self.pools = pools

    def __enter__(self) -> None:
        for a in self.pools:
            a.free_group_begin()

    def __exit__(self, *exc) -> None:
        for a in self.pools:
            a.free_group_end()
