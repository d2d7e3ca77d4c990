"""The speculative algorithm a reference run drives: SGLang's name and arguments, and the
draft input its worker leaves on a batch after every forward.

Scheduler.run_batch sets ``batch.spec_info`` to the worker's ``next_draft_input`` after
each forward of a spec-v2 algorithm (under overlap with ``future_indices``, the batch's
rows). The reference's stand-in gives the same class with tensors of the right batch
length: the loop only filters and merges them; SGLang's own reservation
(``prepare_for_decode``) and commit (``_resolve_spec_v2_tokens``) do the accounting.
"""

from __future__ import annotations

from dataclasses import dataclass

SUPPORTED = ("none", "dflash", "eagle")


@dataclass(frozen=True)
class Spec:
    algorithm: str  # SGLang's --speculative-algorithm
    server_args: dict  # what ServerArgs takes for it
    stride: int  # a verify's output row width: speculative_num_draft_tokens
    bigram: bool  # EAGLE's tree keys (SGLang's is_eagle)


def spec_of(cfg) -> Spec | None:
    """The Spec of a validated EngineConfig (None: plain decoding)."""
    if cfg.spec == "dflash":
        return Spec("DFLASH", dict(speculative_algorithm="DFLASH", speculative_draft_model_path="dummy",
                                   speculative_num_draft_tokens=cfg.block_size), cfg.block_size, False)
    if cfg.spec == "eagle":
        return Spec("EAGLE", dict(speculative_algorithm="EAGLE", speculative_draft_model_path="dummy",
                                  speculative_num_steps=cfg.steps, speculative_eagle_topk=cfg.topk,
                                  speculative_num_draft_tokens=cfg.num_draft_tokens), cfg.num_draft_tokens, True)
    return None


def draft_input(sg, spec: Spec, bs: int, topk: int = 1):
    """A fresh next_draft_input of ``bs`` rows for ``spec``."""
    torch = sg.torch
    rows = dict(topk_p=torch.zeros((bs, topk)), topk_index=torch.zeros((bs, topk), dtype=torch.int64),
                bonus_tokens=torch.zeros((bs,), dtype=torch.int64), hidden_states=torch.zeros((bs, 1)))
    if spec.algorithm == "DFLASH":
        return sg.dflash.DFlashDraftInputV2(new_seq_lens=torch.zeros((bs,), dtype=torch.int64), **rows)
    return sg.eagle.EagleDraftInput(**rows)
