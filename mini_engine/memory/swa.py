"""SWAPool: the sliding-window layers' own KV pool.

Each full slot may have an SWA copy: map[full_slot] = swa_slot, 0 = none. Both
pools page the same positions the same way (slot % ps == position % ps), so the SWA
pages of a request line up with its full pages. Below the request's cursor
(swa_evicted_seqlen) the SWA pages are freed by segment, a page at a time, which is
why the cursor must sit on a page boundary (K6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from mini_engine.memory.allocator import PagedAllocator

if TYPE_CHECKING:
    from mini_engine.memory.invariants import Auditor
    from mini_engine.memory.trace import TraceWriter


class SWAPool:
    def __init__(self, num_pages: int, page_size: int, full_num_pages: int, device: str = "cpu",
                 trace: TraceWriter | None = None, auditor: Auditor | None = None):
        self.allocator = PagedAllocator(num_pages, page_size, pool="swa", trace=trace, auditor=auditor)
        self.page_size = page_size
        size = (full_num_pages + 1) * page_size
        self.map_host = np.zeros(size, dtype=np.int64)
        self.map_device = torch.zeros(size, dtype=torch.int64, device=device)

    def translate(self, full_slots: np.ndarray) -> np.ndarray:
        return self.map_host[full_slots]

    def set_map(self, full_slots: np.ndarray, swa_slots: np.ndarray) -> None:
        if len(full_slots) == 0:
            return
        self.map_host[full_slots] = swa_slots
        dev = self.map_device
        # index_copy_ rather than dev[idx] = ...: much cheaper on a multi-threaded CPU.
        dev.index_copy_(0, torch.from_numpy(np.ascontiguousarray(full_slots, dtype=np.int64)).to(dev.device),
                        torch.from_numpy(np.ascontiguousarray(swa_slots, dtype=np.int64)).to(dev.device))

    def clear_map(self, full_slots: np.ndarray) -> None:
        self.set_map(full_slots, np.zeros(len(full_slots), dtype=np.int64))

    def evict(self, full_row: np.ndarray, old: int, new: int) -> np.ndarray:
        """The cursor moved old -> new: free the SWA pages of positions [old, new)."""
        if new <= old:
            return np.empty(0, dtype=np.int64)
        full = full_row[old:new]
        freed = self.allocator.free_segment(self.map_host[full], old, new, offset=old)
        self.clear_map(full)
        return freed

    def release(self, full_row: np.ndarray, cursor: int, extent: int, free_policy: str) -> np.ndarray:
        """Free the SWA pages above the cursor, under the same free policy as the full pool."""
        if extent <= cursor:
            return np.empty(0, dtype=np.int64)
        full = full_row[cursor:extent]
        swa = self.map_host[full]
        if free_policy == "dedup":
            freed = self.allocator.free(swa)
        else:
            # Stride over whole pages of the recorded extent, as the full pool does:
            # an unaligned extent drops its last SWA page too.
            end = extent // self.page_size * self.page_size
            freed = self.allocator.free_segment(swa, cursor, end, offset=cursor)
        self.clear_map(full)
        return freed
