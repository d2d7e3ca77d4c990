"""The prefill step: launch of one prefill batch, and the processing of its result.

The launch runs the forward over the batch's chunks and takes what SGLang takes when
it allocates (alloc_for_extend sets kv_committed_len to the chunk's end): the chunks'
KV is committed and each request's prefilled length moves on. The result, in one free
group as SGLang's process_batch_result_prefill: each request whose prompt is done gets
its first output token, finishes there if that was its last, else the prefix tree takes
its committed prompt (checkpoint_kv_cache); a request cut mid-prompt is checkpointed as
well (its chunk is in the tree before the next pass).

PrefillStep holds what a prefill needs (the manager, the scheduler, the backend's
batch builder, the stats).
"""

from __future__ import annotations

from dataclasses import dataclass

from mini_engine.backend import Backend, checked_results
from mini_engine.memory.manager import KVManager
from mini_engine.prefix_admission import checkpoint_prefill
from mini_engine.scheduler import PrefillChunk, Scheduler
from mini_engine.stats import Stats
from mini_engine.step_batch import BatchBuilder


@dataclass
class PrefillResult:
    """A launched prefill batch: its chunks and what the forward gave each (a first output
    token where the chunk ends the prompt, else None)."""

    chunks: list[PrefillChunk]
    tokens: list


class PrefillStep:
    def __init__(self, *, manager: KVManager, sched: Scheduler, backend: Backend, builder: BatchBuilder,
                 stats: Stats):
        self.manager = manager
        self.sched = sched
        self.backend = backend
        self.batches = builder
        self.stats = stats

    def run(self, chunks: list[PrefillChunk]) -> None:
        """Launch the batch (forward, commit) and process its result."""
        reqs = [c.req for c in chunks]
        toks = checked_results(self.backend.forward(self.batches.prefill(reqs, [c.start for c in chunks],
                                                                         [c.end for c in chunks])), len(reqs))
        stats = self.stats
        stats.prefill_steps += 1
        for c in chunks:
            self.manager.commit(c.req.kv, c.end - c.start)  # alloc_for_extend: committed at launch
            c.req.prefilled = c.end
            stats.prefill_tokens += c.end - c.start
        self._process(PrefillResult(chunks, toks))

    def _process(self, result: PrefillResult) -> None:
        """SGLang's process_batch_result_prefill: one free group over the batch's finishes and
        checkpoints."""
        with self.manager.free_group():
            for c, tok in zip(result.chunks, result.tokens):
                r = c.req
                if tok is not None:
                    r.outputs.append(int(tok))
                    self.stats.output_tokens += 1
                    if r.remaining <= 0:
                        self.sched.finish(r)
                        continue
                checkpoint_prefill(self.manager, r)  # the prefix tree takes the committed prefix
