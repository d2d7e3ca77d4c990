"""The backend protocol: what the engine loop asks of a model.

The engine has already planned and reserved every slot through the memory layer
before it calls a backend, and hands it one typed ``StepBatch`` per forward
(mini_engine.forward.step_batch): the positions to write, the host slots to read, their SWA
copies, the table writes a device mirror needs. A backend reads the batch alone; it
never holds the KV manager, never allocates and never frees.
"""

from __future__ import annotations

import importlib
from typing import Protocol, runtime_checkable

from mini_engine.config.engine_config import EngineConfig
from mini_engine.request import Request
from mini_engine.forward.accounting import SimulatedBackend
from mini_engine.forward.step_batch import Layout, StepBatch


@runtime_checkable
class Backend(Protocol):
    # The phases whose batches carry host slot rows (and their SWA copies), and the
    # backend's device copy of req_to_token, if it keeps one (None: the decode batches
    # carry no table writes). Read once, when the engine builds its BatchBuilder.
    reads: frozenset
    mirror: object | None

    def setup(self, layout: Layout) -> None:
        """Called once before the first step with the run's pool sizes."""

    def forward(self, batch: StepBatch) -> list:
        """One forward; one result per request, in batch order, by phase:

        prefill: the next token when the chunk ends the prompt (``end == req.prefill_target``), else None;
        decode: one token; verify: the accepted tokens, bonus included (>= 1);
        transfer: the prefill side's first token.
        """

    def release(self, req: Request) -> None:
        """The request left the running batch (finished or retracted); drop any per-request state."""


def checked_results(results: list, n: int) -> list:
    """A forward's results, one per request of its batch (else a RuntimeError)."""
    # zip() would drop the missing ones silently and the loop would wait on them forever.
    if len(results) != n:
        raise RuntimeError(f"backend returned {len(results)} results for a batch of {n}")
    return results


def create_backend(cfg: EngineConfig) -> Backend:
    if cfg.model == "none":
        return SimulatedBackend(cfg)
    # Imported lazily: the accounting-only path must not pay for (or need) the model code.
    module = importlib.import_module("mini_engine.model.backend")
    return module.ModelBackend(cfg)
