"""The speculative verify of chain drafts (DFLASH's blocks, EAGLE with topk 1), batched.

Every chain of a step has the same length, so the target forward, the verdicts (greedy:
the leading matches with the target's argmax; sampled: spec.verify's rejection rule) and
the rows of h to keep are tensor passes over the whole batch, and an accepted path is
already contiguous in the KV. ModelBackend._verify calls it with itself; trees keep their
per-request path in the backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from mini_engine.model.draft_io import ChainDrafts, DraftJob, rows_upto
from mini_engine.model.extend_fused import SlotTable
from mini_engine.spec import verify
from mini_engine.forward.step_batch import StepBatch

if TYPE_CHECKING:  # the backend calls in here; importing it at run time would be a cycle
    from mini_engine.model.backend import ModelBackend


def verify_chains(be: ModelBackend, b: StepBatch, jobs: list[DraftJob], drafts: ChainDrafts, table: SlotTable | None):
    """Chains of one length (DFLASH's blocks, EAGLE topk 1): the target forward, its
    verdicts and the rows to keep, in tensor passes over the batch. Returns the results,
    each request's accepted path length, the path's rows of h (flat) and h."""
    reqs, toks = b.reqs, drafts.tokens
    B, n = toks.shape
    be.check_ids(reqs, toks[:, 0])
    for k in np.flatnonzero(((toks < 0) | (toks >= be.mcfg.vocab_size)).any(1))[:1].tolist():
        be.check_tokens(reqs[k], toks[k].tolist())
    ids = torch.from_numpy(toks.reshape(-1)).to(be.device)
    if table is not None:
        seq = np.repeat(np.arange(B), n)
        meta = table.meta(seq, b.starts[seq] + np.tile(np.arange(n), B))
        h = be.model(ids, meta.q_pos, meta, be.cache, be.attend)
    else:
        rows = [rows_upto(j, j.root + n) for j in jobs]
        swa = None if b.swa_slots is None else [s[: j.root + n] for s, j in zip(b.swa_slots, jobs)]
        pos = [j.root + np.arange(n, dtype=np.int64) for j in jobs]
        h = be.target_forward(ids, rows, swa, [n] * B, pos, [None] * B, fuse=True)
    if be.temperature <= 0:
        # The accepted run is the leading matches of the draft with the target's argmax.
        argmax = be.model.greedy(h).cpu().numpy().reshape(B, n)
        counts = np.cumprod(toks[:, 1:] == argmax[:, :-1], axis=1).sum(axis=1) + 1 if n > 1 \
            else np.ones(B, dtype=np.int64)
        results = [row[:c] for row, c in zip(argmax.tolist(), counts.tolist())]
    else:
        logits = be.model.logits(h)
        results, parents = [], verify.chain_parents(n)
        for k in range(B):
            p = torch.softmax(logits[k * n : (k + 1) * n].double() / be.temperature, -1).cpu()
            q = drafts.q[k].cpu() if drafts.q is not None else torch.zeros_like(p)
            results.append(verify.sample(toks[k].tolist(), parents, p, q, be.gen).tokens)
        counts = np.fromiter(map(len, results), dtype=np.int64, count=B)
    # A chain's accepted path is nodes 0 .. count - 1: already contiguous, no KV moves.
    first = np.repeat(np.arange(B) * n, counts)
    keep = first + (np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts))
    return results, counts, keep, h
