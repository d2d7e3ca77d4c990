"""MemoryConfig: the sizes and rules of the KV memory layer.

The rules arrive as plain values (memory.rules.MemoryRules): the engine derives
them from its profile, so nothing here imports the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from mini_engine.errors import ConfigError, check_positive
from mini_engine.memory.rules import MemoryRules


@dataclass
class MemoryConfig:
    page_size: int
    num_pages: int
    max_reqs: int
    row_width: int
    policy: str | None = None  # shorthand override of the default rules' align: aligned | unaligned
    free_policy: str | None = None  # override of the default rules' free rule: segment | floor | dedup
    prefix_cache: str | None = None  # override of the default rules' prefix cache: radix (a tree) | chunk
    swa_num_pages: int | None = None  # SWA pool; None = no SWA layers
    window: int | None = None  # SWA window in positions
    draft_window: int | None = None  # DFLASH compact draft cache (K9); None = not used
    algo: str | None = None  # the writer a speculative reservation plans as (and the trace's label)
    # The accounting rules; None: SGLang 0.5.23's with policy / free_policy / prefix_cache applied.
    rules: MemoryRules | None = None

    def validate(self) -> MemoryConfig:
        check_positive("page_size", self.page_size)
        check_positive("num_pages", self.num_pages)
        check_positive("max_reqs", self.max_reqs)
        check_positive("row_width", self.row_width)
        if self.rules is None:
            self.rules = MemoryRules.of(self.policy, self.free_policy, self.prefix_cache)
        if (self.swa_num_pages is None) != (self.window is None):
            raise ConfigError(
                "swa_num_pages and window must be given together (SWA on) or both left unset "
                f"(got swa_num_pages={self.swa_num_pages!r}, window={self.window!r})")
        if self.swa_num_pages is not None:
            check_positive("swa_num_pages", self.swa_num_pages)
            check_positive("window", self.window)
        if self.draft_window is not None:
            check_positive("draft_window", self.draft_window)
        return self

    @property
    def swa(self) -> bool:
        return self.swa_num_pages is not None
