"""MemoryConfig: the sizes and policies of the KV memory layer."""

from __future__ import annotations

from dataclasses import dataclass

from mini_engine.errors import ConfigError, check_choice, check_positive
from mini_engine.profiles import DEFAULT_PROFILE, FREE_RULES, POLICIES, Profile, resolve


@dataclass
class MemoryConfig:
    page_size: int
    num_pages: int
    max_reqs: int
    row_width: int
    policy: str | None = None  # shorthand override of the profile's align: aligned | unaligned
    free_policy: str | None = None  # override of the profile's free rule: segment | floor | dedup
    prefix_cache: str | None = None  # override of the profile's SWA eviction threshold: radix | chunk
    swa_num_pages: int | None = None  # SWA pool; None = no SWA layers
    window: int | None = None  # SWA window in positions
    draft_window: int | None = None  # DFLASH compact draft cache (K9); None = not used
    algo: str | None = None  # label written in the trace's prepare records
    # The accounting rules; None: the default profile with policy / free_policy applied.
    profile: Profile | None = None

    def validate(self) -> MemoryConfig:
        check_positive("page_size", self.page_size)
        check_positive("num_pages", self.num_pages)
        check_positive("max_reqs", self.max_reqs)
        check_positive("row_width", self.row_width)
        if self.profile is None:
            if self.policy is not None:
                check_choice("policy", self.policy, POLICIES)
            if self.free_policy is not None:
                check_choice("free_policy", self.free_policy, FREE_RULES)
            self.profile = resolve(DEFAULT_PROFILE, policy=self.policy, free=self.free_policy,
                                   prefix_cache=self.prefix_cache)
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
