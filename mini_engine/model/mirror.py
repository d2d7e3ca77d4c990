"""DeviceMirror: the model backend's device copy of req_to_token and the SWA map.

The memory layer keeps both tables as host numpy arrays and logs which entries it
writes (memory.changes). The backend's attention gathers slots on the device, as
SGLang's attention backends do from their req_to_token tensor, so it keeps the one
device copy and brings it up to date once per decode forward from the batch: the
engine's MirrorFeed drains the logs into a MirrorUpdate (indices and host values),
and ``apply`` does one index copy per table, never a read back. The mirror never
sees the manager. K10 reads it in audit mode (`rows`, `swa_of`) to check that what
the forward reads equals the host.
"""

from __future__ import annotations

import numpy as np
import torch

from mini_engine.forward.step_batch import Layout, MirrorUpdate


class DeviceMirror:
    def __init__(self, layout: Layout, device: torch.device):
        self.device = device
        # Zeros, as a fresh manager's tables: the first update carries whatever they already hold.
        self.table = torch.zeros((layout.max_reqs, layout.row_width), dtype=torch.int64, device=device)
        self.swa_map = (torch.zeros(layout.full_slots, dtype=torch.int64, device=device)
                        if layout.has_swa else None)
        self.syncs = 0  # forwards that found host writes to copy (for tests and profiling)

    def apply(self, up: MirrorUpdate) -> None:
        """Copy the entries the update names to the device (host -> device only)."""
        copied = _apply(self.table.view(-1), up.r2t_index, up.r2t_values, self.device)
        if self.swa_map is not None:
            copied |= _apply(self.swa_map, up.map_index, up.map_values, self.device)
        self.syncs += copied

    # -- audit reads (K10) -------------------------------------------------------
    def rows(self, rows: np.ndarray, width: int) -> np.ndarray:
        if self.device.type == "cpu":  # the tensor's own memory: one numpy gather, no torch calls
            return self.table.numpy()[rows, :width]
        idx = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64)).to(self.device)
        return self.table[idx, :width].cpu().numpy()

    def swa_of(self, full_slots: np.ndarray) -> np.ndarray | None:
        if self.swa_map is None:
            return None
        if self.device.type == "cpu":
            return self.swa_map.numpy()[full_slots]
        idx = torch.from_numpy(np.ascontiguousarray(full_slots, dtype=np.int64)).to(self.device)
        return self.swa_map[idx].cpu().numpy()


def _apply(dev: torch.Tensor, idx: np.ndarray, values: np.ndarray, device: torch.device) -> bool:
    if len(idx) == 0:
        return False
    # index_copy_ rather than dev[idx] = ...: much cheaper on a multi-threaded CPU. Repeated
    # indices carry the same (current) host value, so their order does not matter.
    dev.index_copy_(0, torch.from_numpy(idx).to(device), torch.from_numpy(values).to(device))
    return True
