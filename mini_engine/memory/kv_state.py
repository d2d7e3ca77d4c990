"""ReqKVState: the three lengths of one request, plus its SWA cursor.

The lengths live in per-row numpy arrays (KVRows, one slot per req_to_token row)
so that a decode step reads, plans and commits a whole batch in one numpy pass;
a ReqKVState is a view of its row in them. A state the manager released is
detached: it keeps a private copy of its last values, since its row may belong
to another request next.

The extent (kv_allocated_len) has one writer, the KVManager's allocation (_grow,
in extents/growth.py), which only ever raises it to max(target, current): K2, it never
decreases while the request lives. The state check K2 re-checks that after every step.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from mini_engine.memory.rules import WRITER_KINDS

# Who wrote an extent last (rules.WRITER_KINDS), stored as an index into that tuple; -1 is
# nobody yet. Stranded slots are counted per writer kind, K1 holds the aligned writers to 0.
WRITER_CODE = {k: i for i, k in enumerate(WRITER_KINDS)}


class KVRows:
    """Per-row length arrays (row-indexed, host numpy)."""

    def __init__(self, n: int):
        self.committed = np.zeros(n, dtype=np.int64)  # kv_committed_len: KV is final (verified)
        self.allocated = np.zeros(n, dtype=np.int64)  # kv_allocated_len: slots [0, allocated) owned
        self.swa_evicted = np.zeros(n, dtype=np.int64)  # swa_evicted_seqlen: SWA KV below it is freed
        self.writer = np.full(n, -1, dtype=np.int8)  # index into WRITER_KINDS
        self.aligned = np.zeros(n, dtype=bool)  # whether the last writer page-ceiled the extent

    def reset(self, row: int) -> None:
        self.committed[row] = self.allocated[row] = self.swa_evicted[row] = 0
        self.writer[row] = -1
        self.aligned[row] = False


# The rows of a batch of states, one C-level pass (a generator costs ~5x more per request).
_ROW = attrgetter("row")


def state_rows(states: list[ReqKVState]) -> np.ndarray:
    """The row of each state, as an int64 array (to index KVRows with)."""
    return np.fromiter(map(_ROW, states), dtype=np.int64, count=len(states))

def _length(name: str, doc: str) -> property:
    def get(self) -> int:
        return int(getattr(self._rows, name)[self._at])

    def put(self, value) -> None:
        getattr(self._rows, name)[self._at] = value

    return property(get, put, doc=doc)


class ReqKVState:
    __slots__ = ("rid", "row", "protected", "released", "_rows", "_at")

    def __init__(self, rid: object, row: int, committed: int = 0, allocated: int = 0, protected: int = 0,
                 swa_evicted: int = 0, released: bool = False, writer: str = "", aligned: bool = False,
                 *, rows: KVRows | None = None):
        self.rid, self.row, self.protected, self.released = rid, row, protected, released
        if rows is None:  # a standalone state (tests, replays): its own one-row arrays
            rows, self._at = KVRows(1), 0
        else:
            self._at = row
        self._rows = rows
        self.committed, self.allocated, self.swa_evicted = committed, allocated, swa_evicted
        self.writer, self.aligned = writer, aligned

    committed = _length("committed", "kv_committed_len: KV is final (verified)")
    allocated = _length("allocated", "kv_allocated_len: row slots [0, allocated) written and owned")
    swa_evicted = _length("swa_evicted", "swa_evicted_seqlen: SWA KV below it is freed")

    @property
    def writer(self) -> str:
        code = int(self._rows.writer[self._at])
        return WRITER_KINDS[code] if code >= 0 else ""

    @writer.setter
    def writer(self, kind: str) -> None:
        self._rows.writer[self._at] = WRITER_CODE[kind] if kind else -1

    @property
    def aligned(self) -> bool:
        return bool(self._rows.aligned[self._at])

    @aligned.setter
    def aligned(self, value: bool) -> None:
        self._rows.aligned[self._at] = value

    def move_to(self, row: int) -> None:
        """The request sits in another row now (its lengths moved there with it)."""
        self.row = self._at = row

    def detach(self) -> None:
        """Keep the current values privately: the row is being given back."""
        own = KVRows(1)
        for name in ("committed", "allocated", "swa_evicted", "writer", "aligned"):
            getattr(own, name)[0] = getattr(self._rows, name)[self._at]
        self._rows, self._at = own, 0

    def __repr__(self) -> str:
        return (f"ReqKVState(rid={self.rid!r}, row={self.row}, committed={self.committed}, "
                f"allocated={self.allocated}, protected={self.protected}, swa_evicted={self.swa_evicted}, "
                f"released={self.released}, writer={self.writer!r}, aligned={self.aligned})")
