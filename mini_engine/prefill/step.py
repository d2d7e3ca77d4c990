"""The prefill step: launch of one prefill batch, and the processing of its result.

The launch runs the forward over the batch's chunks and takes what SGLang takes when
it allocates (alloc_for_extend sets kv_committed_len to the chunk's end): the chunks'
KV is committed and each request's prefilled length moves on, so the next pass sees a
chunked request continue and a request done with its prompt decode. The result, in one
free group as SGLang's process_batch_result_prefill: each request whose prompt is done
gets its first output token, finishes there if that was its last, else the prefix tree
takes its committed prompt (checkpoint_kv_cache), which frees the request's copies of
pages the tree already held.

Under overlap scheduling (SGLang's event_loop_overlap, the SGLang profiles' default)
the result is processed one iteration late, as a decode step's is: the next batch,
prefill or decode, is formed (admission, prefix matching, allocation) before it lands
(land). So the next pass matches nothing this batch computed, and the duplicate pages
of a shared prefix stay held through the next allocation. Two prefills in a row are
overlapped too (SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP is off by default, 0.5.23
and 0.5.18). A request cut mid-prompt is checkpointed at the start of the next pass
instead (stash: get_next_batch_to_run's stash_chunked_request, before its admission),
its result carrying nothing else. A request retracted before its result lands has the
result dropped (SGLang skips a retracted request's). Without overlap the result is
processed at once, the mid-prompt checkpoint with it.

PrefillStep holds what a prefill needs (the manager, the scheduler, the backend's
batch builder, the stats, the running decode batch's remaining outputs) and the one
piece of state it alone writes: the result in flight.
"""

from __future__ import annotations

from dataclasses import dataclass

from mini_engine.config.engine_config import EngineConfig
from mini_engine.memory.manager import KVManager
from mini_engine.request import Request, Status
from mini_engine.scheduler.scheduler import PrefillChunk, Scheduler
from mini_engine.prefill.checkpoint import checkpoint_prefill
from mini_engine.decode.batch import DecodeBatch
from mini_engine.forward.backend import Backend, checked_results
from mini_engine.forward.step_batch import BatchBuilder
from mini_engine.stats import Stats


@dataclass
class PrefillResult:
    """A launched prefill batch: its chunks, what the forward gave each (a first output
    token where the chunk ends the prompt, else None) and each request's KV state then."""

    chunks: list[PrefillChunk]
    tokens: list
    states: list

    def live(self, i: int) -> bool:
        """Whether chunk i's request still runs on the state it ran with (not retracted since)."""
        r = self.chunks[i].req
        return r.status is Status.RUNNING and r.kv is self.states[i] and r.kv is not None

    def finishing(self) -> list[Request]:
        """Requests whose first output, in this result, is their last (SGLang's
        next_output_finishes_by_length over the queued batch's requests)."""
        return [c.req for i, (c, tok) in enumerate(zip(self.chunks, self.tokens))
                if tok is not None and self.live(i) and len(c.req.outputs) + 1 >= c.req.max_new_tokens]


class PrefillStep:
    def __init__(self, cfg: EngineConfig, *, manager: KVManager, sched: Scheduler, backend: Backend,
                 builder: BatchBuilder, stats: Stats, batch: DecodeBatch):
        self.manager = manager
        self.sched = sched
        self.backend = backend
        self.batches = builder
        self.stats = stats
        self.batch = batch
        self.overlap = cfg.rules.overlap
        self.inflight: PrefillResult | None = None
        self._stash: PrefillResult | None = None  # the last batch, whose mid-prompt chunks the next pass checkpoints

    def run(self, chunks: list[PrefillChunk]) -> None:
        """Launch the batch (forward, commit); process its result, or (overlap) hold it in flight."""
        reqs = [c.req for c in chunks]
        toks = checked_results(self.backend.forward(self.batches.prefill(reqs, [c.start for c in chunks],
                                                                         [c.end for c in chunks])), len(reqs))
        stats = self.stats
        stats.prefill_steps += 1
        for c in chunks:
            self.manager.commit(c.req.kv, c.end - c.start)  # alloc_for_extend: committed at launch
            c.req.prefilled = c.end
            stats.prefill_tokens += c.end - c.start
        result = PrefillResult(chunks, toks, [r.kv for r in reqs])
        if self.overlap:
            self.inflight = self._stash = result
        else:
            self._process(result)

    def stash(self) -> None:
        """Overlap, at the start of the pass after a prefill: its requests cut mid-prompt are
        checkpointed (SGLang's stash_chunked_request), before the pass admits anyone."""
        result, self._stash = self._stash, None
        if result is None:
            return
        for i, (c, tok) in enumerate(zip(result.chunks, result.tokens)):
            if tok is None and result.live(i):
                checkpoint_prefill(self.manager, c.req)

    def land(self) -> bool:
        """Process the prefill result in flight, if any (overlap). True when one landed."""
        result, self.inflight = self.inflight, None
        if result is None:
            return False
        self._process(result, landing=True)
        return True

    def _process(self, result: PrefillResult, landing: bool = False) -> None:
        """SGLang's process_batch_result_prefill: one free group over the batch's finishes and
        checkpoints. landing: the result lands late (overlap): a mid-prompt chunk was stashed
        already, a retracted request's result is dropped, and a request that joined the decode
        batch meanwhile has one remaining output less there."""
        took = []
        with self.manager.free_group():
            for i, (c, tok) in enumerate(zip(result.chunks, result.tokens)):
                r = c.req
                if landing and (tok is None or not result.live(i)):
                    continue
                if tok is not None:
                    r.outputs.append(int(tok))
                    self.stats.output_tokens += 1
                    took.append(r)
                    if r.remaining <= 0:
                        self.sched.finish(r, filtered=not landing)
                        continue
                checkpoint_prefill(self.manager, r)  # the prefix tree takes the committed prefix
        if landing and took:
            self.batch.took_output(took)
