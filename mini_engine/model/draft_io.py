"""What both drafters take and return, and one batched draft forward."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mini_engine.model.attention_torch import paged_attention
from mini_engine.model.attn_meta import build_meta
from mini_engine.model.config import torch_dtype
from mini_engine.model.draft import DraftModel
from mini_engine.model.extend_fused import SlotTable, can_fuse, paged_rows_meta
from mini_engine.model.transformer import Attend, KVCache


@dataclass
class DraftJob:
    """One request's drafting input.

    Positions [start, root] need (re)computed draft KV; `tokens` are their ids (the
    root, the last verified token, last) and `feats` the target's hidden states of
    the positions before them ([start - 1, root - 1], zeros before position 0).
    `slots` are the request's slots of positions [0, extent): draft tokens beyond the
    root are written into the reserved part.
    """

    start: int
    tokens: list[int]
    feats: torch.Tensor
    slots: np.ndarray

    @property
    def root(self) -> int:
        return self.start + len(self.tokens) - 1


@dataclass
class DraftTree:
    """A draft in verify order: node 0 is the root; parents come before children."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]
    q: torch.Tensor | None = None  # [n, V] draft distribution at each node (sampling only)


@dataclass
class ChainDrafts:
    """Every request's draft as a chain of one length, for the whole batch (DFLASH's block,
    EAGLE with topk 1): tokens [B, n], the root first; q [B, n, V] the draft distribution
    at each node (sampling only; zeros at a node that proposed nothing). Indexing gives
    one request's DraftTree."""

    tokens: np.ndarray
    q: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> DraftTree:
        n = self.tokens.shape[1]
        return DraftTree(self.tokens[i].tolist(), [-1] + list(range(n - 1)), list(range(n)),
                         None if self.q is None else self.q[i])

    def __iter__(self):
        return (self[i] for i in range(len(self)))


@dataclass
class Piece:
    """One sequence of a batched draft forward."""

    embeds: torch.Tensor | None  # [q, H]; None when draft_forward gets the whole batch's
    feats: torch.Tensor | None  # [q, H]; likewise
    positions: np.ndarray  # [q]
    rows: np.ndarray  # slots of row positions [0, prefix + q)
    mask: np.ndarray | None = None  # [q, q] custom mask of the extend part


def rows_upto(job: DraftJob, end: int) -> np.ndarray:
    """Slots of positions [0, end); the reservation must cover them (K4 seen from the model)."""
    if end > len(job.slots):
        raise RuntimeError(
            f"the draft needs positions up to {end - 1} but the reservation ends at {len(job.slots)}")
    return job.slots[:end]


def draft_forward(
    model: DraftModel, cache: KVCache, pieces: list[Piece], attend: Attend, context_window: int = 0,
    embeds: torch.Tensor | None = None, feats: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """Run the drafter over all pieces at once; returns each piece's hidden states.

    `embeds` / `feats`: the whole batch's rows, pieces in order (one embedding lookup
    and one copy for the batch, not one per piece); else each piece's are concatenated.
    """
    dev = model.target.device
    rows, q_lens, pos = [p.rows for p in pieces], [len(p.positions) for p in pieces], [p.positions for p in pieces]
    masks = [p.mask for p in pieces] if any(p.mask is not None for p in pieces) else None
    meta = None
    if not context_window and can_fuse(model.layers, torch_dtype(model.cfg), dev, attend is paged_attention):
        # Every draft layer in one compiled call, as plain decode (extend_fused.py).
        meta = paged_rows_meta(rows, q_lens, pos, masks, model.page_size, dev)
    if meta is None:
        meta = build_meta(rows, q_lens, pos, dev, tree_masks=masks)
    if embeds is None:
        embeds = torch.cat([p.embeds for p in pieces])
    if feats is None:
        feats = torch.cat([p.feats for p in pieces])
    h = model(embeds, feats, meta.q_pos, meta, cache, attend, context_window)
    return list(torch.split(h, [len(p.positions) for p in pieces]))


def pick_from(model: DraftModel, hidden: torch.Tensor, temperature: float,
              gen: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """pick() over the drafter's logits at `hidden`; greedy without materialising them."""
    if temperature <= 0:
        return model.greedy(hidden), None
    return pick(model.logits(hidden), temperature, gen)


def pick(logits: torch.Tensor, temperature: float, gen: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Greedy (argmax) or sampled tokens from [n, V] logits; the draft distribution when sampling."""
    if temperature <= 0:
        return logits.argmax(-1), None
    q = torch.softmax(logits.double() / temperature, -1)
    return torch.multinomial(q.cpu(), 1, generator=gen).squeeze(-1).to(logits.device), q


def context_update(model: DraftModel, cache: KVCache, jobs: list[DraftJob], attend: Attend,
                   context_window: int = 0) -> list[torch.Tensor]:
    """Causal draft forward over each job's positions [start, root]: final draft KV there."""
    dev = model.target.device
    pieces = [Piece(None, None, np.arange(j.start, j.root + 1), rows_upto(j, j.root + 1)) for j in jobs]
    ids = torch.tensor([t for j in jobs for t in j.tokens], device=dev)
    feats = jobs[0].feats if len(jobs) == 1 else torch.cat([j.feats for j in jobs])
    return draft_forward(model, cache, pieces, attend, context_window, model.embed(ids), feats)


def slot_table(model: DraftModel, jobs: list[DraftJob], attend: Attend, context_window: int = 0,
               table: SlotTable | None = None) -> SlotTable | None:
    """The step's slot table when the drafter's forwards go through the compiled decode
    layers (extend_fused.py), else None (the Python layer: build_meta). `table`: one the
    caller built over the same jobs' slots (the model backend shares it with the verify)."""
    dev = model.target.device
    if context_window or not can_fuse(model.layers, torch_dtype(model.cfg), dev, attend is paged_attention):
        return None
    return table if table is not None else SlotTable([j.slots for j in jobs], model.page_size, dev)


def job_columns(jobs: list[DraftJob]) -> tuple[np.ndarray, np.ndarray]:
    """Each job's first position and token count, as arrays."""
    n = len(jobs)
    starts = np.fromiter((j.start for j in jobs), dtype=np.int64, count=n)
    lens = np.fromiter((len(j.tokens) for j in jobs), dtype=np.int64, count=n)
    return starts, lens


def flat_feats(jobs: list[DraftJob]) -> torch.Tensor:
    return jobs[0].feats if len(jobs) == 1 else torch.cat([j.feats for j in jobs])


def table_forward(model: DraftModel, cache: KVCache, table: SlotTable, seq: np.ndarray, row: np.ndarray,
                  embeds: torch.Tensor, feats: torch.Tensor, attend: Attend,
                  lens: np.ndarray | None = None) -> torch.Tensor:
    """One draft forward over queries (sequence, row) of the step's table; flat hidden states."""
    meta = table.meta(seq, row, lens)
    return model(embeds, feats, meta.q_pos, meta, cache, attend)


def context_rows(model: DraftModel, cache: KVCache, jobs: list[DraftJob], table: SlotTable, attend: Attend,
                 which: np.ndarray, starts: np.ndarray, lens: np.ndarray, ids: torch.Tensor,
                 feats: torch.Tensor) -> torch.Tensor:
    """context_update through the step's table: causal rows [start, start + len) of the
    sequences `which`, fed token ids `ids` and features `feats` (flat, in order)."""
    seq = np.repeat(which, lens)
    first = np.cumsum(lens) - lens
    row = np.repeat(starts, lens) + (np.arange(int(lens.sum())) - np.repeat(first, lens))
    return table_forward(model, cache, table, seq, row, model.embed(ids), feats, attend)
