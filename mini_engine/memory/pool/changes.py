"""ChangeLog: which entries of a host table were written since a follower last looked.

The memory layer's tables (req_to_token rows, the SWA map) are host numpy arrays.
Whoever keeps a device copy of one (the model backend's mirror) follows its log and
drains it once per step. The log holds flat indices only: the follower copies the
host's values at drain time, so the order of writes does not matter. Nobody
following (the accounting-only run) means nothing is recorded.
"""

from __future__ import annotations

import numpy as np

EMPTY = np.empty(0, dtype=np.int64)


class ChangeLog:
    __slots__ = ("following", "_parts")

    def __init__(self):
        self.following = False
        self._parts: list[np.ndarray] = []

    def follow(self) -> None:
        """Start recording; the follower has just copied the whole table."""
        self.following = True
        self._parts = []

    def add(self, flat: np.ndarray) -> None:
        if self.following and len(flat):
            # A copy: the caller may pass a view of a row that is rewritten before the drain.
            self._parts.append(np.array(flat, dtype=np.int64).reshape(-1))

    def add_range(self, start: int, stop: int) -> None:
        if self.following and stop > start:
            self._parts.append(np.arange(start, stop, dtype=np.int64))

    def drain(self) -> np.ndarray:
        """Every index written since the last drain (may repeat); the log starts empty again."""
        parts, self._parts = self._parts, []
        if not parts:
            return EMPTY
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
