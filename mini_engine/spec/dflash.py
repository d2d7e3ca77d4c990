"""DFLASH block drafting: one forward drafts `block_size - 1` tokens.

First the drafter's context KV is brought up to date: a causal draft forward over
the committed positions it has not seen yet, each fed the target's hidden state of
the position before (the target conditions the drafter through these features).
Then one non-causal forward over the block [root, mask, ..., mask] at positions
root..root + block_size - 1: every block token sees the whole block and the
drafter's context KV, limited to the last `draft_window` positions (the compact
draft cache). Block output i proposes the token at root + i + 1.

The block's own K/V are scratch: they land in the reserved rows and are
overwritten by the next context update, so the drafter's context is final only
below the root.
"""

from __future__ import annotations

import numpy as np
import torch

from mini_engine.model.draft import DraftModel
from mini_engine.model.draft_io import DraftJob, DraftTree, Piece, context_update, draft_forward, pick, rows_upto
from mini_engine.model.transformer import Attend, KVCache
from mini_engine.spec.verify import chain_parents


class DFlashDrafter:
    def __init__(self, model: DraftModel, cache: KVCache, block_size: int, draft_window: int | None,
                 temperature: float, attend: Attend, gen: torch.Generator | None = None):
        self.model, self.cache, self.attend = model, cache, attend
        self.block_size, self.draft_window = block_size, draft_window or 0
        self.temperature, self.gen = temperature, gen

    def extend(self, jobs: list[DraftJob]) -> None:
        """Context KV of positions [start, root] of each job, from the target's features."""
        context_update(self.model, self.cache, jobs, self.attend, self.draft_window)

    def draft(self, jobs: list[DraftJob]) -> list[DraftTree]:
        m, bs = self.model, self.block_size
        dev = m.target.device
        # Context update: positions [start, root) of the jobs that have any.
        pending = [DraftJob(j.start, j.tokens[:-1], j.feats[:-1], j.slots) for j in jobs if j.root > j.start]
        if pending:
            self.extend(pending)
        if bs == 1:  # nothing to draft: verify the root alone
            return [DraftTree([j.tokens[-1]], [-1], [0]) for j in jobs]
        # The whole batch's blocks in one embedding lookup: [root, mask, ..., mask] per job,
        # each block fed its root's feature.
        full = np.ones((bs, bs), dtype=np.int8)
        pieces = [Piece(None, None, np.arange(j.root, j.root + bs), rows_upto(j, j.root + bs), full) for j in jobs]
        roots = torch.tensor([j.tokens[-1] for j in jobs], device=dev)
        is_mask = (torch.arange(bs, device=dev) > 0).repeat(len(jobs))
        embeds = m.embed(roots.repeat_interleave(bs), is_mask)
        feats = torch.cat([j.feats[-1:] for j in jobs]).repeat_interleave(bs, dim=0)
        hs = draft_forward(m, self.cache, pieces, self.attend, self.draft_window, embeds, feats)
        logits = m.logits(torch.cat([h[:-1] for h in hs]))
        toks, q = pick(logits, self.temperature, self.gen)
        toks = toks.view(len(jobs), bs - 1).tolist()
        trees = []
        for i, j in enumerate(jobs):
            qi = None
            if q is not None:
                # q at node k is the distribution node k + 1 was drawn from; the last node has none.
                qi = torch.cat([q[i * (bs - 1) : (i + 1) * (bs - 1)], torch.zeros_like(q[:1])])
            trees.append(DraftTree([j.tokens[-1]] + toks[i], chain_parents(bs), list(range(bs)), qi))
        return trees
