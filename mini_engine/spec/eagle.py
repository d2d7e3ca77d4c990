"""EAGLE drafting: a chain (topk = 1) or a tree (topk > 1) from the draft head.

Step 1 runs the drafter over the positions whose draft KV is not final, the root
(last verified token) included; the root's output gives the first `topk` children.
Each later step forwards the draft nodes so far (rows root+1, root+2, ... of the
reserved part, RoPE position root + depth, a tree mask so a node sees only its
ancestors), and every frontier node proposes `topk` children; the best `topk` by
cumulative log-probability become the next frontier. After `steps` steps the
`num_draft_tokens - 1` best nodes (closed under parents) form the verify tree.

Draft KV rows used beyond the root: at most (steps - 1) * topk, inside the
reservation (W = max(steps * topk, num_draft_tokens) per DESIGN.md).
"""

from __future__ import annotations

import numpy as np
import torch

from mini_engine.model.draft import DraftModel
from mini_engine.model.draft_io import (ChainDrafts, DraftJob, DraftTree, Piece, context_rows, context_update,
                                        draft_forward, flat_feats, job_columns, pick, pick_from, rows_upto, slot_table,
                                        table_forward)
from mini_engine.model.extend_fused import SlotTable
from mini_engine.model.transformer import Attend, KVCache


class _Tree:
    """Growing draft tree of one request; node 0 is the root."""

    def __init__(self, root_token: int):
        self.tokens, self.parents, self.depths = [root_token], [-1], [0]
        self.scores: list[float] = [0.0]
        self.hidden: dict[int, torch.Tensor] = {}  # draft hidden state of forwarded nodes
        self.q: dict[int, torch.Tensor] = {}  # draft distribution at forwarded nodes (sampling)
        self.forwarded: list[int] = []  # non-root nodes with draft KV, in row order
        self.frontier: list[int] = []

    def add(self, token: int, parent: int, score: float) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.scores.append(score)
        return len(self.tokens) - 1

    def ancestors_mask(self, nodes: list[int]) -> np.ndarray:
        index = {n: i for i, n in enumerate(nodes)}
        m = np.zeros((len(nodes), len(nodes)), dtype=np.int8)
        for i, n in enumerate(nodes):
            a = n
            while a > 0:
                m[i, index[a]] = 1
                a = self.parents[a]
        return m

    def select(self, budget: int) -> DraftTree:
        """The `budget` best non-root nodes, closed under parents, in verify order."""
        order = sorted(range(1, len(self.tokens)), key=lambda n: (-self.scores[n], self.depths[n], n))
        chosen: set[int] = set()
        for n in order:
            if len(chosen) >= budget:
                break
            if self.parents[n] == 0 or self.parents[n] in chosen:
                chosen.add(n)
        keep = [0] + sorted(chosen, key=lambda n: (self.depths[n], n))
        index = {n: i for i, n in enumerate(keep)}
        return DraftTree(
            tokens=[self.tokens[n] for n in keep],
            parents=[-1] + [index[self.parents[n]] for n in keep[1:]],
            depths=[self.depths[n] for n in keep],
            q=self._q_rows(keep),
        )

    def _q_rows(self, keep: list[int]) -> torch.Tensor | None:
        if not self.q:
            return None
        some = next(iter(self.q.values()))
        return torch.stack([self.q.get(n, torch.zeros_like(some)) for n in keep])


