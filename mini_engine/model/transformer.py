"""The decoder-only transformer (Llama / Qwen3 family) over a paged KV cache.

`forward` takes a flat batch of tokens, writes each layer's K/V at the slots the
memory layer handed out (the SWA pool's slots on sliding layers) and attends
through an attention backend. `dense_forward` is the reference: one sequence, a
contiguous KV, full recompute, its own attention code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from mini_engine.model.attention_torch import paged_attention
from mini_engine.model.attn_meta import AttnMeta
from mini_engine.config.shapes import ModelConfig
from mini_engine.model.config import torch_dtype
from mini_engine.model.cpu_kernels import ops
from mini_engine.model.decode_fused import (COPY_LIMIT_BYTES, COPY_MIN_ROWS, FUSED_DTYPES, decode_layer_kernel,
                                            fused_decode, prefill_weights)
from mini_engine.model.layers import (DecoderLayer, RMSNorm, materialize, rope_cos_sin, rope_inv_freq, rope_tables,
                                     seeded_init)

Attend = Callable[..., torch.Tensor]


@dataclass
class KVCache:
    """Per-layer K and V buffers; sliding layers index the SWA pool, full layers the full pool."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]
    sliding: list[bool]

    @classmethod
    def allocate(cls, cfg: ModelConfig, full_slots: int, swa_slots: int, device, layer_types=None) -> "KVCache":
        types = layer_types or cfg.layer_types
        ks, vs = [], []
        for t in types:
            n = swa_slots if t == "sliding" else full_slots
            # Zeros, not empty: masked keys (dummy slot 0) must stay finite.
            ks.append(torch.zeros(n, cfg.num_kv_heads, cfg.head_dim, dtype=torch_dtype(cfg), device=device))
            vs.append(torch.zeros(n, cfg.num_kv_heads, cfg.head_dim, dtype=torch_dtype(cfg), device=device))
        return cls(ks, vs, [t == "sliding" for t in types])

    def move(self, src: torch.Tensor, dst: torch.Tensor, swa_src: torch.Tensor | None, swa_dst: torch.Tensor | None) -> None:
        """Copy K/V from slots `src` to `dst` (an accepted tree branch becoming contiguous)."""
        for i, sliding in enumerate(self.sliding):
            s, d = (swa_src, swa_dst) if sliding else (src, dst)
            if s is None:
                continue
            self.k[i][d] = self.k[i][s].clone()
            self.v[i][d] = self.v[i][s].clone()


def layer_step(
    layer: DecoderLayer,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    meta: AttnMeta,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    attend: Attend,
    window: int | None = None,
    swa_pool: bool | None = None,
    rope: tuple | None = None,
) -> torch.Tensor:
    """One decoder layer over the paged cache.

    A drafter reuses target layers with its own full-slot cache: it passes
    `swa_pool=False` and its own `window` (the layer's window by default).
    `rope` (rope_tables, once per forward) takes the fused projections.
    """
    # Submodules are called through .forward: a tiny model's step is bound by per-call
    # overhead, and nn.Module.__call__ (hook dispatch) costs as much as a small op.
    attn = layer.self_attn
    window = layer.window if window is None else window
    swa_pool = layer.sliding if swa_pool is None else swa_pool
    in_out = prefill_weights(layer, x)
    q, k, v = attn.qkv(layer.input_layernorm.forward(x), cos, sin, rope, in_out[0] if in_out else None)
    if swa_pool:
        out_slots, kv_slots = meta.swa_out_slots, meta.swa_kv_slots
    else:
        out_slots, kv_slots = meta.out_slots, meta.kv_slots
    # index_copy_, not k_cache[out_slots] = k: the indexed assignment is several times slower on a CPU.
    k_cache.index_copy_(0, out_slots, k)
    v_cache.index_copy_(0, out_slots, v)
    o = attend(q, k_cache, v_cache, meta, kv_slots, window, attn.head_dim**-0.5)
    o = o.reshape(x.shape[0], -1)
    x = x + (attn.o_proj.forward(o) if in_out is None else o @ in_out[1])
    return x + layer.mlp.forward(layer.post_attention_layernorm.forward(x), in_out and in_out[2:])


def dense_layer_step(layer: DecoderLayer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """One sequence, all positions at once, causal (and windowed) over a contiguous KV."""
    attn = layer.self_attn
    n = x.shape[0]
    q, k, v = attn.qkv(layer.input_layernorm(x), cos, sin)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    g = attn.num_heads // attn.num_kv_heads
    k = k.to(acc).repeat_interleave(g, dim=1)
    v = v.to(acc).repeat_interleave(g, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.to(acc), k) * attn.head_dim**-0.5
    i = torch.arange(n, device=x.device)
    allowed = i[None, :] <= i[:, None]
    if layer.window:
        allowed &= (i[:, None] - i[None, :]) < layer.window
    scores = scores.masked_fill(~allowed, float("-inf"))
    o = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).to(x.dtype)
    x = x + attn.o_proj(o.reshape(n, -1))
    return x + layer.mlp(layer.post_attention_layernorm(x))


