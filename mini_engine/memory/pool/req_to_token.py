"""ReqToTokenPool: one row per request mapping position -> KV slot.

A host numpy array, the truth the scheduler plans with. Like SGLang's req_to_token it
is one flat array: a write past a row's end lands in the next row's first positions
(SGLang issue 33579, mini_engine.memory.extents.overflow). A device copy belongs to
whoever reads one (the model backend's mirror); it follows `changes`, so planning
writes no device tensor and costs no sync.
"""

from __future__ import annotations

import numpy as np

from mini_engine.errors import check_positive
from mini_engine.memory.pool.changes import ChangeLog


class ReqToTokenPool:
    def __init__(self, size: int, width: int):
        self.size = check_positive("max_reqs", size)
        self.width = check_positive("row_width", width)
        self.host = np.zeros((size, width), dtype=np.int64)
        self._within: dict[int, np.ndarray] = {}  # offsets within a page, by page size
        self.changes = ChangeLog()  # flat indices of host written since the mirror last synced
        # SGLang's table has size + 1 rows, row 0 a padding row for CUDA-graph batches;
        # kvbench's row r is its row r + 1. Its free list starts [1..size] and hands
        # out from the tail, so the first request sits in the last row, whose overflow
        # runs past the tensor's end instead of into a next row. Same stack here; a
        # prefill batch's rows are then put in SGLang's one-call order (KVManager.batch_rows).
        self._free_rows = list(range(size))
        # Writes past the table's end (the last row's overflow), by flat index: memory
        # no row owns, kept apart so they overwrite nothing (SGLang's land past its tensor).
        self.past_end: dict[int, int] = {}

    @property
    def num_free_rows(self) -> int:
        return len(self._free_rows)

    def alloc(self) -> int | None:
        return self._free_rows.pop() if self._free_rows else None

    def move_rows(self, old: list[int], new: list[int]) -> None:
        """Row old[i]'s contents move to row new[i]; new is a permutation of old (the
        rows of one batch handed out again in another order, manager.batch_rows)."""
        if old == new:
            return
        if sorted(old) != sorted(new):
            raise ValueError("move_rows: new must be a permutation of old")
        # Only the columns up to the last one any of these rows writes move: past it every
        # row is zero, before and after the move (new holds the same rows). A whole-row
        # move of a 64-request batch copied and logged 64 x row_width entries (2 MB at
        # 4100 columns: 1.6-7 ms of the batch's admission, then the mirror copied them all).
        width = max((_last_written(self.host[r]) for r in old), default=0)
        if width == 0:
            return
        self.host[new, :width] = self.host[old, :width]
        for r in new:
            self.changes.add_range(r * self.width, r * self.width + width)

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
        """Batched write: host[rows[i], positions[i]] = slots[i]; a position past the row
        lands in the flat array's next row (or past the table's end), as SGLang's does."""
        if len(slots) == 0:
            return
        flat = rows * self.width + positions
        end = self.host.size
        if len(flat) and int(flat.max()) >= end:
            out = flat >= end
            self.past_end.update(zip(flat[out].tolist(), np.asarray(slots)[out].tolist()))
            flat, slots = flat[~out], np.asarray(slots)[~out]
        self.host.reshape(-1)[flat] = slots  # a view: one flat scatter is much cheaper than 2-D fancy indexing
        self.changes.add(flat)

    def read_flat(self, rows: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """host[rows[i], positions[i]] read through the flat array (write_flat's inverse)."""
        flat = rows * self.width + positions
        end = self.host.size
        if not len(flat) or int(flat.max()) < end:
            return self.host.reshape(-1)[flat]
        out = self.host.reshape(-1)[np.minimum(flat, end - 1)]
        for i in np.flatnonzero(flat >= end).tolist():
            out[i] = self.past_end.get(int(flat[i]), 0)
        return out


def _last_written(row: np.ndarray) -> int:
    """1 + the last nonzero column of a row (0: the row is all zero)."""
    nz = np.flatnonzero(row)
    return int(nz[-1]) + 1 if len(nz) else 0
