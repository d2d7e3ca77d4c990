"""DeviceMirror: the model backend's device copy of req_to_token and the SWA map.

The memory layer keeps both tables as host numpy arrays and logs which entries it
writes (memory.changes). The backend's attention gathers slots on the device, as
SGLang's attention backends do from their req_to_token tensor, so it keeps the one
device copy and brings it up to date once per forward: one index copy per table of
the entries written since the last sync, never a read back. K10 reads the mirror in
audit mode (`rows`, `swa_of`) to check that what the forward reads equals the host.
"""

from __future__ import annotations

import numpy as np
import torch


class DeviceMirror:
    def __init__(self, manager, device: torch.device):
        self.device = device
        r2t = manager.req_to_token
        self._r2t_host, self._r2t_log = r2t.host, r2t.changes
        # A copy whatever the device: on the CPU a tensor from numpy would share the host's
        # memory, and the mirror could never differ from it (K10 would check nothing).
        self.table = torch.tensor(r2t.host, dtype=torch.int64, device=device)
        self._r2t_log.follow()
        self.swa_map = None
        if manager.swa is not None:
            swa = manager.swa
            self._map_host, self._map_log = swa.map_host, swa.map_changes
            self.swa_map = torch.tensor(swa.map_host, dtype=torch.int64, device=device)
            self._map_log.follow()
        self.syncs = 0  # forwards that found host writes to copy (for tests and profiling)

    def sync(self) -> None:
        """Copy the host entries written since the last sync to the device (host -> device only)."""
        copied = _apply(self.table.view(-1), self._r2t_host.reshape(-1), self._r2t_log.drain(), self.device)
        if self.swa_map is not None:
            copied |= _apply(self.swa_map, self._map_host, self._map_log.drain(), self.device)
        self.syncs += copied

    # -- audit reads (K10) -------------------------------------------------------
    def rows(self, rows: np.ndarray, width: int) -> np.ndarray:
        idx = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64)).to(self.device)
        return self.table[idx, :width].cpu().numpy()

    def swa_of(self, full_slots: np.ndarray) -> np.ndarray | None:
        if self.swa_map is None:
            return None
        idx = torch.from_numpy(np.ascontiguousarray(full_slots, dtype=np.int64)).to(self.device)
        return self.swa_map[idx].cpu().numpy()


def _apply(dev: torch.Tensor, host: np.ndarray, idx: np.ndarray, device: torch.device) -> bool:
    if len(idx) == 0:
        return False
    # index_copy_ rather than dev[idx] = ...: much cheaper on a multi-threaded CPU. Repeated
    # indices carry the same (current) host value, so their order does not matter.
    dev.index_copy_(0, torch.from_numpy(idx).to(device), torch.from_numpy(host[idx]).to(device))
    return True
