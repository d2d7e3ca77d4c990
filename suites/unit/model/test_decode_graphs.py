"""The CUDA-graph decode path's static buffers, checked on a CPU.

Off a GPU the graph path runs eagerly over the same static buffers (bucketed batch,
padding rows into the dummy slot, flattened slot rows), through the Triton kernel
under the interpreter; its tokens must equal the plain torch backend's.
"""

from __future__ import annotations

import pytest
import torch

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.model.backend import ModelBackend

from .conftest import requests


# The CPU path drives the Triton kernel with CPU tensors, which only the interpreter takes;
# with a GPU visible (no interpreter) suites/gpu captures real graphs instead.
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path of the graph buffers")


@cpu_only
def test_graph_buffers_decode_like_eager():
    cfg = EngineConfig(model="tiny", page_size=4, pool_tokens=512, max_context=64, max_running=4,
                       window=6, layer_pattern="1:1", audit="raise")
    reqs = lambda: requests(3, seed=2, prompt=(3, 9), out=(2, 5))  # noqa: E731
    eager = Engine(cfg, backend=ModelBackend(cfg, dtype="float64")).run(reqs())
    graphed = ModelBackend(cfg, dtype="float64", attention="triton", cuda_graphs=True)
    res = Engine(cfg, backend=graphed).run(reqs())
    assert graphed.graphs is not None and not graphed.graphs.capture
    assert res.outputs == eager.outputs


def test_backend_serves_several_runs():
    """A backend attached again to a new run of the same shape keeps its caches and stays exact."""
    cfg = EngineConfig(model="tiny", page_size=16, pool_tokens=1024, max_context=128, spec="eagle", audit="raise")
    backend = ModelBackend(cfg, dtype="float64")
    first = Engine(cfg, backend=backend).run(requests(3, seed=4))
    cache = backend.cache
    second = Engine(cfg, backend=backend).run(requests(3, seed=4))
    assert backend.cache is cache and second.outputs == first.outputs


@cpu_only
def test_a_batch_between_buckets_uses_the_next_bucket(monkeypatch):
    """max_running=3: three requests decode in the bucket of 4 (padded), not eagerly."""
    from mini_engine.model.cuda_graph import DecodeGraphs

    cfg = EngineConfig(model="tiny", page_size=4, pool_tokens=512, max_context=64, max_running=3, audit="raise")
    buckets = []
    real = DecodeGraphs._run
    monkeypatch.setattr(DecodeGraphs, "_run", lambda self, b: buckets.append(b) or real(self, b))
    reqs = lambda: requests(3, seed=2, prompt=(3, 9), out=(3, 5))  # noqa: E731
    graphed = ModelBackend(cfg, dtype="float64", attention="triton", cuda_graphs=True)
    res = Engine(cfg, backend=graphed).run(reqs())
    assert 4 in buckets
    # What a capture replays first: a bucket of padding rows alone (dummy slot 0 only).
    graphed.graphs._fill_padding(4)
    assert graphed.graphs._run(4).shape == (4,)
    assert res.outputs == Engine(cfg, backend=ModelBackend(cfg, dtype="float64")).run(reqs()).outputs
