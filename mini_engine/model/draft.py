"""The drafter core shared by the EAGLE head and the DFLASH block drafter.

A draft forward embeds each token, fuses the target's hidden state of the previous
position into it (EAGLE's fc over [embedding, feature]), runs the target's lowest
`shared_layers` decoder layers (weights shared, KV in the drafter's own cache) and
one decoder layer of its own, and reads out through the target's final norm and
LM head. Two knobs set how often the draft agrees with the target:

* `shared_layers`: with all target layers shared the drafter recomputes the target
  exactly (acceptance 1.0 under greedy chains); with none it is a bigram guess.
* `noise`: the weight of the drafter's own random parts (the feature fusion and
  its own layer's residual write). 0 keeps the shared path clean.

Both are seeded, so acceptance is real (a forward pass disagrees with another
forward pass) and reproducible.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from mini_engine.errors import ConfigError
from mini_engine.model.attention_torch import paged_attention
from mini_engine.model.attn_meta import AttnMeta
from mini_engine.model.config import torch_dtype
from mini_engine.model.decode_fused import decode_layer_kernel, fused_decode
from mini_engine.model.layers import (DecoderLayer, materialize, rope_cos_sin, rope_inv_freq, rope_tables,
                                     seeded_init)
from mini_engine.model.transformer import Attend, KVCache, Transformer, layer_step


class DraftModel(nn.Module):
    def __init__(self, target: Transformer, shared_layers: int, noise: float, seed: int):
        super().__init__()
        cfg = target.cfg
        if not 0 <= shared_layers <= cfg.num_layers:
            raise ConfigError(f"draft_layers must be in 0..{cfg.num_layers} for this model (got {shared_layers})")
        if not noise >= 0.0:
            raise ConfigError(f"draft_noise must be a number >= 0 (got {noise})")
        self._target = (target,)  # a tuple: the target's weights are shared, not registered twice
        self.cfg = cfg
        self.shared_layers = shared_layers
        # The memory layer's page size (the model backend sets it): draft forwards read the
        # cache through page tables of this size (extend_fused.py); 1 is always exact.
        self.page_size = 1
        own_cfg = replace(cfg, num_layers=1, layer_types=("full",), window=0)
        with torch.device("meta"):  # materialised on the target's device, then seeded
            self.fc = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
            self.layer = DecoderLayer(own_cfg, sliding=False)
            # DFLASH's mask token: one learned embedding for every undrafted block position.
            self.mask_embed = nn.Parameter(torch.zeros(cfg.hidden_size))
        materialize(self, torch_dtype(cfg), target.device)
        self.layer.fuse()
        seeded_init(self, seed, scale_out=noise)
        with torch.no_grad():
            h = cfg.hidden_size
            w = self.fc.weight.float() * noise
            w[:, :h] = torch.eye(h, device=w.device)  # the embedding passes through unchanged
            self.fc.weight.copy_(w.to(self.fc.weight.dtype))
            emb = target.model.embed_tokens.weight
            self.mask_embed.copy_(emb.float().mean(0).to(emb.dtype))

    @property
    def target(self) -> Transformer:
        return self._target[0]

    @property
    def layers(self) -> list[DecoderLayer]:
        # Built once: slicing a ModuleList builds a new one (a module __init__), twice a forward.
        got = self.__dict__.get("_layer_list")
        if got is None:
            got = self.__dict__["_layer_list"] = [*self.target.model.layers[: self.shared_layers], self.layer]
        return got

    def new_cache(self, slots: int) -> KVCache:
        cfg = replace(self.cfg, num_layers=self.shared_layers + 1, layer_types=("full",) * (self.shared_layers + 1), window=0)
        return KVCache.allocate(cfg, slots, 0, self.target.device)

    def embed(self, ids: torch.Tensor, is_mask: torch.Tensor | None = None) -> torch.Tensor:
        e = self.target.model.embed_tokens(ids)
        if is_mask is not None:
            e = torch.where(is_mask[:, None], self.mask_embed.to(e.dtype)[None, :], e)
        return e

    def forward(
        self,
        embeds: torch.Tensor,
        feats: torch.Tensor,
        positions: torch.Tensor,
        meta: AttnMeta,
        cache: KVCache,
        attend: Attend = paged_attention,
        context_window: int = 0,
    ) -> torch.Tensor:
        """Draft hidden states (before the final norm). `context_window` > 0 caps what
        every draft layer sees (DFLASH's draft_window); else shared layers keep their window."""
        x = self.fc(torch.cat([embeds, feats.to(embeds.dtype)], dim=-1))
        kernel = None if context_window else decode_layer_kernel(self.layers, meta, x, attend is paged_attention)
        if kernel is not None:  # one decode row per query (draft_io.draft_forward, extend_fused.py)
            return fused_decode(kernel, self.layers, x, positions, rope_inv_freq(self.cfg, x), meta, cache)
        cos, sin = rope_cos_sin(positions, self.cfg, x.dtype)
        rope = rope_tables(cos, sin)
        for i, layer in enumerate(self.layers):
            w = layer.window
            if context_window:
                w = min(w, context_window) if w else context_window
            x = layer_step(layer, x, cos, sin, meta, cache.k[i], cache.v[i], attend, window=w, swa_pool=False,
                           rope=rope)
        return x

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.target.logits(hidden)

    def greedy(self, hidden: torch.Tensor) -> torch.Tensor:
        """logits(hidden).argmax(-1), in one call where the CPU kernels run (Transformer.greedy)."""
        return self.target.greedy(hidden)
