"""How many KV tokens `mem_fraction` of a device holds once the model is in memory.

As SGLang's `mem_fraction_static`, the fraction covers everything static: the
target's weights and the KV pools. What is left after the weights is shared by
the target's KV (every layer, one token's K and V; the SWA pool is sized in
tokens alike) and, under speculative decoding, the drafter's KV (its shared
layers plus its own layer, one slot per pool slot) and its own weights:

    tokens = (floor(device_bytes * mem_fraction) - weight_bytes)
             // (kv_bytes_per_token + draft_kv_bytes_per_token)

The accounting-only backend (`model = "none"`) loads nothing: no weights, no
drafter, the nominal KV shape of `EngineConfig.kv_bytes_per_token`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from mini_engine.errors import ConfigError


@dataclass(frozen=True)
class Footprint:
    weight_bytes: int  # target + drafter weights resident on the device
    kv_bytes_per_token: int  # the target's K and V of one token, every layer
    draft_kv_bytes_per_token: int = 0  # the drafter's K and V of one token, every draft layer


def pool_tokens(device_bytes: int, mem_fraction: float, fp: Footprint) -> int:
    """KV tokens the fraction leaves after the weights (see the module docstring)."""
    budget = int(device_bytes * mem_fraction) - fp.weight_bytes
    per_token = fp.kv_bytes_per_token + fp.draft_kv_bytes_per_token
    if budget < per_token:
        raise ConfigError(
            f"mem_fraction={mem_fraction} of {device_bytes / 2**30:.1f} GiB leaves no room for the KV pool "
            f"after {fp.weight_bytes / 2**30:.2f} GiB of weights; raise mem_fraction or set pool_tokens")
    return budget // per_token


def footprint(cfg) -> Footprint:
    """The device bytes an EngineConfig's model takes: weights and KV per token, in the dtype
    the model runs in (a bf16 shape runs in float32 on the CPU, as the loader does)."""
    if cfg.model == "none":
        return Footprint(0, cfg.kv_bytes_per_token)
    import torch  # torch: optional, loaded only on this path

    from mini_engine.model.backend import DEFAULT_DRAFT_LAYERS  # numpy, torch: optional, loaded only on this path
    from mini_engine.model.config import SHAPES  # torch: optional, loaded only on this path
    # torch: optional, loaded only on this path
    from mini_engine.model.loader import read_hf_config, config_from_hf

    if cfg.model in SHAPES:
        mcfg = SHAPES[cfg.model]
        if cfg.device == "cpu" and mcfg.dtype == "bfloat16":
            mcfg = replace(mcfg, dtype="float32")
    else:  # a checkpoint directory: its config.json, without reading the weights
        mcfg = config_from_hf(read_hf_config(Path(cfg.model)), Path(cfg.model), None)
    elem = torch.empty((), dtype=mcfg.torch_dtype).element_size()
    per_layer_kv = 2 * mcfg.num_kv_heads * mcfg.head_dim * elem
    weights = mcfg.num_params() * elem
    draft_kv = 0
    if cfg.speculative:
        shared = min(DEFAULT_DRAFT_LAYERS, mcfg.num_layers) if cfg.draft_layers is None else cfg.draft_layers
        draft_kv = (shared + 1) * per_layer_kv  # the shared layers and its own, all full attention
        weights += _drafter_params(mcfg) * elem
    return Footprint(weights, per_layer_kv * mcfg.num_layers, draft_kv)


def _drafter_params(mcfg) -> int:
    """The drafter's own weights: the feature fusion, one decoder layer, the mask embedding
    (its shared layers, norm and LM head are the target's)."""
    h, kv = mcfg.hidden_size, mcfg.num_kv_heads * mcfg.head_dim
    layer = h * mcfg.num_heads * mcfg.head_dim * 2 + h * kv * 2 + 3 * h * mcfg.intermediate_size
    return 2 * h * h + layer + h

