"""ReqToTokenPool: one row per request mapping position -> KV slot.

A host numpy array, the truth the scheduler plans with. A device copy belongs to
whoever reads one (the model backend's mirror); it follows `changes`, so planning
writes no device tensor and costs no sync.
"""

from __future__ import annotations

import numpy as np

from mini_engine.errors import check_positive
from mini_engine.memory.changes import ChangeLog


class ReqToTokenPool:
    def __init__(self, size: int, width: int):
        self.size = check_positive("max_reqs", size)
        self.width = check_positive("row_width", width)
        self.host = np.zeros((size, width), dtype=np.int64)
        self._within: dict[int, np.ndarray] = {}  # offsets within a page, by page size
        self.changes = ChangeLog()  # flat indices of host written since the mirror last synced
        # A stack, so the first row handed out is 0 and the order is deterministic.
        self._free_rows = list(range(size - 1, -1, -1))

    @property
    def num_free_rows(self) -> int:
        return len(self._free_rows)

    def alloc(self) -> int | None:
        return self._free_rows.pop() if self._free_rows else None

    def free(self, row: int, used: int | None = None) -> None:
        """Return the row; used: the positions ever written in it (its extent), else the whole row."""
        # Zero the row so a stale tail can never be mistaken for a live slot (K7 reads it).
        end = self.width if used is None else min(used, self.width)
        self.host[row, :end] = 0
        self.changes.add_range(row * self.width, row * self.width + end)
        self._free_rows.append(row)

    def write_pages(self, rows: np.ndarray, starts: np.ndarray, slots: np.ndarray, page_size: int) -> None:
        """Whole-page write: page i covers positions [starts[i], starts[i] + page_size) of row
        rows[i]; slots holds their slots, page after page."""
        if len(slots) == 0:
            return
        if not self.changes.following and self.width % page_size == 0:
            # Nobody needs the flat indices: write whole pages through a [rows, pages, ps] view
            # of the table (starts are page boundaries), one 2-index scatter of page-wide rows.
            pages = self.host.reshape(self.size, self.width // page_size, page_size)
            pages[rows, starts // page_size] = slots.reshape(-1, page_size)
            return
        within = self._within.get(page_size)
        if within is None:
            within = self._within[page_size] = np.arange(page_size, dtype=np.int64)
        flat = ((rows * self.width + starts)[:, None] + within).reshape(-1)
        self.host.reshape(-1)[flat] = slots
        self.changes.add(flat)

    def write_flat(self, rows: np.ndarray, positions: np.ndarray, slots: np.ndarray) -> None:
        """Batched write: host[rows[i], positions[i]] = slots[i]."""
        if len(slots) == 0:
            return
        flat = rows * self.width + positions
        self.host.reshape(-1)[flat] = slots  # a view: one flat scatter is much cheaper than 2-D fancy indexing
        self.changes.add(flat)
