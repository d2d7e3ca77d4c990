"""Verification of a draft against the target's logits.

A draft is a tree in verify order: node 0 is the root (the last verified token),
`parents[i] < i` for every other node, and the target has produced logits at every
node (its prediction of the token after that node). A chain is the tree whose
parents are 0, 1, 2, ...

Greedy: walk from the root, following the child whose token is the target's argmax;
the first argmax without a matching child is the bonus token. That is exactly the
token plain greedy decoding would produce at each position, so the output is
lossless (K11).

Sampling (temperature > 0): at each node, try its children in order; accept child
token t with probability min(1, p(t) / q(t)), where p is the target's distribution
at the node and q the draft's; on a rejection replace p by the normalised residual
max(0, p - q) and drop t from q; when no child is accepted, sample the bonus from
what is left of p. For a chain whose tokens were sampled from q this is the standard
lossless speculative sampling rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Verdict:
    tokens: list[int]  # accepted draft tokens then the bonus token
    path: list[int]  # node indices of the accepted path, root first (len(tokens) entries)


def chain_parents(n: int) -> list[int]:
    return [-1] + list(range(n - 1))


def _children(parents: list[int]) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents[1:], start=1):
        if not 0 <= p < i:
            raise ValueError(f"node {i} has parent {p}; parents must come first")
        kids[p].append(i)
    return kids


def greedy(tokens: list[int], parents: list[int], target_argmax: list[int]) -> Verdict:
    kids = _children(parents)
    node, out, path = 0, [], [0]
    while True:
        want = target_argmax[node]
        nxt = next((c for c in kids[node] if tokens[c] == want), None)
        out.append(want)
        if nxt is None:
            return Verdict(out, path)
        node = nxt
        path.append(node)


def greedy_chains(tokens: np.ndarray, target_argmax: np.ndarray) -> list[Verdict]:
    """greedy() for B chains of n nodes at once ([B, n] draft tokens, root first, and the
    target's argmax at each node): the accepted length is the run of leading matches, one
    vector pass for the batch instead of a walk per request."""
    B, n = tokens.shape
    match = tokens[:, 1:] == target_argmax[:, :-1]
    accepted = np.cumprod(match, axis=1).sum(axis=1) if n > 1 else np.zeros(B, dtype=np.int64)
    rows = target_argmax.tolist()
    return [Verdict(rows[b][: a + 1], list(range(a + 1))) for b, a in enumerate(accepted.tolist())]


def sample(
    tokens: list[int],
    parents: list[int],
    p: torch.Tensor,
    q: torch.Tensor,
    gen: torch.Generator,
) -> Verdict:
    """p: [n, V] target probabilities at each node; q: [n, V] draft probabilities at each node."""
    kids = _children(parents)
    node, out, path = 0, [], [0]
    while True:
        pn = p[node].clone()
        qn = q[node].clone()
        accepted = None
        for c in kids[node]:
            t = tokens[c]
            qt = float(qn[t])
            u = float(torch.rand((), generator=gen, device=gen.device))
            if qt > 0 and u * qt < float(pn[t]):
                accepted = c
                break
            residual = (pn - qn).clamp_min(0)
            pn = residual / residual.sum() if residual.sum() > 0 else pn
            qn[t] = 0
            qn = qn / qn.sum() if qn.sum() > 0 else qn
        if accepted is None:
            out.append(int(torch.multinomial(pn, 1, generator=gen)))
            return Verdict(out, path)
        out.append(tokens[accepted])
        node = accepted
        path.append(node)
