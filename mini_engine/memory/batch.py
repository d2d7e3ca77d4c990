"""BatchArrays: the host arrays of a running decode batch.

The arrays evolve with the batch, as a real engine's do: requests leave by a
filter and join by a merge; the reservation plans the new extents and the verify
adds the accepted counts. Nothing rebuilds them from the request states, so K10
(the batch == the live request states) catches a wrong filter index, a missed
merge or a missed commit. Plain numpy: a device copy of what a forward reads is
the model backend's (its mirror of req_to_token), not the memory layer's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mini_engine.memory.kv_state import ReqKVState
from mini_engine.memory.sizing import next_extents

FIELDS = ("rows", "committed", "allocated")


@dataclass
class BatchArrays:
    rids: list
    rows: np.ndarray
    committed: np.ndarray
    allocated: np.ndarray

    @classmethod
    def from_states(cls, states: list[ReqKVState]) -> BatchArrays:
        n = len(states)
        # One pass over the states for all three columns.
        cols = np.array([(s.row, s.committed, s.allocated) for s in states], dtype=np.int64).reshape(n, 3)
        return cls(rids=[s.rid for s in states], rows=cols[:, 0].copy(), committed=cols[:, 1].copy(),
                   allocated=cols[:, 2].copy())

    def __len__(self) -> int:
        return len(self.rids)

    def filter(self, keep_indices) -> None:
        """Keep only the given batch positions, in that order."""
        keep = np.asarray(keep_indices, dtype=np.int64).reshape(-1)
        self.rids = [self.rids[i] for i in keep.tolist()]
        for name in FIELDS:
            setattr(self, name, getattr(self, name)[keep])

    def merge(self, other: BatchArrays) -> None:
        """Append other's requests after ours."""
        self.rids = self.rids + other.rids
        for name in FIELDS:
            setattr(self, name, np.concatenate([getattr(self, name), getattr(other, name)]))

    def plan_extents(self, reserve: int, page_size: int, aligned: bool, row_width: int | None) -> np.ndarray:
        """The extents the reservation of one decode step gives each request of the batch.

        The rule of sizing.plan_extent over the batch's own arrays: committed +
        reserve, rounded up to a page under the aligned policy, never below the
        current extent; a row too short for it is clamped to its width (K4 reports
        that), unless row_width is None: the profile writes past the row, as SGLang
        does (mini_engine.memory.extents.overflow). Computed here, not read from the manager, so K10 compares the
        batch's plan with the extents the manager recorded.
        """
        nxt = next_extents(self.allocated, self.committed, reserve, page_size, aligned)
        return nxt if row_width is None else np.minimum(nxt, row_width)

    def set_allocated(self, extents: np.ndarray) -> None:
        """Record the planned extents (batch order)."""
        extents = np.asarray(extents, dtype=np.int64)
        if extents.shape != self.allocated.shape:
            raise ValueError(f"{extents.shape[0] if extents.ndim else 0} extents for a batch of {len(self)}")
        self.allocated = extents.copy()

    def commit(self, counts: np.ndarray) -> None:
        """The verify accepted counts[i] more positions of request i (batch order)."""
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != self.committed.shape:
            raise ValueError(f"{counts.shape[0] if counts.ndim else 0} counts for a batch of {len(self)}")
        self.committed += counts
