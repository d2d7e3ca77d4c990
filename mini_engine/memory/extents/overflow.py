"""Row overflow: a speculative reservation that runs past its req_to_token row (K4).

At page size 1 SGLang sizes a row 4 + num_draft_tokens past the context
(get_req_to_token_extra_context_len) while DFLASH / EAGLE reserve committed +
2 x the draft width (page_aligned_decode_alloc_lens), so near the end of a long
request nxt passes the row's end (SGLang issue 33579). SGLang then:
  - allocates the whole nxt - cur (alloc_for_spec_decode checks no row width);
  - writes the slots through assign_req_to_token_pool, a kernel that indexes the
    flat table by row * width + position, so positions past the row land in the
    next row's first positions (past the tensor's end for the last row);
  - frees the row through free_kv_row's row[start:end], a slice the row's width
    clips, so the slots past the row never come back (leaked_pages).

MemoryRules.row_overflow says whether kvbench does the same (the sglang-*
profiles) or cuts nxt at the row's end (kvbench's own profiles). Both report K4
for the short reservation and count, in the tables:
  row_overflow_slots    distinct positions past a row that reservations reached
                        (each once: a later reservation of the same request only
                        adds the positions past the last one's end);
  row_overwritten_slots positions of another row of the table the overflow wrote
                        (the corruption of issue 33579; 0 when cut).
"""

from __future__ import annotations

import numpy as np

from mini_engine.memory.audit.record import Violation
from mini_engine.memory.kv_state import ReqKVState
from mini_engine.memory.tables import KVTables


class RowOverflow:
    def __init__(self, t: KVTables):
        self.t = t
        self.width = t.mem.row_width
        self.write_past = t.rules.row_overflow
        # The furthest end any reservation of the row's request asked for (reset on release),
        # so a position past the row counts once however many reservations reach it.
        self.asked_end = t.asked_end

    def any_short(self, com: np.ndarray, nxt: np.ndarray, reserve: int, pad: int) -> bool:
        """Whether any row lacks the headroom for its reservation (two reductions, the common case)."""
        return int(com.max()) > self.width - reserve - pad or int(nxt.max()) > self.width

    def plan(self, states: list[ReqKVState], rows: np.ndarray, com: np.ndarray, nxt: np.ndarray,
             reserve: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
        """Report K4 for the short rows, count the new positions past the row, and return
        the extents to allocate (nxt itself when the rule writes past the row, else cut)
        and the short mask. pad: the page round-up of an aligned reservation."""
        width = self.width
        short = (width - com < reserve + pad) | (nxt > width)
        reached = np.maximum(self.asked_end[rows], width)
        self.t.row_overflow_slots += int(np.maximum(nxt - reached, 0).sum())
        self.asked_end[rows] = np.maximum(self.asked_end[rows], nxt)
        for i in np.flatnonzero(short).tolist():
            self.t.report(Violation("K4", states[i].rid, self.t.step, {
                "committed": int(com[i]), "reserve": reserve, "nxt": int(nxt[i]),
                "row_width": width, "page_size": self.t.ps}))
        return (nxt if self.write_past else np.minimum(nxt, width)), short

    def fits_target(self, nxt: np.ndarray) -> np.ndarray:
        """The extents prepare would allocate, for the fits check (cut or not, as plan)."""
        return nxt if self.write_past else np.minimum(nxt, self.width)

    def written(self, rows: np.ndarray, positions: np.ndarray) -> None:
        """Count the positions of another table row that writes past their own row hit.
        Those past the table's end (the last row's overflow) overwrite no row."""
        past = positions >= self.width
        if past.any():
            flat = rows[past] * self.width + positions[past]
            self.t.row_overwritten_slots += int(np.count_nonzero(flat < self.t.req_to_token.host.size))
