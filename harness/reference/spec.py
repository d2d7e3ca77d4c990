"""The speculative algorithm a reference run drives: SGLang's name and arguments, and the
draft input its worker leaves on a batch after every forward.

Scheduler.run_batch sets ``batch.spec_info`` to the worker's ``next_draft_input`` after
each forward of a spec-v2 algorithm (under overlap with ``future_indices``, the batch's
rows). The reference's stand-in gives the same class with tensors of the right batch
length: the loop only filters and merges them; SGLang's own reservation
(``prepare_for_decode``) and commit (``_resolve_spec_v2_tokens``) do the accounting.
"""

from __future__ import annotations

import importlib
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
    """A fresh next_draft_input of ``bs`` rows for ``spec``: DFLASH's worker's own
    constructor (make_draft_input_v2, with no top-k or hidden-state columns: the rows of a
    PD decode node's prebuilt batch, built by the same function, merge with them)."""
    torch = sg.torch
    if spec.algorithm == "DFLASH":
        common = importlib.import_module("sglang.srt.speculative.draft_worker_common")
        zeros = torch.zeros((bs,), dtype=torch.int64)
        return common.make_draft_input_v2(bonus_tokens=zeros, new_seq_lens=zeros)
    rows = dict(topk_p=torch.zeros((bs, topk)), topk_index=torch.zeros((bs, topk), dtype=torch.int64),
                bonus_tokens=torch.zeros((bs,), dtype=torch.int64), hidden_states=torch.zeros((bs, 1)))
    return sg.eagle.EagleDraftInput(**rows)
