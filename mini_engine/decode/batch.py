"""DecodeBatch: the running decode batch's host arrays, kept in step across decode steps.

Requests that were released or stopped decoding leave the arrays (filter), those that
joined are merged, and each step's planned extents are recorded; beside the arrays
it keeps their requests (and their outputs lists) in the arrays' order, the rids
released since the last filter and each row's remaining outputs. It is the only
writer of those; the decode step reads them.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from mini_engine.memory.audit.record import Auditor, Violation
from mini_engine.memory.batch import BatchArrays
from mini_engine.memory.manager import KVManager
from mini_engine.request import Request

# The rows column of a batch of requests, one C-level pass.
_KV_ROW = attrgetter("kv.row")


def rows_of(reqs: list[Request]) -> np.ndarray:
    """The requests' req_to_token rows, as one array."""
    return np.fromiter(map(_KV_ROW, reqs), dtype=np.int64, count=len(reqs))


class DecodeBatch:
    def __init__(self, manager: KVManager, auditor: Auditor, *, step_reserve: int, page_size: int):
        self.manager = manager
        self.auditor = auditor
        self.step_reserve = step_reserve
        self.page_size = page_size
        # Where a reservation is cut (None: written past the row, memory.overflow).
        self.row_width = None if manager.rules.row_overflow else manager.mem.row_width
        self.arrays: BatchArrays | None = None  # created at the first decode step
        self.reqs: list = []  # the requests of the arrays, in their order
        self.outs: list = []  # and their outputs lists (a request keeps its list for life)
        self.left: set = set()  # rids released since the arrays were last filtered
        self.releases = 0  # requests released so far (a step without one keeps every position)
        # Output tokens each decoding request may still produce, by row: set when it joins the
        # batch, then moved by its results only (no other writer adds outputs meanwhile).
        self.left_rows = np.zeros(manager.mem.max_reqs, dtype=np.int64)
        self.aranged = np.arange(0, dtype=np.int64)  # arange(n) of the last n, reused

    def released(self, rid: object) -> None:
        """A request gave its row back: it leaves the arrays at the next filter."""
        self.releases += 1
        self.left.add(rid)

    def sync(self, batch: list[Request], step_no: int) -> np.ndarray:
        """After the reservation: requests that left leave the arrays, those that joined
        are merged, and the extents the reservation gave are recorded (host arrays only).

        Returns each request's position in the arrays (-1: missing, reported as K10).
        """
        if self.arrays is None:
            self.arrays = BatchArrays.from_states([])
        b = self.arrays
        # The common step: nobody left since the last filter and the same requests decode in
        # the same order, so there is nothing to filter, merge or look up.
        if self.left or batch != self.reqs:
            rids = [r.rid for r in batch]
            self.filter(set(rids))
            pos = {rid: i for i, rid in enumerate(b.rids)}
            joined = [r for r in batch if r.rid not in pos]
            if joined:
                b.merge(BatchArrays.from_states([r.kv for r in joined]))
                # A joining request's remaining outputs; from here on its results keep it.
                self.left_rows[rows_of(joined)] = [r.remaining for r in joined]
                pos = {rid: i for i, rid in enumerate(b.rids)}  # read back: a missed merge shows as K10
            self._match(batch)
            where = np.fromiter((pos.get(rid, -1) for rid in rids), dtype=np.int64, count=len(rids))
        else:
            where = self.arange(len(batch))
        b.set_allocated(b.plan_extents(self.step_reserve, self.page_size, self.manager.step_aligned,
                                       self.row_width))
        if where is not self.aranged and (where < 0).any():
            for r, at in zip(batch, where.tolist()):
                if at < 0:  # a missed merge: its commits have no place in the arrays
                    self.auditor.report(Violation("K10", r.rid, step_no,
                                                  {"row": r.kv.row, "reason": "decoding but not in the batch"}))
        return where

    def _match(self, reqs: list[Request]) -> None:
        """The requests of the arrays, in their order (read from the arrays' rids)."""
        by_rid = {r.rid: r for r in self.reqs}
        by_rid.update((r.rid, r) for r in reqs)
        self.reqs = [by_rid.get(rid) for rid in self.arrays.rids]
        self.outs = [getattr(r, "outputs", None) for r in self.reqs]  # their token lists

    def filter(self, decoding: set | None = None) -> None:
        """Requests that were released (or, given the decoding rids, do not decode) leave the arrays."""
        left, self.left = self.left, set()
        if self.arrays is None or not (left or decoding is not None):
            return
        rids = self.arrays.rids
        if decoding is not None and not left and len(decoding) == len(rids) and decoding.issuperset(rids):
            return  # everyone stays
        keep = [i for i, rid in enumerate(rids)
                if rid not in left and (decoding is None or rid in decoding)]
        if len(keep) != len(rids):
            self.arrays.filter(keep)
            self._match([])

    def took_output(self, reqs: list[Request]) -> None:
        """A prefill result that landed late (overlap) gave these requests their first output:
        those that joined the arrays before it have one remaining output less there."""
        if self.arrays is None:
            return
        live = [r for r in reqs if r.kv is not None]
        pos = self.positions(live)
        joined = [r for r, at in zip(live, pos.tolist()) if at >= 0 and self.reqs[at] is r]
        if joined:
            self.left_rows[rows_of(joined)] -= 1

    def positions(self, reqs: list[Request]) -> np.ndarray:
        """Each request's position in the arrays, by rid (-1: not there)."""
        if reqs == self.reqs:
            return self.arange(len(reqs))
        pos = {rid: i for i, rid in enumerate(self.arrays.rids)}
        return np.fromiter((pos.get(r.rid, -1) for r in reqs), dtype=np.int64, count=len(reqs))

    def commit(self, reqs: list[Request], n: np.ndarray, in_order: bool) -> None:
        """Each request's accepted count into the arrays' committed lengths (in_order: reqs
        are the arrays' requests in their order); a request missing from them was reported
        as K10 at the sync and is skipped here."""
        if in_order:
            self.arrays.commit(n)
            return
        pos = self.positions(reqs)
        counts = np.zeros(len(self.arrays), dtype=np.int64)
        ok = pos >= 0
        counts[pos[ok]] = n[ok]
        self.arrays.commit(counts)

    def arange(self, n: int) -> np.ndarray:
        if len(self.aranged) != n:
            self.aranged = np.arange(n, dtype=np.int64)
        return self.aranged
