"""decode_layers and greedy_head split their rows across threads (csrc/decode_layer.cpp,
row_cuts): the results, cache writes included, are bitwise those of one thread.

A cut inside a verify chain or a DFLASH block would let a row attend before a sibling
row on the other thread wrote its key: the chained and block forwards below would then
differ from one thread's (or vary between runs).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mini_engine.model import cpu_kernels
from mini_engine.model.attn_meta import decode_meta
from mini_engine.model.extend_fused import paged_rows_meta
from mini_engine.model.transformer import KVCache

from .conftest import tiny

PS = 4


@pytest.fixture(autouse=True)
def _restore_threads():
    if cpu_kernels.ops() is None:
        pytest.skip("the CPU kernels could not be built here (no compiler or ninja)")
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _slot_rows(kv: list[int], seed: int) -> list[np.ndarray]:
    """Slot rows of whole pages (PS consecutive slots) in a shuffled page order; page 0 unused."""
    rng = np.random.default_rng(seed)
    need = [-(-n // PS) for n in kv]
    pages = 1 + rng.permutation(sum(need) + 4)
    rows, at = [], 0
    for n, k in zip(kv, need):
        rows.append((pages[at : at + k, None] * PS + np.arange(PS)).reshape(-1)[:n])
        at += k
    return rows


def _forward(model, ids, meta, slots: int, threads: int):
    torch.set_num_threads(threads)
    cache = KVCache.allocate(model.cfg, slots, slots, "cpu")
    gen = torch.Generator().manual_seed(5)
    for t in cache.k + cache.v:
        t.copy_(torch.randn(t.shape, generator=gen))
    with torch.inference_mode():
        h = model(ids, meta.q_pos, meta, cache)
        tokens = model.greedy(h)
    return h, tokens, cache


def _same_at_one_and_two_threads(model, ids, meta, slots):
    one = _forward(model, ids, meta, slots, 1)
    for _ in range(3):  # a race would show in some runs, not all
        two = _forward(model, ids, meta, slots, 2)
        assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])
        for a, b in zip(one[2].k + one[2].v, two[2].k + two[2].v):
            assert torch.equal(a, b)


@pytest.mark.parametrize("batch", [32, 33, 50, 64])
def test_plain_decode_rows_split_as_one_thread_computes_them(batch):
    model = tiny("all-global", 8)
    lens = np.random.default_rng(batch).integers(1, 40, batch)
    rows = _slot_rows(lens.tolist(), batch)
    width = -(-int(lens.max()) // PS) * PS
    table = torch.zeros(batch, width, dtype=torch.int64)
    for b, r in enumerate(rows):
        table[b, : len(r)] = torch.from_numpy(r)
    meta = decode_meta(table, np.arange(batch), lens, PS, None)
    assert meta.row_seq is None  # plain decode: every row its own sequence
    ids = torch.arange(batch) * 7 % model.cfg.vocab_size
    _same_at_one_and_two_threads(model, ids, meta, int(table.max()) + PS)


@pytest.mark.parametrize("kind", ["chain", "block", "uneven"])
def test_chained_rows_are_never_cut_apart(kind):
    """Eleven sequences of 4 queries (44 rows: an even cut at row 22 falls inside the sixth
    sequence, and the cut at 24 leaves 20 rows), or 24 sequences of 1 to 7 queries; causal
    chains or non-causal blocks."""
    model = tiny("all-global", 8)
    rng = np.random.default_rng(11)
    q = [4] * 11 if kind != "uneven" else rng.integers(1, 8, 24).tolist()
    kv = (rng.integers(0, 30, len(q)) + q).tolist()
    rows = _slot_rows(kv, 4)
    masks = [np.ones((n, n), dtype=np.int8) for n in q] if kind == "block" else None
    meta = paged_rows_meta(rows, q, None, masks, PS, "cpu")
    assert meta is not None and meta.page_size == PS
    seq = meta.row_seq.numpy()
    assert np.array_equal(seq, np.repeat(np.arange(len(q)), q))
    ids = torch.arange(sum(q)) * 5 % model.cfg.vocab_size
    _same_at_one_and_two_threads(model, ids, meta, int(max(r.max() for r in rows)) + PS)
