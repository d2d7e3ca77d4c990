"""PageLedger: which pages each request holds, per pool.

An owner array per pool (page -> row + 1, 0 = not held) plus per-row and total
counts kept incrementally, so the engine reads pages held in O(1) and an audit can
check conservation (K8) page by page.
"""

from __future__ import annotations

import numpy as np


class PageLedger:
    def __init__(self, num_pages: dict[str, int], max_reqs: int):
        self.owner = {p: np.zeros(n + 1, dtype=np.int64) for p, n in num_pages.items()}
        self.held = {p: np.zeros(max_reqs, dtype=np.int64) for p in num_pages}
        self.total = {p: 0 for p in num_pages}

    def take(self, pool: str, rows: np.ndarray, pages: np.ndarray) -> None:
        """rows[i] now holds pages[i] (rows repeated once per page)."""
        if len(pages) == 0:
            return
        self.owner[pool][pages] = rows + 1
        held = self.held[pool]
        held += np.bincount(rows, minlength=len(held))  # one pass (np.add.at is several times slower)
        self.total[pool] += len(pages)

    def give_back(self, pool: str, row: int, pages: np.ndarray) -> np.ndarray:
        """Pages of row that were freed; returns those the row did not hold (for K5/K8)."""
        owner = self.owner[pool]
        mine = owner[pages] == row + 1
        ok = pages[mine]
        owner[ok] = 0
        self.held[pool][row] -= len(ok)
        self.total[pool] -= len(ok)
        return pages[~mine]

    def drop_row(self, pool: str, row: int) -> np.ndarray:
        """Forget whatever row still holds after its release: those pages leaked."""
        n = int(self.held[pool][row])
        if n == 0:
            return np.empty(0, dtype=np.int64)
        owner = self.owner[pool]
        leaked = np.flatnonzero(owner == row + 1)
        owner[leaked] = 0
        self.held[pool][row] = 0
        self.total[pool] -= n
        return leaked

    def pages_of(self, pool: str, row: int) -> np.ndarray:
        return np.flatnonzero(self.owner[pool] == row + 1)
