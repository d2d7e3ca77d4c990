"""ReqToTokenPool: one row per request mapping position -> KV slot.

The host array is the truth the scheduler plans with; the torch tensor is its
device twin that kernels read. The twin is only ever written from the host (never
read on the hot path), so planning costs no device sync.
"""

from __future__ import annotations

import numpy as np
import torch

from mini_engine.errors import check_positive


class ReqToTokenPool:
    def __init__(self, size: int, width: int, device: str = "cpu"):
        self.size = check_positive("max_reqs", size)
        self.width = check_positive("row_width", width)
        self.host = np.zeros((size, width), dtype=np.int64)
        self.device = torch.zeros((size, width), dtype=torch.int64, device=device)
        # A stack, so the first row handed out is 0 and the order is deterministic.
        self._free_rows = list(range(size - 1, -1, -1))

    @property
    def num_free_rows(self) -> int:
        return len(self._free_rows)

    def alloc(self) -> int | None:
        return self._free_rows.pop() if self._free_rows else None

    def free(self, row: int) -> None:
        # Zero the row so a stale tail can never be mistaken for a live slot (K7 reads it).
        self.host[row] = 0
        self.device[row].zero_()
        self._free_rows.append(row)

    def write_flat(self, rows: np.ndarray, positions: np.ndarray, slots: np.ndarray) -> None:
        """Batched write: host[rows[i], positions[i]] = slots[i], one device copy for all."""
        if len(slots) == 0:
            return
        flat = rows * self.width + positions
        self.host.reshape(-1)[flat] = slots  # a view: one flat scatter is much cheaper than 2-D fancy indexing
        dev = self.device.view(-1)
        # index_copy_: dev[idx] = ... (index_put_) is orders of magnitude slower on a multi-threaded CPU.
        dev.index_copy_(0, torch.from_numpy(flat).to(dev.device), torch.from_numpy(slots).to(dev.device))
