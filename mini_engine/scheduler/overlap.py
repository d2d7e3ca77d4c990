"""Overlap scheduling: the results of a decode step land one plan late.

SGLang's default loop (Scheduler.event_loop_overlap) plans and launches step N+1
before it processes step N's result. Under speculative decoding the committed
length only advances when a result is processed (the spec-v2 result processing
adds the accepted run to kv_committed_len), so step N+1 is planned from lengths one
step stale:

* the reservation is page_aligned_decode_alloc_lens over those stale lengths
  (allocation_sizing.py): max(cur, ceil_ps(committed_stale + reserve)). The
  reserve of 2 draft blocks is the double buffer that keeps step N+1's verify
  inside the reservation whatever step N accepts;
* a request of step N's batch is left out of step N+1 only when its next output
  finishes it by length (Scheduler._reqs_finishing_inflight with
  Req.next_output_finishes_by_length: outputs + 1 >= max_new_tokens, i.e. it was
  exactly one token short). Any other request that step N finishes still gets
  step N+1's reservation: one more, which its release frees (release_kv_cache's
  over-allocation free, _release_overallocated_kv_indices) when step N's result
  lands, in that result's free group; its step N+1 result is then skipped;
* when the decode reservation cannot be met and such finishing requests exist,
  the step waits for the frees their result brings instead of retracting
  (Scheduler.update_running_batch returns None);
* a retracted request's in-flight result is dropped (it is recomputed);
* a prefill planned while a result is in flight (admission, chunk allocation)
  sees the pages of the requests that result finishes as still held.

Plain decoding is not stale: alloc_for_decode advances the committed length when
it allocates, so the engine counts the in-flight token committed before the next
plan (DecodeStep._commit_in_flight) and the reservation equals the synchronous one. Its
SWA eviction does not: maybe_evict_swa evicts at req.seqlen - 1, whose output_ids
lack the in-flight token, so one decode step later (swa_window.evict_window). It is
overlapped all the same: a request step N finishes is one output short when N+1 is
planned, so it sits N+1 out, and its frees (process_batch_result_decode's free group)
come after N+1's allocation; on a short pool N+1 waits for them. A prefill batch's result lands late the same way, for every algorithm
(mini_engine.prefill.step): the next batch is formed, admission and prefix matching
included, before the first output tokens, the finishes and the checkpoints into the
prefix tree land. The synchronous loop (--disable-overlap-schedule) processes each
result before the next plan. One prefill rule moves too, for every algorithm: with
the chunk cache a chunked prefill evicts SWA only from its third chunk, below what
is prefilled less one chunked_prefill_size (the previous chunk may still run;
chunk_final_len).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

from mini_engine.request import Request, Status

_KV = attrgetter("kv")


@dataclass
class InFlight:
    """A decode step that ran but whose result the host has not processed yet."""

    batch: list[Request]
    results: list[list[int]]
    states: list = field(default_factory=list)  # each request's KV state when it ran
    committed: bool = False  # its commits were taken before the next plan (plain decode)

    def __post_init__(self) -> None:
        self.states = list(map(_KV, self.batch))  # one C-level pass: this runs every decode step

    def live(self) -> list[int]:
        """Positions whose result still lands: the request runs on the KV state it ran with.

        A request retracted since (and perhaps admitted again, on a new state) has its
        result dropped, as SGLang skips a retracted request's result; it is recomputed.
        """
        return [i for i, (r, s) in enumerate(zip(self.batch, self.states))
                if r.status is Status.RUNNING and r.kv is s and s is not None]

    def landing(self) -> dict[int, int]:
        """rid -> tokens the result will commit (cut at the output limit); none once committed."""
        if self.committed:
            return {}
        return {self.batch[i].rid: min(len(self.results[i]), self.batch[i].remaining) for i in self.live()}


def finishing_in_flight(batch: list[Request], inflight: InFlight | None) -> list[Request]:
    """Requests of the in-flight step whose next output finishes them by length: they skip the next plan."""
    if inflight is None:
        return []
    queued = {id(inflight.batch[i]) for i in inflight.live()}
    return [r for r in batch if id(r) in queued and len(r.outputs) + 1 >= r.max_new_tokens]


def reserved_ahead(batch: list[Request], before: dict[int, int], landing: dict[int, int]) -> tuple[int, int, int]:
    """After a reservation (before: rid -> its extent before it): (slots reserved past the true
    committed lengths, summed over the batch; reservations given to requests the in-flight result
    finishes; the slots those reservations added, freed when the result lands).

    The true committed length counts the in-flight result the plan did not see.
    """
    ahead = extra = extra_slots = 0
    for r in batch:
        n = landing.get(r.rid, 0)
        ahead += int(r.kv.allocated) - (int(r.kv.committed) + n)
        if n and n == r.remaining:  # the result in flight finishes it: this reservation is never used
            extra += 1
            extra_slots += int(r.kv.allocated) - before[r.rid]
    return ahead, extra, extra_slots


def chunk_final_len(overlap: bool, extend_batches: int, prefilled: int, chunked_prefill: int) -> int:
    """Positions a chunked prefill may evict below (SGLang's ScheduleBatch.maybe_evict_swa, extend).
    Synchronous: what is prefilled. Under overlap the previous chunk may still be running:
    nothing before the request's third extend batch (extend_batches: its batches so far),
    then what is prefilled less one chunked_prefill_size."""
    if not overlap:
        return prefilled
    if extend_batches < 2:
        return 0
    return max(0, prefilled - chunked_prefill)
