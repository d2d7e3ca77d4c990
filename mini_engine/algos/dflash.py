"""DFLASH: one forward drafts a block of `block_size` tokens (the root plus masks)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mini_engine.algos.speculative import Speculative
from mini_engine.errors import check_positive
from mini_engine.config.option import Option

if TYPE_CHECKING:
    from mini_engine.config.engine_config import EngineConfig

DEFAULT_BLOCK_SIZE = 16


class DFlash(Speculative):
    name = "dflash"
    options = (
        Option("block_size", int, None, "DFLASH draft block (default 16)", short="bs", minimum=1, group="dflash"),
        Option("draft_window", int, None, "DFLASH compact draft cache window", short="dw", minimum=1,
               group="dflash"),
    )
    draft_axis = "block_size"
    delays_admission = True  # SGLang's spec_algorithm.is_dflash_family()

    def resolve(self, cfg: EngineConfig) -> None:
        if cfg.block_size is None:
            cfg.block_size = DEFAULT_BLOCK_SIZE
        check_positive("block_size", cfg.block_size)
        if cfg.draft_window is not None:
            check_positive("draft_window", cfg.draft_window)

    def step_reserve(self, cfg: EngineConfig) -> int:
        from mini_engine.memory import sizing  # numpy: not needed to build the CLI parser

        return sizing.dflash_reserve(cfg.block_size)

    def max_accept(self, cfg: EngineConfig) -> int:
        return cfg.block_size  # the last verified token + block_size - 1 drafts

    def num_draft_tokens(self, cfg: EngineConfig) -> int:
        return cfg.block_size  # SGLang verifies the whole block

    def make_drafter(self, cfg: EngineConfig, draft_model, cache, temperature: float, attend, gen):
        from mini_engine.spec.dflash import DFlashDrafter  # numpy, torch: optional, loaded only on this path

        return DFlashDrafter(draft_model, cache, cfg.block_size, cfg.draft_window, temperature, attend, gen)

    def sglang_spec(self, options: dict[str, Any]) -> tuple[str, int, int, int] | None:
        bs = options.get("block_size")
        # SGLang forces steps 1 and topk 1 for DFLASH; its draft tokens are the block.
        return ("DFLASH", 1, 1, bs) if isinstance(bs, int) else None
