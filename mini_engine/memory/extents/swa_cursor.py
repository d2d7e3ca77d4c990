"""SWACursor: the SWA cursor (swa_evicted_seqlen), its one writer and the two rules that move it.

Window eviction frees the SWA pages a request's window has left behind; the decode
side of PD disaggregation preallocates a transferred request with SWA pages for
its tail only. Both write the cursor through _write_cursor, where K6 is checked.
A part of KVManager (manager.py): it reads the shared KVTables, and a PD prealloc
grows the request through the Growth part.
"""

from __future__ import annotations

import numpy as np

from mini_engine.errors import EvictFloorError, check_positive
from mini_engine.memory.audit.record import Violation
from mini_engine.memory.extents.growth import Growth
from mini_engine.memory.extents.release_unique import free_swa
from mini_engine.memory.kv_state import ReqKVState
from mini_engine.memory.sizing import pd_swa_tail_len, swa_evict_target
from mini_engine.memory.tables import KVTables


class SWACursor:
    def __init__(self, t: KVTables, growth: Growth):
        self.t = t
        self.growth = growth
        # The tables and rules it reads, bound once (never replaced).
        self.mem, self.ps, self.rules, self.trace, self.auditor = t.mem, t.ps, t.rules, t.trace, t.auditor
        self.swa, self.req_to_token = t.swa, t.req_to_token

    def evict_swa(self, state: ReqKVState, pre_len: int | None = None, *, interval: int | None = None) -> int:
        """SGLang's window rule once pre_len (default: committed) positions are final; returns SWA pages freed.

        interval: the eviction interval (the profile's in decode, 1 within chunked
        prefill); the threshold follows the profile's prefix cache (sizing.swa_evict_target).
        """
        if self.swa is None:
            return 0
        p = self.rules
        old = state.swa_evicted
        if pre_len is None:
            pre_len = state.committed
        new = swa_evict_target(pre_len, old, self.mem.window, self.ps,
                               p.swa_eviction_interval if interval is None else interval, p.prefix_cache)
        if new <= old:
            return 0
        # The tree's prefix [0, protected) is not the request's to free: SGLang floors the
        # cursor there first (swa_dead_lo, cache_protected_len); 0 without a tree.
        old = max(old, state.protected)
        new = self._write_cursor(state, max(new, old))
        row = self.req_to_token.host[state.row]
        if p.free == "unique-row":  # 0.5.18: its SWA allocator's free_swa (a unique, not by stride)
            freed = free_swa(self.swa, row[old:new])
        else:
            freed = self.swa.evict(row, old, new)
        self.t.give_back("swa", state, freed)
        return len(freed)

    def pd_prealloc(self, state: ReqKVState, fill_len: int) -> bool:
        """Decode side of PD: full KV for fill_len transferred tokens, SWA only for the tail.

        The request is fresh or starts at its decode-radix match (adopt): then only the
        positions past the match are allocated. 0.5.18 takes the tail path only without a
        hit (``uses_swa_tail and prefix_len == 0``): with one, both pools get the positions
        past it. The cursor is checked (K6) at its write: a caller that skips the floor
        fails there.
        """
        fill_len = check_positive("fill_len", fill_len)
        hit = state.protected
        if state.allocated != hit or state.committed != hit or hit > fill_len:
            raise ValueError(f"pd_prealloc needs a fresh request or one at its match; {state.rid} already has "
                             f"extent {state.allocated}")
        target = self.growth.extent_for(state, fill_len, "pd")
        # SGLang takes the tail path only when ps > 1.
        if self.swa is not None and self.ps > 1 and (hit == 0 or self.rules.pd_radix_tail):
            window = self.mem.window
            tail = pd_swa_tail_len(fill_len, window, self.ps, self.rules.pd_radix and self.rules.pd_radix_tail)
            value = fill_len - tail
            if self.trace is not None:
                self.trace.write({"op": "swa_prealloc", "fill_len": fill_len, "window": window,
                                  "tail": fill_len - value, "evicted": value})
            self._write_cursor(state, value, fill_len=fill_len, window=window)
        if not self.growth.grow([state], np.array([target], dtype=np.int64), writer="pd",
                          aligned=self.rules.aligns("pd")):
            state.swa_evicted = 0  # the prealloc did not happen: the fresh state is restored whole
            return False
        self.t.sum_committed += fill_len - hit
        state.committed = fill_len
        return True

    def _write_cursor(self, state: ReqKVState, value: int, **context: int) -> int:
        """The one writer of swa_evicted_seqlen; K6 fires here, at the write."""
        prev, ps = state.swa_evicted, self.ps
        if value < 0 or value % ps or value < prev:
            values = {"value": value, "previous": prev, "page_size": ps, **context}
            v = Violation("K6", state.rid, self.t.step, values)
            if self.auditor is not None:
                self.auditor.record(v)
            if self.auditor is None or self.auditor.mode != "record":
                raise EvictFloorError(state.rid, value, prev, ps, **context)
            value = max(prev, max(0, value) // ps * ps)
        state.swa_evicted = value
        return value
