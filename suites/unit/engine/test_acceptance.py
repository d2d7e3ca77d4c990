"""Simulated acceptance: in range, reproducible, with the mean asked for."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings, strategies as st

from mini_engine.config.engine_config import EngineConfig
from mini_engine.spec.acceptance import Acceptance, solve_alpha, truncated_geometric_mean


@settings(max_examples=60, deadline=None)
@given(most=st.integers(2, 64), frac=st.floats(0.0, 1.0))
@example(most=19, frac=0.9999999999999999)  # alpha within 1e-9 of 1: the plain quotient cancels
def test_solve_alpha_hits_the_mean(most, frac):
    mean = 1 + frac * (most - 1)
    alpha = solve_alpha(mean, most)
    assert abs(truncated_geometric_mean(alpha, most) - mean) < 1e-9 * most


def test_draws_in_range_keyed_and_mean():
    cfg = EngineConfig(spec="dflash", block_size=16, accept_mean=6.0, seed=3)
    acc = Acceptance.from_config(cfg)
    draws = np.array([acc.draw(rid, pos) for rid in range(200) for pos in range(0, 1000, 7)])
    assert draws.min() >= 1 and draws.max() <= 16
    # 28,600 draws: the standard error of the mean is ~0.03.
    assert abs(draws.mean() - 6.0) < 0.15
    assert acc.draw(5, 77) == Acceptance.from_config(cfg).draw(5, 77)
    other = Acceptance.from_config(EngineConfig(spec="dflash", accept_mean=6.0, seed=4))
    assert any(acc.draw(1, p) != other.draw(1, p) for p in range(50))


def test_fixed_and_default():
    assert Acceptance.from_config(EngineConfig(spec="eagle", accept_len=2)).draw(1, 1) == 2
    default = Acceptance.from_config(EngineConfig(spec="dflash"))
    assert 6.0 < default.mean < 6.5  # tau ~6 at block 16
    assert Acceptance.from_config(EngineConfig(spec="dflash", accept_mean=16.0)).draw(0, 0) == 16
    assert Acceptance.from_config(EngineConfig(spec="dflash", accept_mean=1.0)).draw(0, 0) == 1


def test_vectorised_tokens_equal_the_scalar_ones():
    from mini_engine.forward.accounting import SimulatedBackend

    sim = SimulatedBackend(EngineConfig(seed=12345, vocab_size=1000))
    rids = [0, 1, 7, 2**40, 3]
    pos = [0, 99, 5, 17, 2**31]
    assert sim.tokens(rids, pos) == [sim.token(r, p) for r, p in zip(rids, pos)]
    assert sim.tokens([], []) == []
