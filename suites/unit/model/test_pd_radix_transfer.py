"""A PD arrival that hits the decode side's radix tree receives only the KV past the hit
(step_batch.transfer starts at the hit, ModelBackend._transfer writes from there): the
hit's KV is the tree's, written by the request that put it there. Greedy outputs must be
those of the same arrivals with the tree off, where every arrival receives its whole prompt.
"""

from __future__ import annotations

import numpy as np
import pytest

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.model.backend import ModelBackend
from mini_engine.request import Request


def arrivals() -> list[Request]:
    """Four PD arrivals sharing a 40-token prompt, each after the one before finished."""
    rng = np.random.default_rng(3)
    shared = rng.integers(0, 1024, 40).tolist()
    return [Request(rid=i, prompt=(p := shared + rng.integers(0, 1024, 6 + 5 * i).tolist()), max_new_tokens=6,
                    fill_len=len(p), arrival_step=12 * i) for i in range(4)]


@pytest.mark.parametrize("ps", [1, 16])
@pytest.mark.parametrize("spec", [{}, {"spec": "eagle", "topk": 1, "steps": 3}])
def test_outputs_with_decode_radix_hits_equal_those_without(ps, spec):
    outputs, hits = {}, {}
    for radix in (False, True):
        cfg = EngineConfig(model="tiny", page_size=ps, pool_tokens=2048, max_context=128, pd_radix=radix,
                           reserved_decode_tokens=0, audit="raise", **spec)
        engine = Engine(cfg, backend=ModelBackend(cfg, dtype="float64"))
        res = engine.run(arrivals())
        assert res.verdict == "ok", res.error
        outputs[radix], hits[radix] = res.outputs, res.stats["prefix_hit_tokens"]
    # Arrivals 1-3 hit the shared prompt, page-floored (EAGLE keys bigrams: one token shorter).
    bigram = 1 if spec else 0
    assert hits[False] == 0 and hits[True] >= 3 * ((40 - bigram) // ps * ps)
    assert outputs[True] == outputs[False]
