"""Request: what a client asked for and how far the engine got.

Token ids live here; KV accounting lives in ``kv`` (the memory layer's
ReqKVState), which exists only while the request holds a req_to_token row.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from mini_engine.errors import ConfigError

COUNTERS = ("decode_batches", "spec_steps", "accepted")


class Tally:
    """Per-row step counters of the requests in the decode batch, so a step moves them all
    in one numpy pass. A request bound to a row reads its counters through it (Request.bind)."""

    def __init__(self, rows: int):
        import numpy as np  # here, not at import: the CLI's parser reads this package without numpy (the ci role)

        for name in COUNTERS:
            setattr(self, name, np.zeros(rows, dtype=np.int64))


def _counter(name: str, doc: str) -> property:
    own = "_" + name

    def get(self) -> int:
        tally = self._tally
        return getattr(self, own) + (int(getattr(tally, name)[self._row]) if tally is not None else 0)

    def put(self, value: int) -> None:
        tally = self._tally
        setattr(self, own, value - (int(getattr(tally, name)[self._row]) if tally is not None else 0))

    return property(get, put, doc=doc)


class Status(enum.Enum):
    WAITING = "waiting"  # queued (new, or retracted and waiting to recompute)
    RUNNING = "running"  # holds a row: prefilling or decoding
    FINISHED = "finished"
    # Ended by SGLang before it ran (FINISH_ABORT): a PD arrival whose SWA tail the
    # decode side could not reclaim (0.5.23's pop_preallocated).
    ABORTED = "aborted"


@dataclass(eq=False)  # identity: two requests are never "equal" by their fields
class Request:
    rid: int
    prompt: list[int]
    max_new_tokens: int
    # > 0: a PD arrival whose first fill_len tokens (the prompt) were prefilled on
    # another node; the decode side preallocates them and receives their KV.
    fill_len: int = 0
    # Engine step at which the request becomes visible to the scheduler.
    arrival_step: int = 0
    outputs: list[int] = field(default_factory=list)
    # Ids a verify accepted past max_new_tokens: never outputs (no client sees them), but
    # 0.5.18's release keys the tree on them (mini_engine/decode/verify_commit.py, "whole").
    beyond: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    kv: Any = None  # ReqKVState while RUNNING
    # Positions [0, prefill_target) must have KV before decoding; prefilled of them are done.
    prefill_target: int = 0
    prefilled: int = 0
    retractions: int = 0
    # The step counters below (properties) keep their value here while no Tally is bound.
    _decode_batches: int = field(default=0, repr=False)
    _spec_steps: int = field(default=0, repr=False)
    _accepted: int = field(default=0, repr=False)
    _tally: Any = field(default=None, repr=False, compare=False)
    _row: int = field(default=-1, repr=False)

    # Decode batches this request has been in since it (re)started: SGLang evicts SWA
    # only from the second one (the first may still overlap the prefill).
    decode_batches = _counter("decode_batches", "decode batches since the request (re)started")
    spec_steps = _counter("spec_steps", "speculative verifies over the request's life")
    accepted = _counter("accepted", "tokens accepted over all spec steps, bonus included")

    def bind(self, tally: Tally, row: int) -> None:
        """Count from now on in tally's row (which starts from 0 for this request)."""
        self.unbind()
        for name in COUNTERS:
            getattr(tally, name)[row] = 0
        self._tally, self._row = tally, row

    def unbind(self) -> None:
        """Fold the row's counts back into the request and leave the row."""
        tally = self._tally
        if tally is None:
            return
        for name in COUNTERS:
            arr = getattr(tally, name)
            setattr(self, "_" + name, getattr(self, "_" + name) + int(arr[self._row]))
            arr[self._row] = 0
        self._tally, self._row = None, -1

    @property
    def seq_len(self) -> int:
        return len(self.prompt) + len(self.outputs)

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.outputs)

    @property
    def prefilling(self) -> bool:
        return self.prefilled < self.prefill_target

    @property
    def is_pd(self) -> bool:
        return self.fill_len > 0

    def tokens(self, start: int, end: int) -> list[int]:
        """Token ids of positions [start, end) of prompt + outputs."""
        n = len(self.prompt)
        if end <= n:
            return self.prompt[start:end]
        if start >= n:
            return self.outputs[start - n : end - n]
        return self.prompt[start:] + self.outputs[: end - n]

    def last_token(self) -> int:
        return self.outputs[-1] if self.outputs else self.prompt[-1]


def check_context(rid: int, prompt_len: int, max_new_tokens: int, max_context: int) -> None:
    """A request longer than max_context is bad input: raise the one-line ConfigError."""
    total = prompt_len + max_new_tokens
    if total > max_context:
        raise ConfigError(f"max_context={max_context} is below request {rid}: prompt {prompt_len} + "
                          f"output {max_new_tokens} = {total} tokens; raise max_context")
