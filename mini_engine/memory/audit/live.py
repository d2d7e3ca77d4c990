"""What the state checks read of a KVManager's live requests (Live), and what the last check saw (Seen).

KVTables keeps a Seen, so K2 and K6 compare a request's state with the one the last
check saw in its row.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from mini_engine.memory.kv_state import KVRows, ReqKVState


class Requests(Protocol):
    """What Live reads: a KVManager (or its KVTables). Typed by shape, not by the class,
    so that the tables, which keep a Seen, do not import back up to the manager."""

    states: dict[int, ReqKVState]
    rows: KVRows

_PROTECTED = attrgetter("protected")


class Live:
    """The live requests of a KVManager in vector form, gathered once per check: their
    states (in the manager's order, which orders the violations), rows, lengths, cursors
    and identities. A live state is a view of its row in the manager's KVRows, so the
    row arrays are its values."""

    __slots__ = ("states", "rows", "alloc", "com", "swa", "aligned", "ids", "prot")

    def __init__(self, m: Requests):
        self.states = list(m.states.values())
        n = len(self.states)
        self.rows = np.fromiter(m.states.keys(), dtype=np.int64, count=n)
        kv = m.rows
        self.alloc, self.com = kv.allocated[self.rows], kv.committed[self.rows]
        self.swa, self.aligned = kv.swa_evicted[self.rows], kv.aligned[self.rows]
        self.ids = np.fromiter(map(id, self.states), dtype=np.int64, count=n)
        self.prot = np.fromiter(map(_PROTECTED, self.states), dtype=np.int64, count=n)  # a state's own field


class Seen:
    """What the last check saw, by row: which state (by identity; the states are kept
    alive here, so an id is never reused while it is compared), its extent and its SWA
    cursor. K2 and K6 compare a state with itself only."""

    __slots__ = ("ids", "alloc", "swa", "_keep")

    def __init__(self, n: int):
        self.ids = np.zeros(n, dtype=np.int64)  # 0: nothing seen in the row
        self.alloc = np.zeros(n, dtype=np.int64)
        self.swa = np.zeros(n, dtype=np.int64)
        self._keep: list = []

    def take(self, live: Live) -> None:
        self.ids[:] = 0
        self.ids[live.rows] = live.ids
        self.alloc[live.rows] = live.alloc
        self.swa[live.rows] = live.swa
        self._keep = live.states

    def forget(self, row: int) -> None:
        self.ids[row] = 0

    def same(self, live: Live) -> np.ndarray:
        """For each live state: whether the last check saw this very state in its row."""
        return self.ids[live.rows] == live.ids
