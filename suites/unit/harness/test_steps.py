"""Step detection over nights (harness/judge/steps.py): asv's piecewise-constant fit."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.judge.steps import Step, detect


def test_the_page_size_shape_gives_two_steps_with_their_sizes():
    steps = detect([1830, 1830, 1888, 1888, 1888, 2240])
    assert steps == [Step(2, 1, 1830, 1888), Step(5, 4, 1888, 2240)]
    assert [s.size() for s in steps] == ["+58 (+3.2%)", "+352 (+18.6%)"]


def test_a_night_that_did_not_measure_is_skipped_and_the_range_spans_it():
    assert detect([None, 3, None, 4]) == [Step(3, 1, 3, 4)]
    assert detect([5]) == [] and detect([None, None]) == [] and detect([7, 7, 7]) == []


@settings(max_examples=60, deadline=None)
@given(n=st.integers(4, 30), at=st.data(), level=st.integers(0, 10**6), jump=st.integers(1, 10**5),
       sign=st.sampled_from([1, -1]))
def test_one_exact_change_is_one_step_where_it_landed(n, at, level, jump, sign):
    """A counter is exact: any change is a step, at its night, of its size."""
    k = at.draw(st.integers(1, n - 1))
    values = [level] * k + [level + sign * jump] * (n - k)
    assert detect(values) == [Step(k, k - 1, level, level + sign * jump)]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(5, 40))
def test_noise_within_the_repeats_is_no_step(seed, n):
    rng = random.Random(seed)
    samples = [[1.0 + rng.uniform(-0.05, 0.05) for _ in range(5)] for _ in range(n)]
    values = [sorted(s)[2] for s in samples]
    assert detect(values, samples) == []
    # and a 30% slowdown over that noise is found where it starts
    k = n // 2
    slow = [[v * 1.3 for v in s] if i >= k else s for i, s in enumerate(samples)]
    found = detect([sorted(s)[2] for s in slow], slow)
    assert [s.night for s in found] == [k] and 0.15 < found[0].delta < 0.45  # 0.3, give or take the noise


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.integers(-1000, 1000).map(float), min_size=1, max_size=12))
def test_the_running_median_costs_are_the_plain_ones(values):
    from harness.judge.steps import _costs, _median

    cost = _costs(values)
    for i in range(len(values)):
        for j in range(i + 1, len(values) + 1):
            m = _median(values[i:j])
            assert cost[i][j] == sum(abs(v - m) for v in values[i:j])
