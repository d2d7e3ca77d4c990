"""Simulated acceptance, in the spirit of SGLang's SGLANG_SIMULATE_ACC_LEN.

An accepted length counts the bonus token, so it lies in [1, max_accept]. Either it
is fixed, or it follows the usual speculative-decoding model: each draft token is
accepted with probability ``alpha`` until the first rejection (a geometric law
truncated at ``max_accept``), with ``alpha`` solved so that the mean is the one
asked for. Draws are a pure function of (seed, rid, position), so a request that
is retracted and recomputed accepts exactly what it would have accepted anyway.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_MASK = (1 << 64) - 1
# Per-draft-token acceptance used when no length or mean is given: it gives
# tau ~ 6.2 at block 16, near what the DFLASH paper reports for that block size.
DEFAULT_ALPHA = 0.85


def _round(h: int, v: int) -> int:
    h = (h ^ (v & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
    h ^= h >> 31
    h = (h + 0x9E3779B97F4A7C15) * 0x94D049BB133111EB & _MASK
    return h ^ (h >> 29)


def mix64(*values: int) -> int:
    """A 64-bit hash of small ints (splitmix64 finaliser chained over the values)."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = _round(h, v)
    return h


def mix64_array(prefix: tuple[int, ...], *arrays: np.ndarray) -> np.ndarray:
    """mix64(*prefix, a[i], b[i], ...) for every i at once (uint64 arithmetic wraps like & _MASK)."""
    n = len(arrays[0]) if arrays else 0
    h = np.full(n, mix64(*prefix), dtype=np.uint64)
    c1, c0, c2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x9E3779B97F4A7C15), np.uint64(0x94D049BB133111EB)
    s31, s29 = np.uint64(31), np.uint64(29)
    for a in arrays:
        h = (h ^ np.asarray(a, dtype=np.int64).astype(np.uint64)) * c1
        h ^= h >> s31
        h = (h + c0) * c2
        h ^= h >> s29
    return h


def uniform01(*values: int) -> float:
    """A float in (0, 1] keyed by the values (never 0, so log() is safe)."""
    return ((mix64(*values) >> 11) + 1) / float(1 << 53)


def truncated_geometric_mean(alpha: float, most: int) -> float:
    if alpha >= 1.0:
        return float(most)
    if alpha < 0.5:
        return (1.0 - alpha**most) / (1.0 - alpha)
    # The same quotient through expm1/log1p: as alpha nears 1 (a high mean asked for)
    # the plain one loses half its digits to cancellation.
    log_a = math.log1p(alpha - 1.0)
    return math.expm1(most * log_a) / math.expm1(log_a)


def solve_alpha(mean: float, most: int) -> float:
    """The alpha whose truncated-geometric mean over [1, most] is ``mean``."""
    if mean <= 1.0:
        return 0.0
    if mean >= most:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(80):  # the mean is increasing in alpha; bisection to double precision
        mid = (lo + hi) / 2
        if truncated_geometric_mean(mid, most) < mean:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass
class Acceptance:
    """Accepted lengths for one run: fixed, or truncated-geometric with a set mean."""

    seed: int
    most: int
    fixed: int | None = None
    alpha: float = DEFAULT_ALPHA

    @classmethod
    def from_config(cls, cfg) -> Acceptance:
        most = cfg.max_accept
        if cfg.accept_len is not None:
            return cls(cfg.seed, most, fixed=cfg.accept_len)
        if cfg.accept_mean is not None:
            return cls(cfg.seed, most, alpha=solve_alpha(cfg.accept_mean, most))
        return cls(cfg.seed, most)

    @property
    def mean(self) -> float:
        return float(self.fixed) if self.fixed is not None else truncated_geometric_mean(self.alpha, self.most)

    def draw(self, rid: int, position: int) -> int:
        """Accepted length of the verify whose first drafted token sits at ``position``."""
        if self.fixed is not None:
            return self.fixed
        if self.alpha <= 0.0:
            return 1
        if self.alpha >= 1.0:
            return self.most
        u = uniform01(self.seed, 0xACC, rid, position)
        # P(len >= k) = alpha^(k-1): inverse CDF of the geometric law, truncated.
        return min(self.most, 1 + int(math.log(u) / math.log(self.alpha)))
