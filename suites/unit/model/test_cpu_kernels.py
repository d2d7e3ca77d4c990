"""The compiled CPU decode kernels against the pure-torch decode path, and their fallback.

The kernels build on first use (g++ and ninja, about a minute once per machine);
where they cannot be built the comparisons skip and the fallback test still runs.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest
import torch

from mini_engine.model import cpu_kernels, decode_fused
from mini_engine.model.attention_torch import paged_attention, torch_decode
from mini_engine.model.attn_meta import decode_meta
from mini_engine.model.transformer import KVCache

from .conftest import tiny

PS = 4


def _kernels():
    if cpu_kernels.decode_attention() is None:
        pytest.skip("the CPU decode kernels could not be built here (no compiler or ninja)")


def _decode_case(seed: int, lens: list[int], heads: int, kv_heads: int, dim: int, dtype=torch.float32,
                 sliding: bool = False):
    """Random caches and a page-table decode meta over scattered pages; with `sliding`, the
    SWA page table maps some early pages to the dummy page 0, as eviction does."""
    rng = np.random.default_rng(seed)
    width = -(-max(lens) // PS) * PS
    pages = 1 + rng.permutation(len(lens) * width // PS + 8)  # page 0 is the dummy
    table = torch.zeros(len(lens), width, dtype=torch.int64)
    for b in range(len(lens)):
        own = pages[b * width // PS : (b + 1) * width // PS]
        table[b] = torch.from_numpy((own[:, None] * PS + np.arange(PS)).reshape(-1))
    slots = (int(pages.max()) + 1) * PS
    swa_map = None
    if sliding:  # an identity map with the first page of every sequence evicted
        swa_map = torch.arange(slots)
        swa_map[table[:, :PS].reshape(-1)] = 0
    meta = decode_meta(table, np.arange(len(lens)), np.array(lens), PS, swa_map)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(len(lens), heads, dim, generator=gen, dtype=dtype)
    k = torch.randn(slots, kv_heads, dim, generator=gen, dtype=dtype)
    v = torch.randn(slots, kv_heads, dim, generator=gen, dtype=dtype)
    return q, k, v, meta


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("heads, kv_heads, dim", [(4, 2, 32), (2, 1, 16), (8, 1, 64), (4, 4, 24)])
@pytest.mark.parametrize("window, sliding", [(0, False), (3, False), (6, True)])
def test_decode_attention_matches_the_torch_path(heads, kv_heads, dim, window, sliding, dtype):
    _kernels()
    q, k, v, meta = _decode_case(7, [1, 5, 13, 16, 30], heads, kv_heads, dim, dtype, sliding)
    pages = meta.swa_kv_slots if sliding else meta.kv_slots
    want = torch_decode(q, k, v, meta, pages, window, dim**-0.5)
    got = cpu_kernels.decode_attention()(q, k, v, pages, meta.kv_lens_device, PS, window, dim**-0.5)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    # paged_attention, the backend entry point, takes the kernel for a decode meta.
    torch.testing.assert_close(paged_attention(q, k, v, meta, pages, window, dim**-0.5), got, atol=0, rtol=0)


def _decode_forward(model, lens: list[int], fused: bool, monkeypatch) -> tuple[torch.Tensor, KVCache]:
    """Hidden states of one decode forward over a cache of random K/V (both pools)."""
    cfg = model.cfg
    _, _, _, meta = _decode_case(3, lens, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                                 sliding=cfg.has_sliding)
    slots = int(meta.kv_slots.max() + 1) * PS
    cache = KVCache.allocate(cfg, slots, slots, "cpu")
    gen = torch.Generator().manual_seed(5)
    for t in cache.k + cache.v:
        t.copy_(torch.randn(t.shape, generator=gen))
    ids = torch.arange(len(lens)) * 7 % cfg.vocab_size
    with monkeypatch.context() as m:
        if not fused:
            m.setattr(decode_fused, "ops", lambda: None)
        with torch.inference_mode():
            h = model(ids, meta.q_pos, meta, cache)
    return h, cache


@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize("pattern", ["all-global", "1:1"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_decode_layer_equals_the_python_layer(pattern, dtype, qk_norm, monkeypatch):
    """The compiled layer against layer_step with the same attention kernel: its own RMSNorm
    and SiLU loops round differently from torch's ops, nothing else does."""
    _kernels()
    model = tiny(pattern, window=6, dtype=dtype)  # a Qwen3 shape: per-head q/k norms
    model = type(model)(replace(model.cfg, qk_norm=qk_norm))
    if qk_norm:  # norm weights away from 1, so that they matter
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.q_norm.weight.uniform_(0.5, 1.5)
                layer.self_attn.k_norm.weight.uniform_(0.5, 1.5)
    lens = [1, 4, 9, 17, 22]
    want, want_cache = _decode_forward(model, lens, False, monkeypatch)
    got, got_cache = _decode_forward(model, lens, True, monkeypatch)
    tol = 2e-5 if dtype == "float32" else 1e-12
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    for a, b in zip(got_cache.k + got_cache.v, want_cache.k + want_cache.v):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)


def test_decode_layer_is_taken_only_for_a_decode_forward():
    _kernels()
    model = tiny()
    layers = model.model.layers
    x = torch.zeros(2, model.cfg.hidden_size)
    _, _, _, meta = _decode_case(0, [3, 5], 4, 2, 16)
    assert decode_fused.decode_layer_kernel(layers, meta, x, True) is not None
    assert decode_fused.decode_layer_kernel(layers, meta, x, False) is None  # the Triton backend
    meta.page_size = 0  # a flat (build_meta) forward: prefill, verify, drafters
    assert decode_fused.decode_layer_kernel(layers, meta, x, True) is None


