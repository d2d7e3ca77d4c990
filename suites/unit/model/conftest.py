"""Helpers of the model suites: tiny models, managers, workloads."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.config.shapes import named_shape
from mini_engine.model.transformer import Transformer
from mini_engine.request import Request

LONG = os.environ.get("KVBENCH_HYPOTHESIS") == "long"
MACHINE_SETTINGS = settings(
    max_examples=100 if LONG else 15,
    stateful_step_count=80 if LONG else 30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def tiny(pattern: str = "1:1", window: int = 8, dtype: str = "float32", seed: int = 0) -> Transformer:
    cfg = replace(named_shape("tiny"), dtype=dtype, seed=seed).with_pattern(pattern, window)
    return Transformer(cfg)


def manager(ps: int, num_pages: int, *, max_reqs: int = 4, row_width: int = 512, window: int | None = 8,
            policy: str = "aligned") -> KVManager:
    mem = MemoryConfig(ps, num_pages, max_reqs, row_width, policy=policy,
                       swa_num_pages=num_pages if window else None, window=window)
    return KVManager(mem, Auditor("raise" if policy == "aligned" else "record"))


def requests(n: int, seed: int, vocab: int = 1024, prompt=(4, 40), out=(4, 24), fill: bool = False) -> list[Request]:
    rng = np.random.default_rng(seed)
    reqs = []
    for i in range(n):
        prompt_ids = rng.integers(0, vocab, int(rng.integers(*prompt))).tolist()
        r = Request(rid=i, prompt=prompt_ids, max_new_tokens=int(rng.integers(*out)))
        if fill:
            r.fill_len = len(prompt_ids)
        reqs.append(r)
    return reqs


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A Llama-architecture checkpoint written to disk (not the built-in tiny weights)."""
    from mini_engine.model.loader import save_checkpoint

    cfg = replace(named_shape("tiny"), architecture="llama", qk_norm=False, tie_embeddings=True, seed=7,
                  vocab_size=512, rope_theta=50000.0)
    model = Transformer(cfg)
    return save_checkpoint(model, cfg, tmp_path_factory.mktemp("ckpt") / "tiny-llama")
