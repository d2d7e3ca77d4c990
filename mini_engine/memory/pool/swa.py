"""SWAPool: the sliding-window layers' own KV pool.

Each full slot may have an SWA copy: map[full_slot] = swa_slot, 0 = none. Both
pools page the same positions the same way (slot % ps == position % ps), so the SWA
pages of a request line up with its full pages. Below the request's cursor
(swa_evicted_seqlen) the SWA pages are freed by segment, a page at a time, which is
why the cursor must sit on a page boundary (K6). The map is host numpy; a device
copy follows `map_changes` (the model backend's mirror).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mini_engine.memory.pool.allocator import PagedAllocator
from mini_engine.memory.pool.changes import ChangeLog

if TYPE_CHECKING:
    from mini_engine.memory.audit.record import Auditor
    from mini_engine.memory.trace.writer import TraceWriter


class SWAPool:
    def __init__(self, num_pages: int, page_size: int, full_num_pages: int,
                 trace: TraceWriter | None = None, auditor: Auditor | None = None):
        self.allocator = PagedAllocator(num_pages, page_size, pool="swa", trace=trace, auditor=auditor)
        self.page_size = page_size
        size = (full_num_pages + 1) * page_size
        self.map_host = np.zeros(size, dtype=np.int64)
        self.map_changes = ChangeLog()  # full slots whose mapping changed since the mirror last synced

    def translate(self, full_slots: np.ndarray) -> np.ndarray:
        return self.map_host[full_slots]

    def set_map(self, full_slots: np.ndarray, swa_slots: np.ndarray) -> None:
        if len(full_slots) == 0:
            return
        self.map_host[full_slots] = swa_slots
        self.map_changes.add(full_slots)

    def clear_map(self, full_slots: np.ndarray) -> None:
        if len(full_slots):
            self.map_host[full_slots] = 0
            self.map_changes.add(full_slots)

    def evict(self, full_row: np.ndarray, old: int, new: int) -> np.ndarray:
        """The cursor moved old -> new: free the SWA pages of positions [old, new)."""
        if new <= old:
            return np.empty(0, dtype=np.int64)
        full = full_row[old:new]
        freed = self.allocator.free_segment(self.map_host[full], old, new, offset=old)
        self.clear_map(full)
        return freed

    def free_positions(self, full_row: np.ndarray, start: int, end: int) -> np.ndarray:
        """Free the SWA pages of positions [start, end) (start page aligned), one page per stride.

        The map is left as it is: a release frees its row in pieces, then clears
        the map once (clear_row).
        """
        if end <= start:
            return np.empty(0, dtype=np.int64)
        return self.allocator.free_segment(self.map_host[full_row[start:end]], start, end, offset=start)

    def clear_row(self, full_row: np.ndarray, cursor: int, extent: int) -> None:
        """Clear the map for every position of [cursor, extent), so a page that did not
        come back leaves no stale copy behind."""
        if extent > cursor:
            self.clear_map(full_row[cursor:extent])

    def release_dedup(self, full_row: np.ndarray, cursor: int, extent: int) -> np.ndarray:
        """The dedup rule: the unique pages of the SWA slots of [cursor, extent) go back (a sync)."""
        if extent <= cursor:
            return np.empty(0, dtype=np.int64)
        freed = self.allocator.free(self.map_host[full_row[cursor:extent]])
        self.clear_row(full_row, cursor, extent)
        return freed
