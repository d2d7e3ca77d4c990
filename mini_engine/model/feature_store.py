"""Per-request target hidden states a drafter still needs (its conditioning features)."""

from __future__ import annotations

from dataclasses import dataclass

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

    def trim(self) -> None:
        """Drop what the next draft cannot need (positions below draft_done - 1)."""
        keep = max(0, self.draft_done - 1)
        if self.h is not None and keep > self.start:
            self.h = self.h[keep - self.start :]
            self.start = keep

    def _empty(self) -> torch.Tensor:
        return torch.zeros(0, self.hidden_size, device=self.device, dtype=self.dtype)
