"""EAGLE: a draft tree of `steps` levels and `topk` branches, verified in one pass."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mini_engine.algos.speculative import Speculative
from mini_engine.errors import ConfigError, check_positive
from mini_engine.config.option import Option

if TYPE_CHECKING:
    from mini_engine.config.engine_config import EngineConfig

DEFAULT_TOPK = 1
DEFAULT_STEPS = 3


class Eagle(Speculative):
    name = "eagle"
    options = (
        Option("topk", int, None, "EAGLE branches per step (default 1; ngram: its BFS breadth, default 10)",
               minimum=1, group="eagle/ngram"),
        Option("steps", int, None, "EAGLE draft steps (default 3; ngram: num_draft_tokens // topk)", minimum=1,
               group="eagle/ngram"),
        Option("num_draft_tokens", int, None, "EAGLE/ngram tokens verified per step (ngram default 12)",
               short="ndt", minimum=2, group="eagle/ngram"),
    )
    draft_root_done = 1  # the root's draft KV is final after its draft forward
    draft_axis = "topk"

    def resolve(self, cfg: EngineConfig) -> None:
        cfg.topk = check_positive("topk", DEFAULT_TOPK if cfg.topk is None else cfg.topk)
        cfg.steps = check_positive("steps", DEFAULT_STEPS if cfg.steps is None else cfg.steps)
        most = cfg.steps * cfg.topk + 1  # every tree node plus the root
        if cfg.num_draft_tokens is None:
            cfg.num_draft_tokens = cfg.steps + 1 if cfg.topk == 1 else most
        check_positive("num_draft_tokens", cfg.num_draft_tokens, minimum=2)
        if cfg.num_draft_tokens > most:
            raise ConfigError(f"num_draft_tokens must be <= steps * topk + 1 = {most} "
                              f"(got {cfg.num_draft_tokens} with steps={cfg.steps}, topk={cfg.topk})")

    def step_reserve(self, cfg: EngineConfig) -> int:
        from mini_engine.memory import sizing  # numpy: not needed to build the CLI parser

        return sizing.eagle_reserve(cfg.page_size, cfg.topk, cfg.steps, cfg.num_draft_tokens)

    def max_accept(self, cfg: EngineConfig) -> int:
        return min(cfg.steps + 1, cfg.num_draft_tokens)

    def num_draft_tokens(self, cfg: EngineConfig) -> int:
        return cfg.num_draft_tokens

    def make_drafter(self, cfg: EngineConfig, draft_model, cache, temperature: float, attend, gen):
        from mini_engine.spec.eagle import EagleDrafter  # numpy, torch: optional, loaded only on this path

        return EagleDrafter(draft_model, cache, cfg.topk, cfg.steps, cfg.num_draft_tokens, temperature, attend, gen)

    def sglang_spec(self, options: dict[str, Any]) -> tuple[str, int, int, int] | None:
        keys = ("steps", "topk", "num_draft_tokens")
        if not all(isinstance(options.get(k), int) for k in keys):
            return None
        return ("EAGLE", *(options[k] for k in keys))
