"""K11 as a property: for random draft shapes, page sizes, policies, layer patterns,
drafter knobs, chunk sizes and workloads, greedy speculative decoding through the
engine returns exactly the tokens of plain greedy decoding (float64, see
test_k11_engine for why)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.model.backend import ModelBackend

from .conftest import LONG, requests

spec_st = st.one_of(
    st.builds(lambda k, s, extra: dict(spec="eagle", topk=k, steps=s, num_draft_tokens=min(s * k + 1, 2 + extra)),
              st.integers(1, 3), st.integers(1, 4), st.integers(0, 8)),
    st.builds(lambda bs, dw: dict(spec="dflash", block_size=bs, draft_window=dw),
              st.integers(1, 6), st.one_of(st.none(), st.integers(1, 24))),
)


@settings(max_examples=60 if LONG else 8, deadline=None)
@given(spec=spec_st, ps=st.sampled_from([1, 4, 16]), policy=st.sampled_from(["aligned", "unaligned"]),
       swa=st.sampled_from([None, ("1:1", 6), ("3:1", 17), ("all-local", 9)]),
       layers=st.integers(0, 4), noise=st.sampled_from([0.0, 0.1, 1.0]),
       chunk=st.sampled_from([7, 64]), seed=st.integers(0, 10_000))
def test_speculative_equals_plain(spec, ps, policy, swa, layers, noise, chunk, seed):
    opts = dict(model="tiny", page_size=ps, policy=policy, pool_tokens=4096, max_context=128,
                chunked_prefill=chunk, audit="record")
    if swa:
        opts.update(layer_pattern=swa[0], window=swa[1])
    runs = []
    for extra in ({}, spec):
        cfg = EngineConfig(**opts, **extra)
        backend = ModelBackend(cfg, dtype="float64", draft_layers=layers, draft_noise=noise)
        runs.append(Engine(cfg, backend=backend).run(requests(3, seed=seed, prompt=(1, 30), out=(1, 16))))
    plain, speculative = runs
    assert speculative.outputs == plain.outputs
    assert speculative.stats["finished_requests"] == 3
