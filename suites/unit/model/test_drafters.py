"""Drafters: the agreement knob spans low to high acceptance; DFLASH honours draft_window;
the model backend stays lossless with PD arrivals and within the reservation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.model.backend import ModelBackend
from mini_engine.model.draft import DraftModel
from mini_engine.model.draft_io import DraftJob
from mini_engine.spec.dflash import DFlashDrafter
from mini_engine.spec.eagle import EagleDrafter

from .conftest import requests, tiny

BASE = dict(model="tiny", pool_tokens=2048, max_context=256, page_size=16)


def tau(spec: dict, layers: int, noise: float, **extra) -> float:
    cfg = EngineConfig(**BASE, **spec, **extra)
    res = Engine(cfg, backend=ModelBackend(cfg, dtype="float64", draft_layers=layers, draft_noise=noise)).run(
        requests(3, seed=5))
    assert res.verdict == "ok"
    return res.stats["tau"]


def test_eagle_chain_agreement_spans_low_to_high():
    spec = dict(spec="eagle", topk=1, steps=3)
    assert tau(spec, 4, 0.0) == 4.0  # the drafter recomputes the target: every draft accepted
    mid = tau(spec, 4, 0.1)
    low = tau(spec, 0, 1.0)
    assert low < 1.5 < mid < 4.0


def test_dflash_agreement_knob():
    spec = dict(spec="dflash", block_size=4)
    assert tau(spec, 0, 1.0) < tau(spec, 4, 0.0)


def test_bad_knobs_are_config_errors():
    from mini_engine.errors import ConfigError

    cfg = EngineConfig(**BASE, spec="eagle")
    with pytest.raises(ConfigError, match="draft_layers must be in 0..4"):
        ModelBackend(cfg, draft_layers=9)
    with pytest.raises(ConfigError, match="draft_noise must be a number >= 0"):
        ModelBackend(cfg, draft_noise=-1.0)


def _dflash_setup(dw, bs=4, root=40):
    target = tiny("all-global", 8, dtype="float64")
    model = DraftModel(target, 4, 0.1, seed=1)
    cache = model.new_cache(128)
    drafter = DFlashDrafter(model, cache, bs, dw, 0.0, __import__("mini_engine.model.attention_torch",
                                                                  fromlist=["x"]).paged_attention)
    slots = np.arange(1, 1 + root + bs, dtype=np.int64)
    toks = (np.arange(root + 1) * 37 % 1024).tolist()
    feats = torch.randn(root + 1, target.cfg.hidden_size, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    feats[0] = 0
    return drafter, cache, slots, toks, feats, root


def test_dflash_reads_no_context_beyond_draft_window():
    dw = 6
    drafter, cache, slots, toks, feats, root = _dflash_setup(dw)
    first = drafter.draft([DraftJob(0, toks, feats, slots)])[0]
    again = lambda: drafter.draft([DraftJob(root, toks[-1:], feats[-1:], slots)])[0]  # noqa: E731
    assert again().tokens == first.tokens
    # Positions <= root - draft_window are outside every block query's window.
    for layer_k, layer_v in zip(cache.k, cache.v):
        layer_k[torch.from_numpy(slots[: root - dw + 1])] = 1e3
        layer_v[torch.from_numpy(slots[: root - dw + 1])] = -1e3
    assert again().tokens == first.tokens
    # ... while the positions inside the window do matter.
    for layer_k in cache.k:
        layer_k[torch.from_numpy(slots[root - dw + 1 : root])] = 1e3
    assert again().tokens != first.tokens


def test_dflash_block_is_not_causal():
    """Every block token sees the whole block: the root's draft distribution depends on the
    mask tokens after it (under a causal block it would not change with block_size)."""
    from mini_engine.model.attention_torch import paged_attention

    target = tiny("all-global", 8, dtype="float64")
    model = DraftModel(target, 2, 0.1, seed=1)
    root = 12
    toks = list(range(5, 5 + root + 1))
    feats = torch.randn(root + 1, target.cfg.hidden_size, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    first = {}
    for bs in (3, 3, 5):
        drafter = DFlashDrafter(model, model.new_cache(64), bs, None, 1.0, paged_attention, torch.Generator())
        first.setdefault(bs, []).append(drafter.draft([DraftJob(0, toks, feats, np.arange(1, root + 1 + bs))])[0].q[0])
    torch.testing.assert_close(first[3][0], first[3][1], rtol=0, atol=0)
    assert not torch.allclose(first[3][0], first[5][0])


def test_eagle_tree_nodes_see_only_their_ancestors():
    """With every target layer shared and no noise the drafter is the target, so the draft
    distribution at each tree node equals the target's after that node's own branch; a node
    that attended to a sibling's or a cousin's KV would differ."""
    from mini_engine.model.attention_torch import paged_attention

    target = tiny("all-global", 8, dtype="float64")
    model = DraftModel(target, 4, 0.0, seed=1)
    topk, steps = 3, 3
    # temperature > 0 keeps each node's draft distribution (q); top-k trees pick the same way.
    drafter = EagleDrafter(model, model.new_cache(128), topk=topk, steps=steps, num_draft_tokens=1 + topk * steps,
                           temperature=1.0, attend=paged_attention, gen=torch.Generator())
    root = 10
    toks = [(37 * i + 3) % 1024 for i in range(root + 1)]
    feats = torch.zeros(root + 1, target.cfg.hidden_size, dtype=torch.float64)
    tree = drafter.draft([DraftJob(0, toks, feats, np.arange(1, root + 2 + (steps - 1) * topk))])[0]
    assert len(tree.tokens) == 1 + topk * steps and max(tree.depths) == steps
    for n in range(len(tree.tokens)):
        if tree.depths[n] == steps:
            continue  # leaves are never forwarded
        branch, a = [], n
        while a > 0:
            branch.insert(0, tree.tokens[a])
            a = tree.parents[a]
        logits = target.logits(target.dense_forward(torch.tensor(toks + branch))[-1:])[0]
        torch.testing.assert_close(tree.q[n], torch.softmax(logits, -1), rtol=1e-9, atol=1e-12)


def test_eagle_tree_stays_inside_the_reservation():
    target = tiny("all-global", 8, dtype="float64")
    model = DraftModel(target, 2, 0.1, seed=1)
    from mini_engine.model.attention_torch import paged_attention

    drafter = EagleDrafter(model, model.new_cache(128), topk=3, steps=3, num_draft_tokens=7,
                           temperature=0.0, attend=paged_attention)
    root = 10
    toks = list(range(3, 3 + root + 1))
    feats = torch.zeros(root + 1, target.cfg.hidden_size, dtype=torch.float64)
    # (steps - 1) * topk draft rows beyond the root are needed, one fewer is refused.
    ok = np.arange(1, root + 1 + 2 * 3 + 1)
    tree = drafter.draft([DraftJob(0, toks, feats, ok)])[0]
    assert len(tree.tokens) == 7 and max(tree.depths) <= 3
    assert all(p < i for i, p in enumerate(tree.parents) if i)
    with pytest.raises(RuntimeError, match="reservation ends"):
        drafter.draft([DraftJob(0, toks, feats, ok[:-1])])


@pytest.mark.parametrize("spec", [dict(), dict(spec="eagle", topk=2, steps=2, num_draft_tokens=4),
                                  dict(spec="dflash", block_size=3)])
def test_pd_arrivals_decode_like_local_prefill(spec):
    """The decode side receives the prompt's KV (SWA tail only) and continues identically."""
    opts = dict(BASE, window=10, layer_pattern="1:1", audit="raise", **spec)
    outs = []
    for fill in (False, True):
        cfg = EngineConfig(**opts)
        res = Engine(cfg, backend=ModelBackend(cfg, dtype="float64")).run(requests(3, seed=9, fill=fill))
        assert res.verdict == "ok"
        outs.append(res.outputs)
        if fill:
            assert res.stats["pd_arrivals"] == 3 and res.stats["prefill_tokens"] == 0
    assert outs[0] == outs[1]


