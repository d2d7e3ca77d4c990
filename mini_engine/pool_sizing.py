"""What a config asks of the KV pools: the memory layer's config, the decode
reservation, a request's peak pages and the pages admission can count on."""

from __future__ import annotations

from mini_engine.config import EngineConfig
from mini_engine.memory.config import MemoryConfig


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