class EagleDrafter:
    def __init__(self, model: DraftModel, cache: KVCache, topk: int, steps: int, num_draft_tokens: int,
                 temperature: float, attend: Attend, gen: torch.Generator | None = None):
        self.model, self.cache, self.attend = model, cache, attend
        self.topk, self.steps, self.ndt = topk, steps, num_draft_tokens
        self.temperature, self.gen = temperature, gen

    def extend(self, jobs: list[DraftJob]) -> None:
        """Draft KV of positions the target has prefilled (fed the target's features)."""
        context_update(self.model, self.cache, jobs, self.attend)

    def draft(self, jobs: list[DraftJob], table: SlotTable | None = None) -> list[DraftTree] | ChainDrafts:
        """Each job's draft; table: the step's slot table over the jobs' slots, if the caller has one."""
        if self.topk == 1:
            return self._chain(jobs, table)
        m = self.model
        dev = m.target.device
        # Positions verified last step, the root last: final draft KV, and the root's
        # hidden state proposes the first children.
        hs = context_update(m, self.cache, jobs, self.attend)
        trees = [_Tree(j.tokens[-1]) for j in jobs]
        for t, h in zip(trees, hs):
            t.hidden[0] = h[-1]
        self._expand(trees, [[0] for _ in trees], torch.stack([h[-1] for h in hs]))
        for _ in range(self.steps - 1):
            # One embedding lookup and one feature stack for the batch, not one per request.
            pieces, ids, feats = [], [], []
            for t, j in zip(trees, jobs):
                t.forwarded += t.frontier
                nodes = t.forwarded
                ids += [t.tokens[n] for n in nodes]
                feats += [t.hidden[t.parents[n]] for n in nodes]
                pos = np.array([j.root + t.depths[n] for n in nodes], dtype=np.int64)
                rows = rows_upto(j, j.root + 1 + len(nodes))
                pieces.append(Piece(None, None, pos, rows, t.ancestors_mask(nodes)))
            hs = draft_forward(m, self.cache, pieces, self.attend, embeds=m.embed(torch.tensor(ids, device=dev)),
                               feats=torch.stack(feats))
            for t, h in zip(trees, hs):
                for n, row in zip(t.forwarded, h):
                    t.hidden[n] = row
            fronts = [list(t.frontier) for t in trees]
            self._expand(trees, fronts, torch.stack([t.hidden[n] for t, f in zip(trees, fronts) for n in f]))
        return [t.select(self.ndt - 1) for t in trees]

    def _chain(self, jobs: list[DraftJob], table: SlotTable | None) -> ChainDrafts:
        """topk 1: one chain a request, drafted for the whole batch in tensor passes.

        A chain's cumulative log-probability only falls with depth, so its best
        num_draft_tokens - 1 nodes are its shallowest: no scores, no selection. Each step
        forwards the newest node alone; the nodes before it already wrote their draft KV
        (rows root + 1, ...), which a causal query reads as it reads the prefix."""
        m, B = self.model, len(jobs)
        dev = m.target.device
        table = slot_table(m, jobs, self.attend, 0, table)
        starts, lens = job_columns(jobs)
        roots = starts + lens - 1
        if table is None:
            hid = torch.stack([h[-1] for h in context_update(m, self.cache, jobs, self.attend)])
        else:
            ids = torch.tensor([t for j in jobs for t in j.tokens], device=dev)
            h = context_rows(m, self.cache, jobs, table, self.attend, np.arange(B), starts, lens, ids,
                             flat_feats(jobs))
            hid = h[torch.from_numpy(np.cumsum(lens) - 1).to(dev)]
        nodes = min(self.ndt - 1, self.steps)
        # Greedy drafts stop at the last node kept; sampling draws every step, as the
        # generator's stream must not depend on the budget.
        last = self.steps if self.temperature > 0 else nodes
        toks, qs = [], []
        for s in range(1, last + 1):
            t, q = pick_from(m, hid, self.temperature, self.gen)  # node s - 1 proposes node s
            toks.append(t)
            qs.append(q)
            if s == self.steps:
                break
            # Forward node s (row and position root + s), fed its parent's hidden state.
            if table is None:
                pieces = [Piece(None, None, np.array([j.root + s]), rows_upto(j, j.root + s + 1)) for j in jobs]
                hid = draft_forward(m, self.cache, pieces, self.attend, embeds=m.embed(t), feats=hid)
                hid = torch.cat(hid)
            else:
                hid = table_forward(m, self.cache, table, np.arange(B), roots + s, m.embed(t), hid, self.attend)
        tokens = np.empty((B, nodes + 1), dtype=np.int64)
        tokens[:, 0] = [j.tokens[-1] for j in jobs]
        if nodes:
            tokens[:, 1:] = torch.stack(toks[:nodes], 1).cpu().numpy()
        q = None
        if self.temperature > 0:
            qs = qs[: self.steps] + [torch.zeros_like(qs[0])]  # the deepest node proposed nothing
            q = torch.stack(qs[: nodes + 1], 1)
        return ChainDrafts(tokens, q)

    def _expand(self, trees: list[_Tree], fronts: list[list[int]], hidden: torch.Tensor) -> None:
        """Each frontier node proposes topk children; keep the best topk per tree."""
        logits = self.model.logits(hidden)
        logp = torch.log_softmax(logits.double(), -1)
        k = self.topk
        if k == 1:
            toks, q = pick(logits, self.temperature, self.gen)
            # One host read for the whole batch (a float() per request is a device sync each on a GPU).
            lp = logp.gather(1, toks[:, None]).squeeze(1).tolist()
            toks = toks.tolist()
            for i, (t, f) in enumerate(zip(trees, fronts)):
                n = f[0]
                if q is not None:
                    t.q[n] = q[i]
                t.frontier = [t.add(toks[i], n, t.scores[n] + lp[i])]
            return
        top_lp, top_tok = logp.topk(k, dim=-1)
        top_lp, top_tok = top_lp.tolist(), top_tok.tolist()
        probs = torch.softmax(logits.double() / self.temperature, -1) if self.temperature > 0 else None
        i = 0
        for t, f in zip(trees, fronts):
            cands = []
            for n in f:
                if probs is not None:
                    t.q[n] = probs[i]
                cands += [(t.scores[n] + lp, n, tok) for lp, tok in zip(top_lp[i], top_tok[i])]
                i += 1
            cands.sort(key=lambda c: (-c[0], c[1], c[2]))
            t.frontier = [t.add(tok, n, s) for s, n, tok in cands[:k]]