def test_sampling_runs_are_seeded_and_vary_with_the_seed():
    def run(seed, spec):
        cfg = EngineConfig(**BASE, temperature=0.8, seed=seed, **spec)
        return Engine(cfg, backend=ModelBackend(cfg)).run(requests(2, seed=1)).outputs
    for spec in (dict(spec="eagle"), dict(spec="dflash", block_size=3)):
        assert run(1, spec) == run(1, spec)
        assert run(1, spec) != run(2, spec)


def test_prefill_reads_the_lm_head_once_per_batch(monkeypatch):
    """Requests finishing their prompt in one forward share one LM head pass (on a GPU each
    pass converts the whole head to float32)."""
    cfg = EngineConfig(**BASE, audit="raise")
    backend = ModelBackend(cfg, dtype="float64")
    calls = []
    real = backend.model.greedy  # greedy decoding: the head and its argmax, one pass
    monkeypatch.setattr(backend.model, "greedy", lambda h: calls.append(h.shape[0]) or real(h))
    Engine(cfg, backend=backend).run(requests(3, seed=5, out=(1, 2)))
    assert calls == [3]


def test_forwards_write_only_from_the_committed_position():
    """The backend refuses a forward that would rewrite final KV or leave a gap."""
    cfg = EngineConfig(**BASE, spec="eagle", audit="raise")
    engine = Engine(cfg, backend=ModelBackend(cfg, dtype="float64"))
    engine.submit(requests(1, seed=3, out=(8, 9)))
    while not engine.sched.running or engine.sched.running[0].prefilling or not engine.sched.running[0].outputs:
        engine.tick()
    r = engine.sched.running[0]
    committed = r.kv.committed
    batches = engine.batches
    for call in (lambda: engine.backend.forward(batches.prefill([r], [0], [committed])),
                 lambda: engine.backend.forward(batches.verify([r]))):
        r.kv.committed -= 1
        with pytest.raises(RuntimeError, match=f"KV is final up to {committed - 1}"):
            call()
        r.kv.committed += 1
    assert engine.run().verdict == "ok"
