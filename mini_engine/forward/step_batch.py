"""StepBatch: everything a backend sees of one forward, built by the engine.

The memory layer has planned and reserved every slot before a forward runs; the
engine then turns that plan into one typed batch (``BatchBuilder``), and the backend
reads the batch alone: it never holds the KV manager. Per request the batch carries
the positions the forward writes, the host slots of the positions it reads, their SWA
copies when the model has sliding layers, and, for a backend that keeps a device copy
of req_to_token and the SWA map, the table entries written since its last forward.

Which of those a batch carries is the backend's choice, declared once: ``reads``
(the phases whose batches carry host slot rows) and whether it keeps a ``mirror``.
The accounting-only backend reads neither, so its batches cost a few columns.

Pure numpy: the accounting-only engine imports this without torch.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter

import numpy as np

from mini_engine.memory.pool.changes import EMPTY


class Phase(enum.Enum):
    PREFILL = "prefill"  # chunks of prompts: write [start, end); the next token when the prompt is done
    DECODE = "decode"  # plain decode: write position seq_len - 1, one token each
    VERIFY = "verify"  # draft + verify from the root seq_len - 1, up to the reserved extent
    TRANSFER = "transfer"  # PD arrivals: receive the KV of [hit, fill_len); the prefill side's first token


@dataclass(frozen=True)
class Layout:
    """The pool sizes a backend sizes its KV cache for, handed over once at setup."""

    page_size: int
    num_pages: int
    swa_num_pages: int  # 0: no SWA pool
    row_width: int
    max_reqs: int

    @classmethod
    def of(cls, mem) -> Layout:
        """From the run's MemoryConfig."""
        return cls(mem.page_size, mem.num_pages, mem.swa_num_pages or 0, mem.row_width, mem.max_reqs)

    @property
    def has_swa(self) -> bool:
        return self.swa_num_pages > 0

    @property
    def full_slots(self) -> int:
        return (self.num_pages + 1) * self.page_size  # slot 0 is the dummy slot

    @property
    def swa_slots(self) -> int:
        return (self.swa_num_pages + 1) * self.page_size if self.has_swa else 0


@dataclass
class MirrorUpdate:
    """Table entries written since the mirror's last forward: flat indices and their values."""

    r2t_index: np.ndarray  # into req_to_token flattened
    r2t_values: np.ndarray
    map_index: np.ndarray = field(default_factory=lambda: EMPTY)  # into the SWA map (full slot -> SWA slot)
    map_values: np.ndarray = field(default_factory=lambda: EMPTY)

    def __len__(self) -> int:
        return len(self.r2t_index) + len(self.map_index)


@dataclass
class StepBatch:
    """One forward's input. Columns are per request, in ``reqs`` order.

    starts, ends: the positions written, [start, end): for decode [seq_len - 1, seq_len);
        for verify the root and the reserved extent (a draft tree writes into it).
    slots: host slots of positions [0, end) (the rows the forward reads), or None when
        the backend does not read host rows in this phase.
    swa_slots: the SWA copies of ``slots`` (0 below the window cursor), or None.
    mirror: the table writes since the mirror's last forward (decode only, with a mirror).

    ``committed`` (how far each request's KV is final: a forward writes from there on),
    ``rows`` (each request's req_to_token row, where a device mirror holds its slots)
    and ``swa_cursor`` (below it the SWA KV is gone) are read from the requests at first
    use, inside the forward: a backend that needs none of them (the accounting-only
    one) pays nothing for them at 256 running requests.
    """

    phase: Phase
    reqs: list
    starts: np.ndarray
    ends: np.ndarray
    slots: list[np.ndarray] | None = None
    swa_slots: list[np.ndarray] | None = None
    mirror: MirrorUpdate | None = None
    kv_rows: object | None = None  # the manager's KVRows, when the caller handed over ``rows``

    def __len__(self) -> int:
        return len(self.reqs)

    @cached_property
    def committed(self) -> np.ndarray:
        if self.kv_rows is not None:  # a state's lengths are its row's: one gather
            return self.kv_rows.committed[self.rows]
        return np.fromiter((r.kv.committed for r in self.reqs), dtype=np.int64, count=len(self.reqs))

    @cached_property
    def rows(self) -> np.ndarray:
        return np.fromiter((r.kv.row for r in self.reqs), dtype=np.int64, count=len(self.reqs))

    @cached_property
    def swa_cursor(self) -> np.ndarray:
        if self.kv_rows is not None:
            return self.kv_rows.swa_evicted[self.rows]
        return np.fromiter((r.kv.swa_evicted for r in self.reqs), dtype=np.int64, count=len(self.reqs))


