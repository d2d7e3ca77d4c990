"""What a config is expected to cost in seconds, from its options alone.

`kvbench sweep --shard` balances shards by the last night's measured durations
(harness.grid.shards); this model fills in where there is no night yet (a first
night, a new config). Its unit matters only relative to itself and to those
durations: a config's runs (one warm-up and ``repeat`` measured ones) times a fixed
start-up cost plus a cost per token of work (requests x turns x (prompt + output)),
scaled by the decoding algorithm, a sliding window and the real model.

The constants are fitted (medians of seconds over token work) to the per-config
durations of a CPU sweep of the invariants suite on the accounting-only backend
(`kvbench sweep invariants --no-mlflow`, each row's finished_at - started_at):
per-token costs differ by algorithm (plain decoding takes a step per token, EAGLE
and DFLASH several), a window adds SWA eviction and a second pool, the tiny
transformer a forward per step.
"""

from __future__ import annotations

from typing import Any

from harness.core.options import resolved_defaults

START_S = 0.01  # a run's fixed cost: engine and workload built, pools sized
# Seconds per token of work, by algorithm (medians per run over the uniform configs without
# a window: plain decoding 0.43 s, EAGLE 0.28 s, DFLASH 0.22 s at 1920 tokens of work).
PER_TOKEN_S = {"none": 2.2e-4, "eagle": 1.45e-4, "dflash": 1.05e-4}
OTHER_ALGO_S = max(PER_TOKEN_S.values())  # an algorithm the model does not know (a plugin): the dearest known
WINDOW_FACTOR = 1.8  # sliding-window attention: SWA eviction and its own pool (1.65-2.0 by algorithm)
MODEL_FACTOR = 50.0  # the tiny transformer: ~1 s a run at 160 tokens, a forward per step on top of the accounting


def model_seconds(config: dict[str, Any], repeat: int, defaults: dict[str, Any] | None = None) -> float:
    """The modelled seconds of one config of a suite with ``repeat`` measured runs."""
    full = {**(defaults if defaults is not None else resolved_defaults()), **config}
    tokens = _int(full, "num_requests") * max(1, _int(full, "turns")) * (_int(full, "input_len") + _int(full, "output_len"))
    per_token = PER_TOKEN_S.get(str(full.get("spec")), OTHER_ALGO_S)
    if full.get("window") not in (None, "none"):
        per_token *= WINDOW_FACTOR
    if full.get("model") not in (None, "none"):
        per_token *= MODEL_FACTOR
    return (1 + max(1, repeat)) * (START_S + tokens * per_token)


def _int(full: dict[str, Any], name: str) -> int:
    value = full.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1
