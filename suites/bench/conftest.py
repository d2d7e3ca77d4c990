"""Helpers of the benchmark suite.

pytest-benchmark switches itself off under xdist (the CI test command runs with
-n 2): each benchmark then runs its target once as a plain test, with no timing
statistics. The counters are still asserted; the figures only exist with -n 0.
"""

from __future__ import annotations

from typing import Callable

import pytest


@pytest.fixture
def bench_mean(benchmark) -> Callable[[], float | None]:
    """Call after the benchmark ran: its mean round time, or None when timing was off."""

    def mean() -> float | None:
        stats = getattr(benchmark, "stats", None)
        return stats.stats.mean if stats is not None else None

    return mean
