"""Performance figures of the GPU check: decode throughput against the HBM roofline, and
the Triton paged-decode kernel's bandwidth against torch SDPA over gathered pages.

Decode is memory-bound: each target step reads every weight once and the KV of every
running request's context once. The roofline fraction of a run is

    (weight_bytes + sum over decode steps of context_tokens * kv_bytes_per_token)
    / (decode time * peak HBM bandwidth)

counting the target's reads only, so a drafter's extra reads show as a lower fraction.
Figures are measured and logged, never gated.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, decode_reserve
from mini_engine.model.attn_meta import build_meta
from mini_engine.model.backend import ModelBackend
from mini_engine.config.shapes import named_shape
from mini_engine.model.config import torch_dtype
from mini_engine.config.pools import footprint
from mini_engine.request import Request
from mini_engine.forward.step_batch import Phase

# Peak memory bandwidth (bytes/s) of known GPUs, matched in order against the device name
# (torch's or NVML's, e.g. "NVIDIA H100 80GB HBM3"): vendor datasheet figures.
PEAK_BANDWIDTH = (
    ("H200", 4.8e12),  # H200 SXM and NVL, HBM3e
    ("H100 NVL", 3.9e12),
    ("H100 PCIe", 2.0e12),
    ("H100", 3.35e12),  # H100 SXM, HBM3
    ("A100-SXM4-80GB", 2.039e12),
    ("A100 80GB PCIe", 1.935e12),
    ("A100", 1.555e12),  # the 40 GB parts
    ("B200", 8.0e12),
    ("RTX 5090", 1.792e12),
    ("RTX 4090", 1.008e12),
    ("L40S", 0.864e12),
)


def peak_bandwidth(name: str | None) -> float | None:
    """Datasheet peak bandwidth of a device name; None when the device is not in the table."""
    if not name:
        return None
    for needle, bw in PEAK_BANDWIDTH:
        if needle.lower() in name.lower():
            return bw
    return None


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# -- decode throughput ---------------------------------------------------------------

ALGOS = {
    "plain": {},
    "eagle-chain": dict(spec="eagle", topk=1, steps=3),
    "eagle-tree": dict(spec="eagle", topk=4, steps=3, num_draft_tokens=8),
    "dflash": dict(spec="dflash", block_size=8),
}


@dataclass(frozen=True)
class Workload:
    shape: str  # a named model shape (random weights)
    batch: int
    prompt_len: int
    output_len: int
    device: str


def _requests(w: Workload, vocab: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [Request(rid=i, prompt=rng.integers(0, vocab, w.prompt_len).tolist(), max_new_tokens=w.output_len)
            for i in range(w.batch)]


def decode_throughput(w: Workload, algo: str, peak_bw: float | None) -> dict:
    """One measured run of `w` under `algo` after a warm-up run of the same batch (Triton
    compiles, CUDA graphs are captured): decode steps are timed one by one, synchronised."""

    opts = ALGOS[algo]
    probe = EngineConfig(model=w.shape, device=w.device, **opts)
    per_req = w.prompt_len + w.output_len + 2 * decode_reserve(probe) + 32
    cfg = EngineConfig(model=w.shape, device=w.device, page_size=16, pool_tokens=w.batch * per_req + 1024,
                       max_context=per_req, max_running=w.batch, **opts)
    backend = ModelBackend(cfg)
    vocab = backend.mcfg.vocab_size
    warm = Workload(w.shape, w.batch, w.prompt_len, min(4, w.output_len), w.device)
    Engine(cfg, backend=backend).run(_requests(warm, vocab, seed=1))
    engine = Engine(cfg, backend=backend)
    times, contexts, tokens = [], [], []
    step = engine.step
    forward, read = backend.forward, []

    def counted_forward(batch):
        # The context a decode/verify forward reads: each request's final KV plus the token
        # at its root. Read from the batch, not the requests: under overlap a request's
        # outputs land a step after its forward.
        if batch.phase in (Phase.DECODE, Phase.VERIFY):
            read.append(int(batch.committed.sum()) + len(batch))
        return forward(batch)

    backend.forward = counted_forward

    def timed_step():
        s = engine.stats
        before = (s.decode_steps, s.prefill_steps, s.output_tokens)
        read.clear()
        sync(w.device)
        t0 = time.perf_counter()
        out = step()
        sync(w.device)
        dt = time.perf_counter() - t0
        if s.decode_steps > before[0] and s.prefill_steps == before[1]:  # a pure decode step
            times.append(dt)
            contexts.append(sum(read))
            tokens.append(s.output_tokens - before[2])
        return out

    engine.step = timed_step  # Engine.tick calls self.step: every step of run() is timed
    res = engine.run(_requests(w, vocab))
    fp = footprint(cfg)
    decode_s = float(sum(times))
    out = {"shape": w.shape, "algo": algo, "batch": w.batch, "prompt_len": w.prompt_len,
           "output_len": w.output_len, "dtype": backend.mcfg.dtype, "verdict": res.verdict,
           "tau": res.stats["tau"] if algo != "plain" else 1.0, "decode_steps": len(times),
           "decode_s": decode_s, "step_ms": 1e3 * decode_s / len(times) if times else None,
           "decode_tokens_per_s": sum(tokens) / decode_s if decode_s else None}
    read = len(times) * fp.weight_bytes + sum(contexts) * fp.kv_bytes_per_token
    out["bytes_read_per_step"] = read / len(times) if times else None
    out["achieved_bytes_per_s"] = read / decode_s if decode_s else None
    out["roofline_fraction"] = read / decode_s / peak_bw if decode_s and peak_bw else None
    return out


# -- the paged-decode kernel ----------------------------------------------------------

def _decode_batch(batch: int, ctx: int, page: int, slots: int, device: str, seed: int):
    """A decode batch over random pages of a pool: each sequence's row is its pages' slots."""

    rng = np.random.default_rng(seed)
    pages = rng.permutation(np.arange(1, slots // page))
    need = -(-ctx // page)
    rows = [(pages[b * need:(b + 1) * need, None] * page + np.arange(page)).reshape(-1)[:ctx] for b in range(batch)]
    return build_meta(rows, [1] * batch, None, device), rows


def sdpa_gathered(q, k_cache, v_cache, rows: torch.Tensor, lens: torch.Tensor, scale: float) -> torch.Tensor:
    """torch's way: gather each sequence's pages into a padded [B, KVH, L, D] and run SDPA."""
    B, L = rows.shape
    H, KVH = q.shape[1], k_cache.shape[1]
    k = k_cache[rows].transpose(1, 2)  # [B, KVH, L, D]
    v = v_cache[rows].transpose(1, 2)
    mask = (torch.arange(L, device=q.device)[None, :] < lens[:, None])[:, None, None, :]
    qh = q.view(B, H, 1, -1)
    try:
        o = torch.nn.functional.scaled_dot_product_attention(qh, k, v, attn_mask=mask, scale=scale,
                                                              enable_gqa=H != KVH)
    except TypeError:  # torch < 2.5 has no enable_gqa: expand the KV heads
        g = H // KVH
        o = torch.nn.functional.scaled_dot_product_attention(
            qh, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), attn_mask=mask, scale=scale)
    return o.view(B, H, -1)


def _time(fn, device: str, iters: int) -> float:
    fn()  # compile / warm the caches
    sync(device)
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def kernel_bandwidth(shape: str, batch: int, ctx: int, device: str, peak_bw: float | None, iters: int) -> dict:
    """The Triton paged-decode kernel and SDPA over gathered pages on one layer's decode of a
    shape: time per call and K+V bytes read per second (the traffic decode cannot avoid)."""
    # triton: optional, loaded only on this path
    from mini_engine.model.attention_triton import triton_paged_attention

    mcfg = named_shape(shape)
    dtype = torch_dtype(mcfg) if device == "cuda" else torch.float32
    H, KVH, D, page = mcfg.num_heads, mcfg.num_kv_heads, mcfg.head_dim, 16
    slots = (batch * -(-ctx // page) + 1) * page
    meta, rows = _decode_batch(batch, ctx, page, slots, device, seed=batch)
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(batch, H, D, device=device, dtype=dtype, generator=g)
    k = torch.randn(slots, KVH, D, device=device, dtype=dtype, generator=g)
    v = torch.randn(slots, KVH, D, device=device, dtype=dtype, generator=g)
    scale = D ** -0.5
    row_t = torch.as_tensor(np.stack(rows), device=device)
    lens = torch.full((batch,), ctx, device=device)
    triton_out = triton_paged_attention(q, k, v, meta, meta.kv_slots, 0, scale)
    sdpa_out = sdpa_gathered(q, k, v, row_t, lens, scale)
    kv_bytes = 2 * batch * ctx * KVH * D * k.element_size()
    out = {"shape": shape, "batch": batch, "ctx": ctx, "dtype": str(dtype).removeprefix("torch."), "kv_bytes": kv_bytes,
           "max_abs_diff": float((triton_out.float() - sdpa_out.float()).abs().max())}
    for name, fn in (("triton", lambda: triton_paged_attention(q, k, v, meta, meta.kv_slots, 0, scale)),
                     ("sdpa", lambda: sdpa_gathered(q, k, v, row_t, lens, scale))):
        t = _time(fn, device, iters)
        out[f"{name}_us"] = 1e6 * t
        out[f"{name}_bytes_per_s"] = kv_bytes / t
        out[f"{name}_roofline_fraction"] = kv_bytes / t / peak_bw if peak_bw else None
    out["triton_over_sdpa"] = out["sdpa_us"] / out["triton_us"]
    return out
