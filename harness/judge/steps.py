"""Step detection over a figure's nights, as asv does it for its graphs.

asv fits each benchmark's series with a piecewise-constant function (a level per
segment, L1 distance to the points, a penalty per extra segment) and reports every
jump of the fit as a step: where the figure changed, the commit it landed in, and by
how much. This is the same fit, small and exact (a dynamic program over the nights,
O(n^2) segments with a median each; a nightly keeps tens to hundreds of nights).

The penalty sets what counts as noise. It is scaled by the figure's noise: the spread
of its repeated samples where it has them (a timing), else the lower median of the
night-to-night differences (a counter that changes once has a median difference of 0,
so every real change is a step, as compare's exact rule for counters says).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

PENALTY = 4.0  # segments cost PENALTY * noise * log(n): asv's order of magnitude
MIN_JUMP = 2.0  # a fitted jump smaller than this many noise widths is noise, not a step
WINDOW = 60  # the newest nights a fit looks at: the report fits every figure of every config


@dataclass(frozen=True)
class Step:
    night: int  # index of the first night at the new level
    prev: int  # index of the last night measured at the old level (a gap can lie between)
    before: float  # the fitted level before
    after: float  # and after

    @property
    def delta(self) -> float:
        return self.after - self.before

    def size(self) -> str:
        """'+16 (+1.6%)': the jump, absolute and relative."""
        rel = f" ({self.delta / abs(self.before):+.1%})" if self.before else ""
        return f"{_fmt(self.delta, sign=True)}{rel}"


def _fmt(v: float, sign: bool = False) -> str:
    if float(v).is_integer() and abs(v) < 1e15:  # counters and token slots: every digit
        return f"{int(v):+d}" if sign else f"{int(v):d}"
    return f"{v:+.4g}" if sign else f"{v:.4g}"


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def noise(values: list[float], samples: list[list[float]] | None = None) -> float:
    """The figure's noise width: the median spread of its repeats, else the lower median
    of |night-to-night change| (robust to the few steps a series holds)."""
    spreads = [(max(s) - min(s)) / 2 for s in samples or [] if len(s) > 1]
    if spreads:
        return _median(spreads)
    diffs = sorted(abs(b - a) for a, b in zip(values, values[1:]))
    # Two nights have one difference, the change itself: no noise to tell it from.
    return diffs[(len(diffs) - 1) // 2] if len(diffs) > 1 else 0.0


def _costs(values: list[float]) -> list[list[float]]:
    """cost[i][j]: the L1 distance of points i..j-1 to their median, for every segment,
    O(n^2 log n): a running median (two heaps and their sums) as each segment grows."""
    n = len(values)
    cost = [[0.0] * (n + 1) for _ in range(n + 1)]
    for i in range(n):
        lo: list[float] = []  # the lower half, negated (a max-heap)
        hi: list[float] = []
        slo = shi = 0.0
        for j in range(i, n):
            v = values[j]
            if lo and v > -lo[0]:
                heapq.heappush(hi, v)
                shi += v
            else:
                heapq.heappush(lo, -v)
                slo += v
            if len(lo) > len(hi) + 1:
                x = -heapq.heappop(lo)
                slo -= x
                heapq.heappush(hi, x)
                shi += x
            elif len(hi) > len(lo):
                x = heapq.heappop(hi)
                shi -= x
                heapq.heappush(lo, -x)
                slo += x
            m = -lo[0]  # a median: the L1 distance is least there
            cost[i][j + 1] = (m * len(lo) - slo) + (shi - m * len(hi))
    return cost


def fit(values: list[float], gamma: float) -> list[int]:
    """Start indexes of the segments of the best L1 piecewise-constant fit, penalty gamma."""
    n = len(values)
    cost = _costs(values)
    best = [0.0] + [math.inf] * n
    start = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):
            c = best[i] + cost[i][j] + gamma
            if c < best[j] - 1e-12:
                best[j], start[j] = c, i
    cuts, j = [], n
    while j > 0:
        cuts.append(start[j])
        j = start[j]
    return sorted(cuts)


def detect(values: list[float | None], samples: list[list[float]] | None = None) -> list[Step]:
    """The steps of a series over nights (None where a night did not measure it)."""
    idx = [i for i, v in enumerate(values) if v is not None and math.isfinite(v)][-WINDOW:]
    ys = [float(values[i]) for i in idx]  # type: ignore[arg-type]
    if len(ys) < 2 or min(ys) == max(ys):  # most counters never move: no fit to make
        return []
    sigma = noise(ys, [samples[i] for i in idx] if samples else None)
    scale = max(abs(y) for y in ys) or 1.0
    # An exact figure (sigma 0) still needs a penalty above rounding: 1e-9 of its size.
    gamma = max(PENALTY * sigma * math.log(len(ys) + 1), 1e-9 * scale)
    cuts = fit(ys, gamma)
    bounds = [*cuts, len(ys)]
    levels = [_median(ys[a:b]) for a, b in zip(bounds, bounds[1:])]
    steps = []
    for k in range(1, len(cuts)):
        before, after = levels[k - 1], levels[k]
        if abs(after - before) > MIN_JUMP * sigma and after != before:
            steps.append(Step(idx[cuts[k]], idx[cuts[k] - 1], before, after))
    return steps
