"""What EAGLE and DFLASH share: a double-buffered reservation of drafted slots."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mini_engine.algos.base import Algorithm

if TYPE_CHECKING:
    from mini_engine.config.engine_config import EngineConfig


class Speculative(Algorithm):
    speculative = True
    graphable = False  # a verify step scores several tokens a request: no decode graph
    # The committed length advances only when a verify result is processed (SGLang's
    # spec-v2 result processing), one plan late under overlap: EAGLE and DFLASH alike.
    stale_under_overlap = True

    def step_reserve(self, cfg: EngineConfig) -> int:
        raise NotImplementedError

    def row_headroom(self, cfg: EngineConfig, rule: str) -> int:
        ps, reserve = cfg.page_size, self.step_reserve(cfg)
        if rule == "generous":
            return reserve + ps - 1  # an aligned reservation overshoots committed + reserve by < ps
        extra = 4 + self.num_draft_tokens(cfg)
        return max(extra, reserve + ps - 1) if ps > 1 else extra