class _Body(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        # Given its weight, Embedding skips its own random init: on the meta device that init
        # (normal_) runs through torch's Python decompositions, whose first use imports
        # torch._dynamo, seconds of startup for a weight that is overwritten anyway.
        # (Linear's init has a native meta kernel.)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size,
                                         _weight=torch.empty(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(DecoderLayer(cfg, t == "sliding") for t in cfg.layer_types)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, device: torch.device | str = "cpu", init: bool = True):
        super().__init__()
        self.cfg = cfg
        # Built on the meta device and materialised in place: an 8B shape never passes
        # through host memory or torch's default init; every tensor is then set below
        # (seeded) or by the loader.
        with torch.device("meta"):
            self.model = _Body(cfg)
            self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        materialize(self, torch_dtype(cfg), device)
        for layer in self.model.layers:
            layer.fuse()  # before any weight is written: init and the loader write through the views
        if init:
            seeded_init(self, cfg.seed)
        self._head_acc: torch.Tensor | None = None  # set on first use, after any checkpoint load
        self._head_t_cache: tuple | None = None  # (weight ptr and version, its [hidden, vocab] copy)

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    def head_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + LM head; float32 (float64 for a float64 model) so argmax is stable."""
        h = self.model.norm.forward(hidden)
        w = self.head_weight_acc()
        if self._copy_head(h, w):
            # A contiguous [hidden, vocab] copy of the head: see decode_fused.in_out_weights.
            return h @ self._head_t(w)
        return h.to(w.dtype) @ w.T

    def greedy(self, hidden: torch.Tensor) -> torch.Tensor:
        """logits(hidden).argmax(-1); on a CPU with the compiled kernels, one call."""
        w = self.head_weight_acc()
        kernels = ops() if hidden.device.type == "cpu" and hidden.dtype == w.dtype in FUSED_DTYPES else None
        if kernels is None:
            return self.logits(hidden).argmax(-1)
        head = self._head_t(w) if self._copy_head(hidden, w) else w.t()
        return kernels.greedy_head.default(hidden, self.model.norm.weight, head, self.model.norm.eps)

    @staticmethod
    def _copy_head(h: torch.Tensor, w: torch.Tensor) -> bool:
        return (h.shape[0] >= COPY_MIN_ROWS and w.dtype == h.dtype and w.device.type == "cpu"
                and w.numel() * w.element_size() <= COPY_LIMIT_BYTES)

    def _head_t(self, w: torch.Tensor) -> torch.Tensor:
        key = (w.data_ptr(), w._version)
        if self._head_t_cache is None or self._head_t_cache[0] != key:
            self._head_t_cache = (key, w.t().contiguous())
        return self._head_t_cache[1]

    def head_weight_acc(self) -> torch.Tensor:
        """The LM head in float32 (float64 for a float64 model). A bf16/fp16 head is upcast
        once and kept: upcasting it on every call moves more bytes than the matmul itself
        (2 GB of float32 for Llama-3.1-8B, several times per speculative step)."""
        w = self.head_weight()
        acc = torch.float64 if w.dtype == torch.float64 else torch.float32
        if w.dtype == acc:
            return w
        if self._head_acc is None:
            self._head_acc = w.to(acc)
        return self._head_acc

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttnMeta,
        cache: KVCache,
        attend: Attend = paged_attention,
    ) -> torch.Tensor:
        """Hidden states after the last layer (before the final norm), one row per token."""
        # The submodules from their tables and the embedding's functional form: the same
        # gather, without nn.Module's attribute and call machinery (5.3 us against 3.1 for the embedding).
        inner = self._modules["model"]._modules
        x = F.embedding(input_ids, inner["embed_tokens"]._parameters["weight"])
        layers = inner["layers"]
        kernel = decode_layer_kernel(layers, meta, x, attend is paged_attention)
        if kernel is not None:
            return fused_decode(kernel, layers, x, positions, rope_inv_freq(self.cfg, x), meta, cache)
        cos, sin = rope_cos_sin(positions, self.cfg, x.dtype)
        rope = rope_tables(cos, sin)
        for i, layer in enumerate(layers):
            x = layer_step(layer, x, cos, sin, meta, cache.k[i], cache.v[i], attend, rope=rope)
        return x

    def dense_forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.model.embed_tokens(input_ids)
        pos = torch.arange(input_ids.shape[0], device=input_ids.device)
        cos, sin = rope_cos_sin(pos, self.cfg, x.dtype)
        for layer in self.model.layers:
            x = dense_layer_step(layer, x, cos, sin)
        return x
