"""NGRAM (SGLang 0.5.23): drafts from a token-trie corpus lookup, no draft model.

What the accounting needs, read from SGLang 0.5.23 (server args `_handle_ngram`,
`allocation_sizing.get_alloc_len_per_decode`, `spec_utils.spec_prepare_for_decode`):

* topk is `--speculative-ngram-max-bfs-breadth` (default 10), num_draft_tokens
  defaults to 12, steps to `num_draft_tokens // topk` (SGLang reads 0 as 1).
* NGRAM writes no draft KV (`has_draft_kv()` is false: the tree lives only in the
  verify mask), so one step's length is `max(steps * topk, num_draft_tokens)`, with
  none of EAGLE's per-topk page rounding; the reserve doubles it.
* The reservation is planned by EAGLE's `eagle_prepare_for_decode` (page-aligned
  `page_aligned_decode_alloc_lens`), so a profile aligns it as it aligns EAGLE's:
  its writer is `eagle` (the `--align` knob, the trace's prepare records).
* The tree is node-budgeted with no depth cap: one long match may chain every draft
  token, so a verify accepts at most num_draft_tokens (the bonus included).

Accounting only: kvbench has no corpus drafter, so it runs with `--model none`
and the seeded simulated acceptance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mini_engine.algos.eagle import Eagle
from mini_engine.algos.speculative import Speculative
from mini_engine.errors import ConfigError, check_positive

if TYPE_CHECKING:
    from mini_engine.config.engine_config import EngineConfig

DEFAULT_BREADTH = 10  # SGLang's speculative_ngram_max_bfs_breadth
DEFAULT_DRAFT_TOKENS = 12


class Ngram(Speculative):
    name = "ngram"
    writer = "eagle"
    # SGLang's own flags for NGRAM are EAGLE's (topk, steps, num_draft_tokens): shared options.
    options = Eagle.options
    draft_axis = "num_draft_tokens"

    def resolve(self, cfg: EngineConfig) -> None:
        if cfg.model != "none":
            raise ConfigError(f"spec=ngram is accounting-only (no corpus drafter): use model=none "
                              f"(got model={cfg.model!r})")
        cfg.topk = check_positive("topk", DEFAULT_BREADTH if cfg.topk is None else cfg.topk)
        ndt = DEFAULT_DRAFT_TOKENS if cfg.num_draft_tokens is None else cfg.num_draft_tokens
        cfg.num_draft_tokens = check_positive("num_draft_tokens", ndt, minimum=2)
        # SGLang: steps = num_draft_tokens // topk, and its sizing reads 0 as 1.
        cfg.steps = check_positive("steps", max(1, cfg.num_draft_tokens // cfg.topk) if cfg.steps is None
                                   else cfg.steps)

    def step_length(self, cfg: EngineConfig) -> int:
        """SGLang's get_alloc_len_per_decode for NGRAM: no per-topk page rounding."""
        return max(cfg.steps * cfg.topk, cfg.num_draft_tokens)

    def step_reserve(self, cfg: EngineConfig) -> int:
        return 2 * self.step_length(cfg)  # the double buffer of get_alloc_reserve_per_decode

    def max_accept(self, cfg: EngineConfig) -> int:
        return cfg.num_draft_tokens

    def num_draft_tokens(self, cfg: EngineConfig) -> int:
        return cfg.num_draft_tokens

    def sglang_spec(self, options: dict[str, Any]) -> tuple[str, int, int, int] | None:
        keys = ("steps", "topk", "num_draft_tokens")
        if not all(isinstance(options.get(k), int) for k in keys):
            return None
        return ("NGRAM", *(options[k] for k in keys))
