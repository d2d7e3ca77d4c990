"""A toy speculative algorithm, registered from outside mini_engine as a plugin would be.

It drafts a chain of ``chain`` tokens and reserves them once ahead of the committed
length (no double buffer), unaligned: the smallest algorithm that exercises every
question the engine asks an algorithm object. test_toy_algo.py loads it with
``KVBENCH_PLUGINS=suites.unit.engine.toy_algo`` and runs it through ``kvbench run``,
a suite grid and ``kvbench compare``; nothing else in the project names it.
"""

from __future__ import annotations

from mini_engine.algos import Algorithm, register
from mini_engine.errors import check_positive
from mini_engine.config.option import Option

DEFAULT_CHAIN = 3


class ToyChain(Algorithm):
    name = "toy"
    speculative = True
    graphable = False
    options = (Option("chain", int, None, "toy: tokens drafted per step (default 3)", short="ch", minimum=1,
                      group="toy"),)

    def resolve(self, cfg) -> None:
        cfg.chain = check_positive("chain", DEFAULT_CHAIN if cfg.chain is None else cfg.chain)

    def step_reserve(self, cfg) -> int:
        return cfg.chain + 1  # the chain and the bonus token

    def max_accept(self, cfg) -> int:
        return cfg.chain + 1

    def num_draft_tokens(self, cfg) -> int:
        return cfg.chain + 1

    def row_headroom(self, cfg, rule: str) -> int:
        return self.step_reserve(cfg) + cfg.page_size - 1


register(ToyChain())
