"""Verification: greedy is lossless on any tree; sampling keeps the target's distribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mini_engine.spec import verify


def test_chain_accepts_the_matching_prefix_and_a_bonus():
    v = verify.greedy([9, 1, 2, 3], verify.chain_parents(4), [1, 2, 7, 5])
    assert v.tokens == [1, 2, 7] and v.path == [0, 1, 2]


def test_chain_all_accepted_takes_the_last_bonus():
    v = verify.greedy([9, 1, 2], verify.chain_parents(3), [1, 2, 4])
    assert v.tokens == [1, 2, 4] and v.path == [0, 1, 2]


def test_tree_follows_the_matching_branch():
    # root -> {a=5 (1), b=6 (2)}; 6 -> {7 (3)}; target wants 6 then 7 then 8
    tokens, parents = [0, 5, 6, 7], [-1, 0, 0, 2]
    v = verify.greedy(tokens, parents, [6, 1, 7, 8])
    assert v.tokens == [6, 7, 8] and v.path == [0, 2, 3]


def _oracle(context: tuple[int, ...], vocab: int) -> int:
    return hash(context) % vocab


@settings(max_examples=60, deadline=None)
@given(data=st.data(), vocab=st.integers(2, 5))
def test_greedy_tree_is_lossless(data, vocab):
    """Whatever the tree, the output is what greedy decoding of the oracle produces."""
    n = data.draw(st.integers(1, 12))
    parents = [-1] + [data.draw(st.integers(0, i - 1)) for i in range(1, n)]
    tokens = [0] + [data.draw(st.integers(0, vocab - 1)) for _ in range(1, n)]
    # Siblings carry distinct tokens, as top-k children do.
    assume(len({(parents[i], tokens[i]) for i in range(1, n)}) == n - 1)
    paths = []
    for i in range(n):
        p, a = [], i
        while a > 0:
            p.append(tokens[a])
            a = parents[a]
        paths.append(tuple(reversed(p)))
    argmax = [_oracle(paths[i], vocab) for i in range(n)]
    v = verify.greedy(tokens, parents, argmax)
    ctx: tuple[int, ...] = ()
    for t in v.tokens:
        assert t == _oracle(ctx, vocab)
        ctx += (t,)
    # Longest: the accepted path ends at a node, and no node continues it with the bonus.
    assert ctx[:-1] == paths[v.path[-1]]
    assert ctx not in paths


def _sample_many(p, q, tokens, parents, trials=3000, seed=0):
    gen = torch.Generator().manual_seed(seed)
    firsts = torch.zeros(p.shape[1])
    for _ in range(trials):
        firsts[verify.sample(tokens, parents, p, q, gen).tokens[0]] += 1
    return firsts / trials


@pytest.mark.parametrize("draft_token", [0, 2])
def test_sampling_keeps_the_target_distribution(draft_token):
    """A chain draft drawn from q: the first output token is distributed as p, not q."""
    p = torch.tensor([[0.1, 0.6, 0.3], [0.2, 0.2, 0.6]], dtype=torch.float64)
    q = torch.tensor([[0.7, 0.1, 0.2], [0.0, 0.0, 0.0]], dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    counts = torch.zeros(3)
    trials = 4000
    for _ in range(trials):
        d = int(torch.multinomial(q[0], 1, generator=gen))  # the draft token comes from q
        counts[verify.sample([draft_token, d], [-1, 0], p, q, gen).tokens[0]] += 1
    assert torch.allclose(counts / trials, p[0].float(), atol=0.03)


def test_sampling_residual_never_picks_a_rejected_overweight_token():
    """q puts everything on token 0, p none: 0 is always rejected, the residual is p."""
    p = torch.tensor([[0.0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]], dtype=torch.float64)
    q = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    freq = _sample_many(p, q, [5, 0], [-1, 0], trials=1000)
    assert freq[0] == 0 and abs(freq[1] - 0.5) < 0.06


def test_sampling_accepts_when_draft_equals_target():
    p = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    v = verify.sample([0, 1], [-1, 0], p, p.clone(), torch.Generator().manual_seed(0))
    assert v.tokens == [1, 0] and v.path == [0, 1]


def test_greedy_chains_equal_the_walk_per_request():
    """The batch's chain verdicts in one vector pass are greedy()'s, request by request."""
    rng = np.random.default_rng(0)
    for n in (1, 2, 4, 7):
        toks = rng.integers(0, 3, (40, n))  # three symbols: matches, partial runs and full acceptance all occur
        am = rng.integers(0, 3, (40, n))
        got = verify.greedy_chains(toks, am)
        for b in range(40):
            want = verify.greedy(toks[b].tolist(), verify.chain_parents(n), am[b].tolist())
            assert (got[b].tokens, got[b].path) == (want.tokens, want.path)
