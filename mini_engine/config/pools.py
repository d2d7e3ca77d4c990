"""What a config asks of the KV pools.

How many KV tokens `mem_fraction` of a device holds once the model is in memory: as
SGLang's `mem_fraction_static`, the fraction covers everything static, the target's
weights and the KV pools. What is left after the weights is shared by the target's KV
(every layer, one token's K and V; the SWA pool is sized in tokens alike) and, under
speculative decoding, the drafter's KV (its shared layers plus its own layer, one slot
per pool slot) and its own weights:

    tokens = (floor(device_bytes * mem_fraction) - weight_bytes)
             // (kv_bytes_per_token + draft_kv_bytes_per_token)

The accounting-only backend (`model = "none"`) loads nothing: no weights, no drafter,
the nominal KV shape of `EngineConfig.kv_bytes_per_token`. The shapes are plain data
(mini_engine.config.shapes), so sizing loads no torch.

Then, from the pool: the memory layer's config, the decode reservation, a request's
peak pages and the pages admission can count on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from mini_engine.config.hf_config import config_from_hf, read_hf_config
from mini_engine.config.shapes import DEFAULT_DRAFT_LAYERS, SHAPES, ModelConfig
from mini_engine.errors import ConfigError
from mini_engine.memory.config import MemoryConfig

if TYPE_CHECKING:
    from mini_engine.config.engine_config import EngineConfig


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


def footprint(cfg: EngineConfig) -> Footprint:
    """The device bytes an EngineConfig's model takes: weights and KV per token, in the dtype
    the model runs in (a bf16 shape runs in float32 on the CPU, as the loader does)."""
    if cfg.model == "none":
        return Footprint(0, cfg.kv_bytes_per_token)
    if cfg.model in SHAPES:
        mcfg = SHAPES[cfg.model]
        if cfg.device == "cpu" and mcfg.dtype == "bfloat16":
            mcfg = replace(mcfg, dtype="float32")
    else:  # a checkpoint directory: its config.json, without reading the weights
        mcfg = config_from_hf(read_hf_config(Path(cfg.model)), Path(cfg.model), None)
    elem = mcfg.dtype_bytes
    per_layer_kv = 2 * mcfg.num_kv_heads * mcfg.head_dim * elem
    weights = mcfg.num_params() * elem
    draft_kv = 0
    if cfg.speculative:
        shared = min(DEFAULT_DRAFT_LAYERS, mcfg.num_layers) if cfg.draft_layers is None else cfg.draft_layers
        draft_kv = (shared + 1) * per_layer_kv  # the shared layers and its own, all full attention
        weights += _drafter_params(mcfg) * elem
    return Footprint(weights, per_layer_kv * mcfg.num_layers, draft_kv)


def _drafter_params(mcfg: ModelConfig) -> int:
    """The drafter's own weights: the feature fusion, one decoder layer, the mask embedding
    (its shared layers, norm and LM head are the target's)."""
    h, kv = mcfg.hidden_size, mcfg.num_kv_heads * mcfg.head_dim
    layer = h * mcfg.num_heads * mcfg.head_dim * 2 + h * kv * 2 + 3 * h * mcfg.intermediate_size
    return 2 * h * h + layer + h


def decode_reserve(cfg: EngineConfig) -> int:
    """The speculative reservation ahead of committed (0 for plain decode)."""
    return cfg.step_reserve if cfg.speculative else 0


def memory_config(cfg: EngineConfig) -> MemoryConfig:
    profile = cfg.rules
    return MemoryConfig(
        page_size=cfg.page_size,
        num_pages=cfg.num_pages,
        max_reqs=cfg.max_running,
        row_width=cfg.max_context + cfg.algo.row_headroom(cfg, profile.row_headroom),
        policy=cfg.policy,
        free_policy=cfg.free_policy,
        swa_num_pages=swa_pages(cfg.num_pages, profile.swa_ratio) if cfg.has_swa else None,
        window=cfg.window if cfg.has_swa else None,
        draft_window=cfg.draft_window,
        algo=cfg.algo.writer_name if cfg.speculative else None,  # the profile writer it plans as
        rules=profile.memory_rules(),
    ).validate()


def swa_pages(full_pages: int, ratio: float) -> int:
    """SWA pool pages: the profile's share of the full pool (at least one page)."""
    return max(1, int(full_pages * ratio))


def request_pages(cfg: EngineConfig, prompt_len: int, max_new: int) -> int:
    """Pages one request may hold at its peak: full context plus the decode reservation."""
    tokens = prompt_len + max_new + decode_reserve(cfg)
    # An unaligned writer may leave the tail of a page stranded: one page more.
    return -(-tokens // cfg.page_size) + (0 if cfg.rules.all_aligned else 1)


def admission_pages(cfg: EngineConfig, num_pages: int | None = None) -> int:
    """Pages admission can count on: the smaller of the two pools (SGLang's min(full, swa)),
    for the config's full pool or for ``num_pages`` full pages."""
    pages = cfg.num_pages if num_pages is None else num_pages
    return min(pages, swa_pages(pages, cfg.rules.swa_ratio)) if cfg.has_swa else pages


def min_pool_pages(cfg: EngineConfig, need: int) -> int:
    """The fewest full-pool pages whose admission_pages reach ``need``: asked of the same
    rule that refuses, so the pool a refusal names runs (a scaled guess named pools that
    the SWA share's rounding still refused)."""
    pages = need
    if cfg.has_swa and cfg.rules.swa_ratio < 1:
        pages = max(need, int(need / cfg.rules.swa_ratio) - 2)  # just below the answer; floors settle the rest
    while admission_pages(cfg, pages) < need:
        pages += 1
    return pages


def output_cap(prompt_len: int, max_new: int, pool_tokens: int, page_size: int) -> int:
    """SGLang's clip of a request's output at arrival (Scheduler.init_req_max_new_tokens; in
    0.5.23 through the allocator's max_new_tokens_for_memory, in 0.5.18 inline): what an empty
    full pool holds beside the page-ceiled prompt, one page and one token, so that the
    PrefillAdder's strict test (ceil_ps(prompt) + max_new + ps < the pool) can pass."""
    paged = -(-prompt_len // page_size) * page_size
    return max(0, min(max_new, pool_tokens - paged - page_size - 1))
