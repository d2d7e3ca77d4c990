"""The lengths of a synthetic workload's requests: n (prompt, output) pairs of its shape
(fixed, uniform, lognormal; pd draws as uniform).

Its own module, below both the first turn's draw (``harness.core.workloads``) and the
later turns' (``harness.core.turns``), which each draw from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


def draw_lengths(wl: Any, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n (own prompt length, output length) pairs of the workload's shape."""
    import numpy as np  # numpy: the CLI parser imports the workload schema, and a bare install has none

    if wl.workload == "fixed":
        ins = np.full(n, wl.input_len)
        outs = np.full(n, wl.output_len)
    elif wl.workload == "lognormal":
        ins = _lognormal(rng, wl.input_len, wl.sigma, n)
        outs = _lognormal(rng, wl.output_len, wl.sigma, n)
    else:  # uniform and pd
        ins = rng.integers(min(wl.min_len, wl.input_len), wl.input_len, n, endpoint=True)
        outs = rng.integers(min(wl.min_len, wl.output_len), wl.output_len, n, endpoint=True)
    return ins, outs


def _lognormal(rng: np.random.Generator, median: int, sigma: float, n: int) -> np.ndarray:
    import numpy as np  # numpy: the CLI parser imports the workload schema, and a bare install has none

    x = rng.lognormal(np.log(median), sigma, n)
    return np.clip(np.rint(x), 1, 8 * median).astype(np.int64)
