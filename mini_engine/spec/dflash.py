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
from mini_engine.model.draft_io import (ChainDrafts, DraftJob, Piece, context_rows, context_update, draft_forward,
                                        flat_feats, job_columns, pick_from, rows_upto, slot_table, table_forward)
from mini_engine.model.extend_fused import SlotTable
from mini_engine.model.transformer import Attend, KVCache


class DFlashDrafter:
    def __init__(self, model: DraftModel, cache: KVCache, block_size: int, draft_window: int | None,
                 temperature: float, attend: Attend, gen: torch.Generator | None = None):
        self.model, self.cache, self.attend = model, cache, attend
        self.block_size, self.draft_window = block_size, draft_window or 0
        self.temperature, self.gen = temperature, gen

    def extend(self, jobs: list[DraftJob]) -> None:
        """Context KV of positions [start, root] of each job, from the target's features."""
        context_update(self.model, self.cache, jobs, self.attend, self.draft_window)

    def draft(self, jobs: list[DraftJob], table: SlotTable | None = None) -> ChainDrafts:
        """Each job's block as a chain; table: the step's slot table over the jobs' slots, if
        the caller has one."""
        m, bs, B = self.model, self.block_size, len(jobs)
        dev = m.target.device
        table = slot_table(m, jobs, self.attend, self.draft_window, table)
        starts, lens = job_columns(jobs)
        roots = starts + lens - 1
        root_ids = [j.tokens[-1] for j in jobs]
        feats = flat_feats(jobs)
        last = torch.from_numpy(np.cumsum(lens) - 1).to(dev)  # each job's root row in the flat columns
        # Context update: positions [start, root) of the jobs that have any.
        todo = np.flatnonzero(lens > 1)
        if len(todo) and table is None:
            self.extend([DraftJob(jobs[i].start, jobs[i].tokens[:-1], jobs[i].feats[:-1], jobs[i].slots)
                         for i in todo.tolist()])
        elif len(todo):
            keep = np.ones(int(lens.sum()), dtype=bool)
            keep[np.cumsum(lens) - 1] = False  # every row but the roots
            ids = torch.tensor([t for i in todo.tolist() for t in jobs[i].tokens[:-1]], device=dev)
            context_rows(m, self.cache, jobs, table, self.attend, todo, starts[todo], lens[todo] - 1, ids,
                         feats[torch.from_numpy(np.flatnonzero(keep)).to(dev)])
        if bs == 1:  # nothing to draft: verify the root alone
            return ChainDrafts(np.array(root_ids, dtype=np.int64).reshape(B, 1))
        # The whole batch's blocks in one embedding lookup: [root, mask, ..., mask] per job,
        # each block fed its root's feature.
        roots_t = torch.tensor(root_ids, device=dev)
        is_mask = (torch.arange(bs, device=dev) > 0).repeat(B)
        embeds = m.embed(roots_t.repeat_interleave(bs), is_mask)
        block_feats = feats[last].repeat_interleave(bs, dim=0)
        if table is None:
            full = np.ones((bs, bs), dtype=np.int8)
            pieces = [Piece(None, None, np.arange(j.root, j.root + bs), rows_upto(j, j.root + bs), full) for j in jobs]
            h = torch.cat(draft_forward(m, self.cache, pieces, self.attend, self.draft_window, embeds, block_feats))
        else:
            # A non-causal block: every block query sees the whole block (keys up to root + bs - 1).
            seq = np.repeat(np.arange(B), bs)
            row = roots[seq] + np.tile(np.arange(bs), B)
            h = table_forward(m, self.cache, table, seq, row, embeds, block_feats, self.attend,
                              lens=roots[seq] + bs)
        toks, q = pick_from(m, h.view(B, bs, -1)[:, :-1].reshape(B * (bs - 1), -1), self.temperature, self.gen)
        tokens = np.empty((B, bs), dtype=np.int64)
        tokens[:, 0] = root_ids
        tokens[:, 1:] = toks.view(B, bs - 1).cpu().numpy()
        if q is not None:
            # q at node k is the distribution node k + 1 was drawn from; the last node has none.
            q = q.view(B, bs - 1, -1)
            q = torch.cat([q, torch.zeros_like(q[:, :1])], 1)
        return ChainDrafts(tokens, q)