def test_without_a_compiler_the_torch_path_runs(monkeypatch, caplog):
    """No ninja (or no compiler): one logged line, no failure, and decode attention is the torch path's."""
    monkeypatch.setattr(cpu_kernels, "_state", {})
    monkeypatch.setattr(cpu_kernels.shutil, "which", lambda tool: None)
    with caplog.at_level(logging.WARNING, logger=cpu_kernels.__name__):
        assert cpu_kernels.decode_attention() is None
        assert cpu_kernels.extend_attention() is None
    lines = [r.getMessage() for r in caplog.records if r.name == cpu_kernels.__name__]
    assert len(lines) == 1 and "not found" in lines[0] and "pure-torch" in lines[0]
    q, k, v, meta = _decode_case(1, [2, 9], 4, 2, 16)
    want = torch_decode(q, k, v, meta, meta.kv_slots, 0, 0.25)
    assert torch.equal(paged_attention(q, k, v, meta, meta.kv_slots, 0, 0.25), want)


@pytest.mark.parametrize("serial_builds", [True, False])
def test_a_compiler_without_openmp_builds_the_kernels_serial(monkeypatch, caplog, serial_builds):
    """-fopenmp refused (Apple's clang): one more build without it, said in one line; when that
    fails too, the torch path, said in one line."""
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpu_kernels.shutil, "which", lambda tool: "/bin/" + tool)
    builds = []

    def load(name, sources, extra_cflags, extra_ldflags, **kw):
        builds.append((name, "-fopenmp" in extra_cflags + extra_ldflags))
        if "-fopenmp" in extra_cflags or not serial_builds:
            raise RuntimeError("Error building extension 'x': [1/3] c++ ... unsupported option '-fopenmp'")

    monkeypatch.setattr(cpp_extension, "load", load)
    with caplog.at_level(logging.WARNING, logger=cpu_kernels.__name__):
        assert cpu_kernels._load() is serial_builds
    assert [omp for _, omp in builds] == [True, False] and builds[0][0] != builds[1][0]  # two cache names
    lines = [r.getMessage() for r in caplog.records if r.name == cpu_kernels.__name__]
    want = "without OpenMP" if serial_builds else "pure-torch"
    assert len(lines) == 1 and want in lines[0]


def test_the_switch_turns_the_kernels_off(monkeypatch):
    monkeypatch.setattr(cpu_kernels, "_state", {})
    monkeypatch.setenv("KVBENCH_CPU_KERNELS", "0")
    assert cpu_kernels.decode_attention() is None


def test_in_out_copies_follow_a_weight_write():
    """A checkpoint load writes through the parameters after the copies were made: they follow."""
    layer = tiny().model.layers[0]
    first = decode_fused.in_out_weights(layer, True)
    assert torch.equal(first[0], layer.self_attn.qkv_weight.t())
    assert decode_fused.in_out_weights(layer, True)[0] is first[0]  # kept between steps
    with torch.no_grad():
        layer.self_attn.q_proj.weight.fill_(0.5)
    again = decode_fused.in_out_weights(layer, True)
    assert torch.equal(again[0], layer.self_attn.qkv_weight.t())
    assert decode_fused.in_out_weights(layer, False)[0].data_ptr() == layer.self_attn.qkv_weight.data_ptr()


@pytest.mark.parametrize("rows", [1, 5, 40])
def test_greedy_head_equals_the_logits_argmax(rows):
    _kernels()
    model = tiny()
    h = torch.randn(rows, model.cfg.hidden_size, generator=torch.Generator().manual_seed(rows))
    with torch.inference_mode():
        assert torch.equal(model.greedy(h), model.logits(h).argmax(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_norm_and_silu_loops_match_torch(dtype):
    """The compiled RMSNorm and silu(gate) * up against torch's ops, extreme gates included."""
    _kernels()
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(37, 96, generator=gen, dtype=dtype) * 3
    w = torch.rand(96, generator=gen, dtype=dtype) + 0.5
    tol = 2e-6 if dtype == torch.float32 else 1e-12
    got = cpu_kernels.ops().rms_norm(x, w, 1e-6)
    torch.testing.assert_close(got, torch.nn.functional.rms_norm(x, (96,), w, 1e-6), atol=tol, rtol=tol)
    gate_up = torch.randn(37, 2 * 64, generator=gen, dtype=dtype) * 4
    gate_up[0, :6] = torch.tensor([-200.0, -90.0, -31.0, 0.0, 90.0, 200.0], dtype=dtype)
    gate, up = gate_up.chunk(2, dim=-1)
    torch.testing.assert_close(cpu_kernels.ops().silu_mul(gate_up), torch.nn.functional.silu(gate) * up,
                               atol=tol * 10, rtol=tol)


def test_two_checkouts_of_the_same_kernels_build_apart(tmp_path, monkeypatch):
    # torch's build file names the sources by path: two checkouts sharing one cached build
    # took turns rebuilding it, inside the configs the sweep had built the kernels for.
    import shutil

    here = cpu_kernels._build_name(cpu_kernels.FLAGS)
    assert cpu_kernels._build_name(cpu_kernels.FLAGS) == here  # stable for one checkout
    other = tmp_path / "csrc"
    shutil.copytree(cpu_kernels.CSRC, other)
    monkeypatch.setattr(cpu_kernels, "CSRC", other)
    monkeypatch.setattr(cpu_kernels, "SOURCES", [other / s.name for s in cpu_kernels.SOURCES])
    assert cpu_kernels._build_name(cpu_kernels.FLAGS) != here
