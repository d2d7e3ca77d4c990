"""BatchArrays: host arrays of a running batch and their device twins.

The scheduler filters (requests leave) and merges (requests join) on the host
arrays and mirrors each change to the device by writing, never by reading back.
K10 audits that the two stay equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mini_engine.memory.kv_state import ReqKVState

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
        dev = {f"{k}_device": torch.from_numpy(v.copy()).to(device) for k, v in host.items()}
        return cls(rids=[s.rid for s in states], device=device, **host, **dev)

    def __len__(self) -> int:
        return len(self.rids)

    def filter(self, keep_indices) -> None:
        """Keep only the given batch positions, in that order."""
        keep = np.asarray(keep_indices, dtype=np.int64).reshape(-1)
        self.rids = [self.rids[i] for i in keep.tolist()]
        idx = torch.from_numpy(keep).to(self.device)
        for name in FIELDS:
            setattr(self, name, getattr(self, name)[keep])
            setattr(self, f"{name}_device", getattr(self, f"{name}_device")[idx])

    def merge(self, other: BatchArrays) -> None:
        """Append other's requests after ours."""
        self.rids = self.rids + other.rids
        for name in FIELDS:
            setattr(self, name, np.concatenate([getattr(self, name), getattr(other, name)]))
            dev = getattr(other, f"{name}_device").to(self.device)
            setattr(self, f"{name}_device", torch.cat([getattr(self, f"{name}_device"), dev]))

    def sync_from(self, states: list[ReqKVState]) -> None:
        """Refresh the host arrays from the request states and write them to the device."""
        if [s.rid for s in states] != self.rids:
            raise ValueError("sync_from needs the batch's own requests, in batch order")
        fresh = BatchArrays.from_states(states, self.device)
        for name in FIELDS:
            getattr(self, name)[:] = getattr(fresh, name)
            getattr(self, f"{name}_device").copy_(getattr(fresh, f"{name}_device"))
