"""DFLASH: one forward drafts a block of `block_size` tokens (the root plus masks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mini_engine.algos.speculative import Speculative
from mini_engine.errors import check_positive
if TYPE_CHECKING:
    from mini_engine.config import EngineConfig

DEFAULT_BLOCK_SIZE = 16


class DFlash(Speculative):
    name = "dflash"
    options = {"block_size": DEFAULT_BLOCK_SIZE, "draft_window": None}
    key_fields = (("block_size", "bs"), ("draft_window", "dw"))

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
