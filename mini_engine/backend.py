"""The backend protocol: what the engine loop asks of a model.

The engine has already planned and reserved every slot through the memory layer
before it calls a backend; a backend only writes KV into those slots (reading them
with ``manager.slots(req.kv, start, end)`` or its own device mirror of req_to_token) and
returns token ids. It never allocates or frees.
"""

from __future__ import annotations

import importlib
from typing import Protocol, runtime_checkable

from mini_engine.config import EngineConfig
from mini_engine.request import Request


@runtime_checkable
class Backend(Protocol):
    def attach(self, manager) -> None:
        """Called once before the first step with the run's KVManager."""

    def prefill(self, reqs: list[Request], starts: list[int], ends: list[int]) -> list[int | None]:
        """Write KV of positions [start, end) of each request's prompt + outputs.

        Returns the next token for a request whose prefill target is reached
        (``end == req.prefill_target``), else None.
        """

    def decode(self, reqs: list[Request]) -> list[int]:
        """Plain decode: write KV of position seq_len - 1, return one token each."""

    def spec_step(self, reqs: list[Request]) -> list[list[int]]:
        """Draft + verify from position seq_len - 1; accepted tokens, bonus included (>= 1 each)."""

    def transfer(self, reqs: list[Request]) -> list[int]:
        """PD arrivals: receive the KV of [0, fill_len) and return the prefill side's first token."""

    def release(self, req: Request) -> None:
        """The request left the running batch (finished or retracted); drop any per-request state."""


def create_backend(cfg: EngineConfig) -> Backend:
    if cfg.model == "none":
        from mini_engine.spec.simulated import SimulatedBackend

        return SimulatedBackend(cfg)
    # Imported lazily: the accounting-only path must not pay for (or need) the model code.
    module = importlib.import_module("mini_engine.model.backend")
    return module.ModelBackend(cfg)
