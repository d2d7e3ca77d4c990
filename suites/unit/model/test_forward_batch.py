"""The model backend reads the step batch alone: its forward path never touches the
memory layer's objects (the manager, its req_to_token table, its SWA pool).

Each run goes through the engine; while a forward runs, any attribute read on one of
those objects raises. Plain decode (through the device mirror), EAGLE tree verify
(whose accepted branches move KV, SWA copies included), DFLASH and PD transfers are
covered, with sliding-window layers, and their outputs equal an unguarded run's.
"""

from __future__ import annotations

import pytest
import torch

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.memory.manager import KVManager
from mini_engine.memory.pool.req_to_token import ReqToTokenPool
from mini_engine.memory.pool.swa import SWAPool
from mini_engine.model.backend import ModelBackend
from mini_engine.forward.step_batch import Layout, Phase

from .conftest import requests

GUARDED = (KVManager, ReqToTokenPool, SWAPool)
BASE = dict(model="tiny", page_size=4, pool_tokens=2048, max_context=128, window=8, layer_pattern="1:1",
            audit="raise")
RUNS = {
    "plain": dict(),
    "eagle-tree": dict(spec="eagle", topk=3, steps=3, num_draft_tokens=6),
    "dflash": dict(spec="dflash", block_size=4),
}


class Guarded(ModelBackend):
    """A model backend during whose forward the memory layer's objects cannot be read."""

    def __init__(self, cfg, monkeypatch, **opts):
        super().__init__(cfg, dtype="float64", **opts)
        self.inside = False
        self.phases: set[Phase] = set()
        for cls in GUARDED:
            monkeypatch.setattr(cls, "__getattribute__", self._guard(cls))

    def _guard(self, cls):
        def get(obj, name):
            if self.inside:
                raise AssertionError(f"the forward read {cls.__name__}.{name}")
            return object.__getattribute__(obj, name)
        return get

    def forward(self, batch):
        self.phases.add(batch.phase)
        self.inside = True
        try:
            return super().forward(batch)
        finally:
            self.inside = False


def workload():
    reqs = requests(4, seed=3, prompt=(6, 30), out=(6, 12))
    reqs[1].fill_len = len(reqs[1].prompt)  # a PD arrival: its KV comes by transfer
    return reqs


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_forward_path_never_touches_the_memory_layer(name, monkeypatch):
    cfg = EngineConfig(**BASE, **RUNS[name])
    want = Engine(cfg, backend=ModelBackend(cfg, dtype="float64")).run(workload())
    backend = Guarded(cfg, monkeypatch)
    got = Engine(cfg, backend=backend).run(workload())
    assert got.verdict == "ok" and got.error is None
    assert got.outputs == want.outputs
    step = Phase.DECODE if name == "plain" else Phase.VERIFY
    assert backend.phases == {Phase.PREFILL, Phase.TRANSFER, step}
    assert not hasattr(backend, "manager")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path of the graph buffers (suites/gpu captures)")
def test_graph_decode_reads_the_mirror_not_the_manager(monkeypatch):
    """The CUDA-graph runner fills its buffers from the device mirror: its decode batches
    carry no host slots, and its tokens equal eager decode's (off a GPU the same static
    buffers run eagerly through the Triton interpreter)."""
    cfg = EngineConfig(**{**BASE, "max_running": 3})
    # Shorter outputs than workload()'s: every step runs the Triton interpreter off a GPU
    # (seconds each), and a few decode steps per request show where the slots come from.
    def reqs():
        rs = workload()
        for r in rs:
            r.max_new_tokens = min(r.max_new_tokens, 4)
        return rs

    want = Engine(cfg, backend=ModelBackend(cfg, dtype="float64")).run(reqs())
    from mini_engine.model.cuda_graph import DecodeGraphs

    seen = []
    real = DecodeGraphs.decode
    monkeypatch.setattr(DecodeGraphs, "decode", lambda self, b, mirror: seen.append(b.slots) or real(self, b, mirror))
    backend = Guarded(cfg, monkeypatch, attention="triton", cuda_graphs=True)
    got = Engine(cfg, backend=backend).run(reqs())
    assert backend.graphs is not None
    assert got.verdict == "ok" and got.outputs == want.outputs
    assert seen and all(x is None for x in seen)


def test_the_guard_catches_a_read():
    """The guard is real: a read of the manager inside a forward fails the run."""
    cfg = EngineConfig(**BASE)

    class Leaky(Guarded):
        def forward(self, batch):
            self.inside = True
            try:
                return self._manager.mem
            finally:
                self.inside = False

    with pytest.MonkeyPatch.context() as mp:
        backend = Leaky(cfg, mp)
        engine = Engine(cfg, backend=backend)
        backend._manager = engine.manager
        with pytest.raises(AssertionError, match="the forward read KVManager.mem"):
            backend.forward(engine.batches.decode([]))


def test_setup_takes_the_pool_sizes_once():
    cfg = EngineConfig(**BASE)
    backend = ModelBackend(cfg, dtype="float64")
    engine = Engine(cfg, backend=backend)
    lay = Layout.of(engine.mem)
    assert backend.layout == lay
    assert backend.cache.k[0].shape[0] in (lay.full_slots, lay.swa_slots)
    assert backend.reads == {Phase.PREFILL, Phase.VERIFY, Phase.TRANSFER}  # eager decode reads the mirror
    assert backend.mirror is not None and engine.manager.req_to_token.changes.following


def test_sliding_layers_without_an_swa_pool_are_refused():
    from mini_engine.errors import ConfigError

    cfg = EngineConfig(**BASE)  # sliding layers (1:1)
    backend = ModelBackend(cfg, dtype="float64")
    with pytest.raises(ConfigError, match="no SWA pool"):
        backend.setup(Layout(4, 512, 0, cfg.max_context, cfg.max_running))