class MirrorFeed:
    """Follows the memory layer's change logs for one device mirror: each ``drain`` hands
    over the entries written since the last one, with their current host values."""

    def __init__(self, manager):
        r2t = manager.req_to_token
        self._r2t, self._r2t_log = r2t.host.reshape(-1), r2t.changes
        self._r2t_log.follow()
        self._map = self._map_log = None
        if manager.swa is not None:
            self._map, self._map_log = manager.swa.map_host, manager.swa.map_changes
            self._map_log.follow()
        # A mirror starts as zeros: whatever the tables already hold goes over in the first drain.
        self._first = (np.flatnonzero(self._r2t), None if self._map is None else np.flatnonzero(self._map))

    def drain(self) -> MirrorUpdate:
        first, self._first = self._first, None
        idx = self._r2t_log.drain()
        if first is not None:
            idx = np.concatenate([first[0], idx])
        up = MirrorUpdate(idx, self._r2t[idx])
        if self._map is not None:
            midx = self._map_log.drain()
            if first is not None:
                midx = np.concatenate([first[1], midx])
            up.map_index, up.map_values = midx, self._map[midx]
        return up


class BatchBuilder:
    """Builds each phase's StepBatch from the manager: the one place that reads the plan."""

    def __init__(self, manager, *, reads=frozenset(), mirror: bool = False):
        self.m = manager
        self.reads = frozenset(reads)
        self.feed = MirrorFeed(manager) if mirror else None

    def prefill(self, reqs: list, starts: list[int], ends: list[int]) -> StepBatch:
        return self._build(Phase.PREFILL, reqs, np.asarray(starts, dtype=np.int64),
                           np.asarray(ends, dtype=np.int64))

    def transfer(self, reqs: list) -> StepBatch:
        # A decode-radix hit is on the device already: the transfer starts past it.
        ends = np.fromiter((r.fill_len for r in reqs), dtype=np.int64, count=len(reqs))
        starts = np.fromiter((r.kv.protected for r in reqs), dtype=np.int64, count=len(reqs))
        return self._build(Phase.TRANSFER, reqs, starts, ends)

    def decode(self, reqs: list, rows: np.ndarray | None = None) -> StepBatch:
        """rows: the requests' req_to_token rows, when the caller has them (as verify)."""
        lens = _seq_lens(reqs)
        batch = self._build(Phase.DECODE, reqs, lens - 1, lens, rows)
        if self.feed is not None:
            batch.mirror = self.feed.drain()  # the host writes since the last decode, once per step
        return batch

    def verify(self, reqs: list, rows: np.ndarray | None = None) -> StepBatch:
        """rows: the requests' req_to_token rows, when the caller has them (a state's
        lengths are its row's, so the extents are one gather)."""
        if rows is None:
            extents = np.fromiter((r.kv.allocated for r in reqs), dtype=np.int64, count=len(reqs))
        else:
            extents = self.m.rows.allocated[rows]
        return self._build(Phase.VERIFY, reqs, _seq_lens(reqs) - 1, extents, rows)

    def _build(self, phase: Phase, reqs: list, starts: np.ndarray, ends: np.ndarray,
               rows: np.ndarray | None = None) -> StepBatch:
        batch = StepBatch(phase, reqs, starts.reshape(len(reqs)), ends.reshape(len(reqs)))
        if rows is not None:  # the columns a forward reads become gathers, not per-request reads
            batch.__dict__["rows"] = rows  # StepBatch.rows, given
            batch.kv_rows = self.m.rows
        if phase in self.reads:
            m = self.m
            # Copies: a row is rewritten in place after the request leaves, and a backend
            # may keep its slots (a drafter's job) past this call.
            batch.slots = [m.slots(r.kv, 0, e).copy() for r, e in zip(reqs, ends.tolist())]
            if m.swa is not None:
                batch.swa_slots = [m.swa.translate(x) for x in batch.slots]
        return batch


_PROMPT, _OUTPUTS = attrgetter("prompt"), attrgetter("outputs")


def _seq_lens(reqs: list) -> np.ndarray:
    # Two C-level passes (map over attrgetter), several times cheaper than one generator.
    n = len(reqs)
    return (np.fromiter(map(len, map(_PROMPT, reqs)), dtype=np.int64, count=n)
            + np.fromiter(map(len, map(_OUTPUTS, reqs)), dtype=np.int64, count=n))
