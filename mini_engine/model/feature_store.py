"""Per-request target hidden states a drafter still needs (its conditioning features)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class FeatureStore:
    """Target hidden states of positions [start, start + len(h)), plus the draft progress.

    `draft_done`: positions below it have final draft KV; the next draft needs the
    features of positions [draft_done - 1, root - 1].
    """

    hidden_size: int
    device: torch.device
    dtype: torch.dtype
    start: int = 0
    h: torch.Tensor | None = None
    draft_done: int = 0

    @property
    def end(self) -> int:
        return self.start + (0 if self.h is None else self.h.shape[0])

    def put(self, pos: int, h: torch.Tensor) -> None:
        """Store the hidden states of positions [pos, pos + len(h)); later positions are dropped."""
        if self.h is None or pos < self.start:
            self.start, self.h = pos, h.detach()
            return
        if pos > self.end:
            raise ValueError(f"feature gap: have [{self.start}, {self.end}), got position {pos}")
        self.h = torch.cat([self.h[: pos - self.start], h.detach()])

    def get(self, a: int, b: int) -> torch.Tensor:
        """Features of positions [a, b); position -1 (before the first token) is zeros."""
        lead = max(0, -a)
        a = max(a, 0)
        if b > a and (self.h is None or a < self.start or b > self.end):
            raise ValueError(f"features of [{a}, {b}) requested, have [{self.start}, {self.end})")
        body = self.h[a - self.start : b - self.start] if b > a else self._empty()
        if lead:
            body = torch.cat([torch.zeros(lead, self.hidden_size, device=self.device, dtype=self.dtype), body])
        return body

    def reset(self, start: int, h: torch.Tensor, draft_done: int) -> None:
        """Hold exactly the features of positions [start, start + len(h))."""
        self.start, self.h, self.draft_done = start, h, draft_done

    def draft_inputs(self, end: int) -> tuple[int, torch.Tensor]:
        """Where the drafter's context update starts and the features it pairs with the
        tokens [start, end): position p's token goes with the feature of p - 1.

        After a prefix hit (a fresh request, or a retracted one re-admitted) the target
        computed [self.start, end) only. The tree's slots below that hold the draft KV
        their first owner wrote (the drafter's cache is indexed by the same slots), so the
        drafter continues at self.start; the target feature before it is not recomputed
        and reads as zeros: the drafts may differ there, the outputs cannot (K11)."""
        d = self.draft_done = max(self.draft_done, self.start)
        if d == 0 or d - 1 >= self.start:
            return d, self.get(d - 1, end - 1)
        return d, torch.cat([torch.zeros(1, self.hidden_size, device=self.device, dtype=self.dtype),
                             self.get(d, end - 1)])

    def trim(self) -> None:
        """Drop what the next draft cannot need (positions below draft_done - 1)."""
        keep = max(0, self.draft_done - 1)
        if self.h is not None and keep > self.start:
            self.h = self.h[keep - self.start :]
            self.start = keep

    def _empty(self) -> torch.Tensor:
        return torch.zeros(0, self.hidden_size, device=self.device, dtype=self.dtype)


def settle(stores: list[FeatureStore], roots: np.ndarray, h: torch.Tensor, keep: np.ndarray, counts: np.ndarray,
           before_root: torch.Tensor, done: int) -> None:
    """After a verify, every store keeps what the next draft needs, in one gather.

    For each request, put(root, its accepted path's features) then draft_done = root +
    done and trim(): the features of positions [root + done - 1, ...). The path's rows
    of h are `keep` (flat, `counts` a request); with done 0 the next draft also needs
    the feature of root - 1 (before_root, one row a request: the last feature its job
    was fed), unless the root is position 0.
    """
    B = len(stores)
    extra = (roots >= 1) if done == 0 else np.zeros(B, dtype=bool)
    cnt = counts + extra
    first = np.cumsum(cnt) - cnt
    idx = np.empty(int(cnt.sum()), dtype=np.int64)
    kept_first = np.cumsum(counts) - counts
    idx[np.repeat(first + extra, counts) + (np.arange(len(keep)) - np.repeat(kept_first, counts))] = keep
    src = h
    if extra.any():
        idx[first[extra]] = len(h) + np.flatnonzero(extra)
        src = torch.cat([h, before_root.to(h.dtype)])
    parts = src.index_select(0, torch.from_numpy(idx).to(h.device)).split(cnt.tolist())
    for st, root, x, f in zip(stores, roots.tolist(), extra.tolist(), parts):
        st.reset(root - x, f, root + done)
