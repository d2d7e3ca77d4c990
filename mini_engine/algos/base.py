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
from mini_engine.config.option import Option

if TYPE_CHECKING:
    from mini_engine.config.engine_config import EngineConfig

# Row headroom rules (a profile knob): "generous" always leaves room for the
# reservation plus the page round-up; "sglang" is SGLang 0.5.23's
# get_req_to_token_extra_context_len: 4 + num_draft_tokens, raised to
# reserve + ps - 1 only when ps > 1 (so DFLASH at ps 1 can overflow its row).
ROW_HEADROOM_RULES = ("generous", "sglang")


class Algorithm:
    name = "none"
    speculative = False
    # This algorithm's own options, in the order a config key lists them (default
    # None: no fixed default, resolve() fills it). They join the engine's schema.
    options: tuple[Option, ...] = ()
    # Questions the model backend asks instead of testing the name:
    graphable = True  # its decode step is one token a request, which a CUDA graph replays
    # Positions past the draft root whose draft KV is final after drafting (EAGLE's
    # root KV is; DFLASH's block forward overwrites it).
    draft_root_done = 0
    # The profile writer whose alignment rule its reservation follows (--align); the
    # trace's prepare records name it. None: the algorithm's own name.
    writer: str | None = None
    # The option a heatmap puts on its y axis (what sizes one step's draft); None: no draft.
    draft_axis: str | None = None

    @property
    def writer_name(self) -> str:
        return self.writer or self.name

    @property
    def key_fields(self) -> tuple[tuple[str, str], ...]:
        """(option, short name) in the order they appear in a config key."""
        return tuple((o.name, o.id) for o in self.options)

    @property
    def defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.options}
    # Under overlap scheduling, is the next step planned from a committed length one
    # step stale? Not for plain decode: SGLang's alloc_for_decode advances the length
    # when it allocates (mini_engine.scheduler.overlap).
    stale_under_overlap = False
    # Does SGLang delay this algorithm's fresh admissions until a few running slots are free
    # (MinFreeSlotsDelayer, on by itself for the DFLASH family)? mini_engine.scheduler.admission_delay.
    delays_admission = False

    def resolve(self, cfg: EngineConfig) -> None:
        """Fill this algorithm's defaults into cfg and validate them (ConfigError on bad input)."""

    def check_foreign(self, cfg: EngineConfig, others: list[Algorithm]) -> None:
        """An option of another algorithm set on this one is a contradiction, not a silent no-op."""
        mine = {o.name for o in self.options}
        for other in others:
            for name in (o.name for o in other.options):
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

    def make_drafter(self, cfg: EngineConfig, draft_model, cache, temperature: float, attend, gen):
        """The real-model drafter of this algorithm (None: it drafts nothing)."""
        return None

    def sglang_spec(self, options: dict[str, Any]) -> tuple[str, int, int, int] | None:
        """(SGLang's speculative_algorithm, num_steps, eagle_topk, num_draft_tokens) for these
        options, to ask SGLang's own sizing code for the reserve; None: not comparable."""
        return None

    def row_headroom(self, cfg: EngineConfig, rule: str) -> int:
        """req_to_token row width beyond max_context."""
        ps = cfg.page_size
        if rule == "generous":
            return ps - 1
        return 4  # SGLang: 4 + (no draft tokens)
