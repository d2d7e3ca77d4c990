"""Release: how KVManager frees a finished request's pages, under the profile's free rule.

A part of KVManager (manager.py): it frees from the shared KVTables and has no state
of its own.
"""

from __future__ import annotations

from mini_engine.memory.extents.release_unique import swa_chunk_release, unique_row_pieces
from mini_engine.memory.kv_state import ReqKVState
from mini_engine.memory.tables import KVTables


class Release:
    def __init__(self, t: KVTables):
        self.t = t
        # The tables and rules it reads, bound once (never replaced).
        self.ps, self.rules, self.states, self.req_to_token = t.ps, t.rules, t.states, t.req_to_token
        self.full, self.swa, self.ledger = t.full, t.swa, t.ledger
        self.stranded_by_writer, self.reserve_base, self.reserve_of = t.stranded_by_writer, t.reserve_base, t.reserve_of

    def release(self, state: ReqKVState, tokens=None, prompt_len: int = 0) -> int:
        """Free the request's pages under the profile's free rule and return its row.

        With a prefix tree (memory/tree/prefix.py): tokens (the request's prompt + outputs; None
        for a retraction, SGLang's checkpoint=False) are inserted up to the owned length
        first, the tree's prefix [0, protected) is not freed, and the lock is dropped.
        """
        row, extent, ps = state.row, state.allocated, self.ps
        if self.states.get(row) is not state:
            # A stale state's row may already belong to another request: freeing it would free theirs.
            raise ValueError(f"release of request {state.rid}: it is not live (released already?)")
        prefix = self.t.prefix
        if prefix is not None and tokens is not None:
            prefix.checkpoint(state, tokens, prompt_len, min(state.committed, len(tokens)))
        host_row = self.req_to_token.host[row]
        prot = state.protected
        cursor = max(state.swa_evicted, prot)  # below protected the slots (and their SWA) are the tree's
        if self.rules.free == "unique-row" and self.swa is None and prefix is None:
            # 0.5.18's ChunkCache release (release_unique.py); with its radix tree 0.5.18
            # frees by segment (RadixCache.cache_finished_req), the else branch below.
            for pages in unique_row_pieces(self.full, host_row, state.committed, extent, ps):
                self.t.give_back("full", state, pages)
        elif self.rules.free == "unique-row" and prefix is None:
            # 0.5.18's SWAChunkCache release on its SWA allocator (release_unique.py).
            for full_pages, swa_pages in swa_chunk_release(self.full, self.swa, host_row, prot,
                                                           state.committed, extent):
                self.t.give_back("full", state, full_pages)
                self.t.give_back("swa", state, swa_pages)
        elif self.rules.free == "dedup":
            if extent > prot:
                self.t.give_back("full", state, self.full.free(host_row[prot:extent]))
            if self.swa is not None:
                self.t.give_back("swa", state, self.swa.release_dedup(host_row, cursor, extent))
        else:
            for start, end, swa in self.pieces(state.committed, extent, cursor, prot):
                if swa:  # SGLang frees the SWA copy first, then the full page
                    self.t.give_back("swa", state, self.swa.free_positions(host_row, start, end))
                self.t.give_back("full", state, self.full.free_segment(host_row, start, end))
            if self.swa is not None:
                self.swa.clear_row(host_row, cursor, extent)
        if prefix is not None:
            prefix.forget(state)
        self.ledger.drop_row("full", row)
        if self.swa is not None:
            self.ledger.drop_row("swa", row)
        t = self.t
        t.sum_extent -= extent
        t.sum_committed -= state.committed
        if state.writer:
            self.stranded_by_writer[state.writer] -= -(-extent // ps) * ps - extent
        self.reserve_base[row] = self.reserve_of[row] = t.asked_end[row] = 0
        self.req_to_token.free(row, extent)
        del self.states[row]
        t.seen.forget(row)
        state.detach()  # its row is free for the next request; the state keeps its values
        state.released = True
        return row

    def pieces(self, owned: int, extent: int, cursor: int, protected: int = 0) -> list[tuple[int, int, bool]]:
        """The (start, end, with_swa) position ranges a release frees, in SGLang's order.

        SGLang's release_kv_cache frees the row [protected, owned) (protected: what
        the prefix tree holds, 0 without one), then the over-allocation [ceil_ps(owned),
        allocated); within each, the part below the SWA cursor goes back full-side
        only, first. Each range is one page-id free per pool, and which pages land
        in front of the free list depends on that order. The ranges are clipped at
        the free rule's end (_free_end), so together they free exactly its pages.
        """
        ps, end = self.ps, self._free_end(extent)
        owned = min(owned, extent)
        top = -(-owned // ps) * ps
        out = []
        for a, b in ((protected, min(top, end)), (max(top, protected), end)):
            if b <= a:
                continue
            dead = min(max(cursor, a), b) if self.swa is not None else a
            if dead > a:
                out.append((a, dead, False))
            if b > dead:
                out.append((dead, b, self.swa is not None))
        return out

    def _free_end(self, extent: int) -> int:
        """End of the pages a host free takes, by stride over the recorded extent.

        segment (SGLang): every page the extent touches, the row's segment
        [0, owned) plus the over-allocation [ceil_ps(owned), extent), so nothing
        leaks. floor: whole pages of the extent only, so an unaligned extent drops
        its last page (one leaked page per such release).
        """
        if self.rules.free == "floor":
            return extent // self.ps * self.ps
        return -(-extent // self.ps) * self.ps
