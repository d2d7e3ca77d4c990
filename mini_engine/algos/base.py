"""Algorithm: what the engine needs to know of one decoding algorithm.

One object per algorithm (plain decoding, EAGLE, DFLASH), registered by name in
``mini_engine.algos``: its options and their defaults, their validation, the slots
one decode step reserves ahead of the committed length, the most tokens one step
can accept, and the row headroom the request rows need. The engine, the
scheduler and the memory layer ask the object; none of them tests the name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mini_engine.errors import ConfigError

if TYPE_CHECKING:
    from mini_engine.config import EngineConfig

# Row headroom rules (a profile knob): "generous" always leaves room for the
# reservation plus the page round-up; "sglang" is SGLang 0.5.23's
# get_req_to_token_extra_context_len: 4 + num_draft_tokens, raised to
# reserve + ps - 1 only when ps > 1 (so DFLASH at ps 1 can overflow its row).
ROW_HEADROOM_RULES = ("generous", "sglang")


class Algorithm:
    name = "none"
    speculative = False
    # Under overlap scheduling, is the next step planned from a committed length one
    # step stale? Not for plain decode: SGLang's alloc_for_decode advances the length
    # when it allocates (mini_engine.overlap).
    stale_under_overlap = False
    # option -> default (None: the option has no fixed default, resolve() fills it)
    options: dict[str, Any] = {}
    # (option, short name) in the order they appear in a config key
    key_fields: tuple[tuple[str, str], ...] = ()

    def resolve(self, cfg: EngineConfig) -> None:
        """Fill this algorithm's defaults into cfg and validate them (ConfigError on bad input)."""

    def check_foreign(self, cfg: EngineConfig, others: list[Algorithm]) -> None:
        """An option of another algorithm set on this one is a contradiction, not a silent no-op."""
        mine = set(self.options)
        for other in others:
            for name in other.options:
                if name not in mine and getattr(cfg, name) is not None:
                    raise ConfigError(f"{name} applies to spec={other.name} only (spec is {self.name!r}); "
                                      f"drop {name} or set spec={other.name}")

    def step_reserve(self, cfg: EngineConfig) -> int:
        """Slots one decode step reserves ahead of the committed length (plain decode: 1)."""
        return 1

    def max_accept(self, cfg: EngineConfig) -> int:
        """Most tokens one verify can accept, the bonus token included."""
        return 1

    def num_draft_tokens(self, cfg: EngineConfig) -> int:
        """Tokens one verify scores (SGLang's speculative_num_draft_tokens; 0 without drafts)."""
        return 0

    def row_headroom(self, cfg: EngineConfig, rule: str) -> int:
        """req_to_token row width beyond max_context."""
        ps = cfg.page_size
        if rule == "generous":
            return ps - 1
        return 4  # SGLang: 4 + (no draft tokens)
