"""BatchArrays: host arrays of a running batch and their device twins.

The arrays evolve with the batch, as a real engine's do: requests leave by a
filter and join by a merge; the reservation plans the new extents and the verify
adds the accepted counts. Each change is made on the host and mirrored to the
device by a write (an index, a copy, an add), never by reading the device back.
Nothing rebuilds them from the request states, so K10 (host == device == the
live request states) catches a wrong filter index, a missed merge or a missed
commit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mini_engine.memory.kv_state import ReqKVState
from mini_engine.memory.sizing import next_extents

FIELDS = ("rows", "committed", "allocated")


@dataclass
class BatchArrays:
    rids: list
    rows: np.ndarray
    committed: np.ndarray
    allocated: np.ndarray
    rows_device: torch.Tensor
    committed_device: torch.Tensor
    allocated_device: torch.Tensor
    device: str = "cpu"

    @classmethod
    def from_states(cls, states: list[ReqKVState], device: str = "cpu") -> BatchArrays:
        n = len(states)
        host = {
            "rows": np.fromiter((s.row for s in states), dtype=np.int64, count=n),
            "committed": np.fromiter((s.committed for s in states), dtype=np.int64, count=n),
            "allocated": np.fromiter((s.allocated for s in states), dtype=np.int64, count=n),
        }
        # A copy: on the CPU device a tensor from numpy would share the host's memory
        # and the twins could never differ.
        dev = {f"{k}_device": _to_device(v.copy(), device) for k, v in host.items()}
        return cls(rids=[s.rid for s in states], device=device, **host, **dev)

    def __len__(self) -> int:
        return len(self.rids)

    def filter(self, keep_indices) -> None:
        """Keep only the given batch positions, in that order."""
        keep = np.asarray(keep_indices, dtype=np.int64).reshape(-1)
        self.rids = [self.rids[i] for i in keep.tolist()]
        idx = _to_device(keep, self.device)
        for name in FIELDS:
            setattr(self, name, getattr(self, name)[keep])
            setattr(self, f"{name}_device", torch.index_select(getattr(self, f"{name}_device"), 0, idx))

    def merge(self, other: BatchArrays) -> None:
        """Append other's requests after ours."""
        self.rids = self.rids + other.rids
        for name in FIELDS:
            setattr(self, name, np.concatenate([getattr(self, name), getattr(other, name)]))
            dev = getattr(other, f"{name}_device").to(self.device)
            setattr(self, f"{name}_device", torch.cat([getattr(self, f"{name}_device"), dev]))

    def plan_extents(self, reserve: int, page_size: int, aligned: bool, row_width: int) -> np.ndarray:
        """The extents the reservation of one decode step gives each request of the batch.

        The rule of sizing.plan_extent over the batch's own arrays: committed +
        reserve, rounded up to a page under the aligned policy, never below the
        current extent; a row too short for it is clamped to its width (K4 reports
        that). Computed here, not read from the manager, so K10 compares the
        batch's plan with the extents the manager recorded.
        """
        return np.minimum(next_extents(self.allocated, self.committed, reserve, page_size, aligned), row_width)

    def set_allocated(self, extents: np.ndarray) -> None:
        """Record the planned extents (batch order) on the host and write them to the device."""
        extents = np.asarray(extents, dtype=np.int64)
        if extents.shape != self.allocated.shape:
            raise ValueError(f"{extents.shape[0] if extents.ndim else 0} extents for a batch of {len(self)}")
        self.allocated = extents.copy()
        self.allocated_device.copy_(_to_device(self.allocated, self.device))

    def commit(self, counts: np.ndarray) -> None:
        """The verify accepted counts[i] more positions of request i (batch order).

        The host adds them; the device adds the same counts written to it, the way
        an engine advances its device seq_lens from the accepted lengths.
        """
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != self.committed.shape:
            raise ValueError(f"{counts.shape[0] if counts.ndim else 0} counts for a batch of {len(self)}")
        self.committed += counts
        self.committed_device += _to_device(counts, self.device)


def _to_device(host: np.ndarray, device: str) -> torch.Tensor:
    """A host->device write of a numpy array (a write only: nothing is read back)."""
    return torch.from_numpy(host).to(device)
