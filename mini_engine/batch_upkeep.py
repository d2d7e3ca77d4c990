"""Upkeep of the batch arrays (memory.batch.BatchArrays) across decode steps.

Requests that were released or stopped decoding leave the arrays (filter), those that
joined are merged, and each step's planned extents are recorded; the engine keeps the
arrays' requests (and their outputs lists) in the arrays' order beside them.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from mini_engine.memory.batch import BatchArrays
from mini_engine.memory.invariants import Violation
from mini_engine.request import Request

# The rows column of a batch of requests, one C-level pass.
_KV_ROW = attrgetter("kv.row")


def _rows(reqs: list[Request]) -> np.ndarray:
    return np.fromiter(map(_KV_ROW, reqs), dtype=np.int64, count=len(reqs))


class BatchUpkeep:
    """Engine's batch-array methods, kept apart so each file stays short. The state they
    read and write is the engine's own, set up in Engine.__init__."""

    def _sync_batch(self, batch: list[Request]) -> np.ndarray:
        """After the reservation: requests that left leave the batch arrays, those that joined
        are merged, and the extents the reservation gave are recorded (host arrays only).

        Returns each request's position in the batch arrays (-1: missing, reported as K10).
        """
        if self.batch is None:
            self.batch = BatchArrays.from_states([])
        b = self.batch
        # The common step: nobody left since the last filter and the same requests decode in
        # the same order, so there is nothing to filter, merge or look up.
        if self._left or batch != self._batch_reqs:
            rids = [r.rid for r in batch]
            self._filter_batch(set(rids))
            pos = {rid: i for i, rid in enumerate(b.rids)}
            joined = [r for r in batch if r.rid not in pos]
            if joined:
                b.merge(BatchArrays.from_states([r.kv for r in joined]))
                # A joining request's remaining outputs; from here on its results keep it.
                self._left_rows[_rows(joined)] = [r.remaining for r in joined]
                pos = {rid: i for i, rid in enumerate(b.rids)}  # read back: a missed merge shows as K10
            self._match_batch(batch)
            where = np.fromiter((pos.get(rid, -1) for rid in rids), dtype=np.int64, count=len(rids))
        else:
            where = self._arange(len(batch))
        b.set_allocated(b.plan_extents(self.sched.step_reserve, self.cfg.page_size, self.manager.step_aligned,
                                       self.mem.row_width))
        if where is not self._aranged and (where < 0).any():
            for r, at in zip(batch, where.tolist()):
                if at < 0:  # a missed merge: its commits have no place in the arrays
                    self.auditor.report(Violation("K10", r.rid, self.step_no,
                                                  {"row": r.kv.row, "reason": "decoding but not in the batch"}))
        return where

    def _match_batch(self, reqs: list[Request]) -> None:
        """The requests of the batch arrays, in their order (read from the arrays' rids)."""
        by_rid = {r.rid: r for r in self._batch_reqs}
        by_rid.update((r.rid, r) for r in reqs)
        self._batch_reqs = [by_rid.get(rid) for rid in self.batch.rids]
        self._batch_outs = [getattr(r, "outputs", None) for r in self._batch_reqs]  # their token lists

    def _filter_batch(self, decoding: set | None = None) -> None:
        """Requests that were released (or, given the decoding rids, do not decode) leave the batch."""
        left, self._left = self._left, set()
        if self.batch is None or not (left or decoding is not None):
            return
        rids = self.batch.rids
        if decoding is not None and not left and len(decoding) == len(rids) and decoding.issuperset(rids):
            return  # everyone stays
        keep = [i for i, rid in enumerate(rids)
                if rid not in left and (decoding is None or rid in decoding)]
        if len(keep) != len(rids):
            self.batch.filter(keep)
            self._match_batch([])

    def _positions(self, reqs: list[Request]) -> np.ndarray:
        """Each request's position in the batch arrays, by rid (-1: not there)."""
        if reqs == self._batch_reqs:
            return self._arange(len(reqs))
        pos = {rid: i for i, rid in enumerate(self.batch.rids)}
        return np.fromiter((pos.get(r.rid, -1) for r in reqs), dtype=np.int64, count=len(reqs))

    def _arange(self, n: int) -> np.ndarray:
        if len(self._aranged) != n:
            self._aranged = np.arange(n, dtype=np.int64)
        return self._aranged
