"""The decode step: plan, forward and result processing of one decode batch.

Per decode step the host plans everything before the backend runs, in SGLang's
order: whether the batch fits (retracting until it does), the SWA window eviction,
the reservation (``prepare`` with the algorithm's reserve, or 1 slot for plain
decode), the batch arrays (filter/merge as requests leave and join); after the
verify, the commit. Under overlap scheduling the previous step's result lands
between the plan and the forward (mini_engine.scheduler.overlap). The batch arrays evolve by
those steps alone (filter, merge, the planned extents, the accepted counts), so
K10 checks the engine's bookkeeping against the request states.

DecodeStep holds what a decode step needs (the scheduler, the manager, the backend's
batch builder, the stats, the running batch) and the one piece of state it alone
writes: the result in flight and what it was launched with.
"""

from __future__ import annotations

import time
from collections import deque
from operator import attrgetter

import numpy as np
# numpy loads numpy.ma lazily inside the first np.unique (the page frees use it);
# loading it with the engine keeps that one-off import out of the host planning time.
import numpy.ma  # noqa: F401

from mini_engine.config.engine_config import EngineConfig
from mini_engine.memory import sizing
from mini_engine.memory.manager import KVManager
from mini_engine.request import Request, Status, Tally
from mini_engine.scheduler.overlap import InFlight, finishing_in_flight, reserved_ahead
from mini_engine.scheduler.scheduler import Scheduler
from mini_engine.decode.batch import DecodeBatch, rows_of
from mini_engine.decode.verify_commit import committed
from mini_engine.forward.backend import Backend, checked_results
from mini_engine.forward.step_batch import BatchBuilder
from mini_engine.stats import Stats

# The outputs column of a batch of requests, one C-level pass.
_OUTPUTS = attrgetter("outputs")


class DecodeStep:
    def __init__(self, cfg: EngineConfig, *, manager: KVManager, sched: Scheduler, backend: Backend,
                 builder: BatchBuilder, stats: Stats, batch: DecodeBatch, tally: Tally, prefill=None):
        self.cfg = cfg
        self.manager = manager
        self.sched = sched
        self.backend = backend
        self.batches = builder
        self.stats = stats
        self.batch = batch
        self._tally = tally  # decoding requests' step counters, by row
        # The prefill step (mini_engine.prefill.step), whose result in flight lands where a decode
        # result would: after this step's plan (overlap; at most one of the two is in flight).
        self.prefill = prefill
        # What every decode step asks of the config (its properties look the algorithm up each time).
        self._spec, self._most = cfg.speculative, cfg.max_accept
        # Overlap scheduling (mini_engine.scheduler.overlap): a decode step's result lands after the
        # next step is planned. Plain decode counts its token committed when it allocates
        # (SGLang's alloc_for_decode), so that part of its result is taken before the plan.
        self.overlap = cfg.rules.overlap
        self.commit_at_alloc = not cfg.algo.stale_under_overlap
        # 0.5.23 leaves the requests its in-flight result finishes out of the plan (and waits
        # for their frees on a short pool); 0.5.18 plans every running request (overlap_plan).
        self.skip_finishing = cfg.rules.overlap_plan == "skip-finishing"
        # 0.5.23 launches a batch whose requests the landing result then finishes, and processes
        # its (skipped) result one step later (profiles.Profile.launch_finished).
        self.launch_finished = cfg.rules.launch_finished
        self.verify_commit = cfg.rules.verify_commit
        # 0.5.18's plain decode plans a request its in-flight result finishes and commits the
        # slot it allocates for it (alloc_for_decode); its release keys that committed length.
        self.commit_planned_finish = self.commit_at_alloc and self.overlap and self.verify_commit == "whole"
        self.inflight: InFlight | None = None
        # By row: tokens committed before their output landed (_commit_in_flight), which
        # SGLang's SWA eviction does not count yet (its pre_len is seqlen - 1, output_ids lag).
        self._lag = np.zeros(manager.mem.max_reqs, dtype=np.int64) if self.overlap and self.commit_at_alloc else None
        # The in-flight step's (releases when it ran, its rows, its result lengths).
        self._launch: tuple = (-1, None, None)

    def run(self, batch: list[Request], step_no: int) -> bool | None:
        """One decode step over the batch: True when it made progress, None when the pool is exhausted."""
        t0 = time.perf_counter()
        # Overlap: a request the in-flight result finishes by length sits this plan out.
        finishing = self._finishing(batch)
        if finishing:
            batch = [r for r in batch if r not in finishing]
            if not batch:
                return self.land()
        if self.commit_at_alloc and self.inflight is not None:
            self._commit_in_flight()
        before = self.manager.rows.allocated.copy()  # every row's extent before the reservation
        # SGLang's order: check and retract on the pools as they are, then evict, then allocate.
        got = self.sched.reserve_decode(batch, wait=bool(finishing), lag=self._lag_now())
        if not got:
            landed = self.land()  # waiting on the frees of the result in flight: no decode batch
            if got is None and not landed:
                return None  # the pool is exhausted
            return landed  # after its frees, the next plan tries again
        if got == self.batch.reqs:  # all counted by row already (bound when they first decoded)
            self._tally.decode_batches[self.batch.arrays.rows] += 1
        else:
            for r in got:
                if r._tally is None:
                    r.bind(self._tally, r.kv.row)
                r.decode_batches += 1
        batch = got
        self.batch.sync(batch, step_no)
        # The batch arrays' rows when they hold exactly this batch (a wrong row there would fail
        # K10's rid check at the end of the step), else read from the requests.
        rows = self.batch.arrays.rows if batch == self.batch.reqs else rows_of(batch)
        self._count_ahead(batch, rows, before)
        if self.commit_planned_finish and self.inflight is not None and self.inflight.committed:
            self._commit_planned_finish(batch, rows)
        landed_s = 0.0
        if self.overlap:
            # SGLang's event_loop_overlap: step N's result is processed after step N+1 is planned.
            # A request it finishes drops out of step N+1 (that result would be skipped).
            released = self.batch.releases
            tl = time.perf_counter()
            self.land()
            landed_s = time.perf_counter() - tl
            if self.batch.releases != released:
                batch = [r for r in batch if r.status is Status.RUNNING and r.kv is not None]
                rows = rows_of(batch)
        t1 = time.perf_counter()
        results = self._forward(batch, rows) if batch else []
        t2 = time.perf_counter()
        lens = np.fromiter(map(len, results), dtype=np.int64, count=len(results))
        if self.overlap:
            # A batch the landing result emptied still ran in SGLang (launch_finished): its
            # result, holding no request that still runs, is processed next step.
            self.inflight = InFlight(batch, results) if batch or self.launch_finished else None
            self._launch = (self.batch.releases, rows, lens)
        else:
            self._process(batch, results, lens, rows)
        # Host time, the forward excluded: the plan (retract, evict, reserve and allocate, the
        # batch arrays) apart from the result processing (commits, outputs, finishes), which
        # under overlap runs inside the plan's span (the landing of the previous result).
        stats = self.stats
        stats.plan_s += (t1 - t0) - landed_s
        stats.result_s += landed_s + (time.perf_counter() - t2)
        self.stats.decode_steps += 1
        return True

    def _forward(self, batch: list[Request], rows: np.ndarray) -> list[list[int]]:
        if self._spec:
            return checked_results(self.backend.forward(self.batches.verify(batch, rows)), len(batch))
        return [[t] for t in checked_results(self.backend.forward(self.batches.decode(batch, rows)), len(batch))]

    def _all_live(self) -> bool:
        """Nobody was released since the result in flight ran: every request of it still runs
        on the KV state (and row) it ran with, so InFlight.live() keeps them all."""
        return self.batch.releases == self._launch[0]

    def _finishing(self, batch: list[Request]) -> list[Request]:
        """finishing_in_flight over the batch, read from the rows' remaining outputs; with a
        prefill result in flight, the batch's requests whose first output is their last."""
        inflight = self.inflight
        if not self.skip_finishing:
            return []
        if inflight is None:
            pending = self.prefill.inflight if self.prefill is not None else None
            if pending is None:
                return []
            ids = {id(r) for r in pending.finishing()}
            return [r for r in batch if id(r) in ids] if ids else []
        if not inflight.batch:  # a batch that ran for requests already finished (launch_finished)
            return []
        if not self._all_live():
            return finishing_in_flight(batch, inflight)
        left = self.batch.left_rows[self._launch[1]]
        if int(left.min()) > 1:  # nobody's next output finishes it (most steps)
            return []
        hits = np.flatnonzero(left <= 1)
        fin = [inflight.batch[i] for i in hits.tolist()]
        if inflight.batch == batch:
            return fin
        ids = {id(r) for r in batch}
        return [r for r in fin if id(r) in ids]

    def _count_ahead(self, batch: list[Request], rows: np.ndarray, before: np.ndarray) -> None:
        """Slots reserved past the true committed lengths (the in-flight result counted).

        overlap.reserved_ahead over the batch in vector passes while every request of the
        result in flight still runs; before: every row's extent before the reservation."""
        inflight = self.inflight
        if inflight is not None and not self._all_live():
            # Someone was released since the result in flight ran: overlap's rule, per request.
            prior = {r.rid: int(before[r.kv.row]) for r in batch}
            self._add_ahead(*reserved_ahead(batch, prior, inflight.landing()))
            return
        kv = self.manager.rows
        alloc = kv.allocated[rows]
        ahead = alloc - kv.committed[rows]
        extra = extra_slots = 0
        if inflight is not None and not inflight.committed:  # committed: plain decode took it before the plan
            left = self.batch.left_rows[rows]
            if inflight.batch == batch:
                # The result commits min(accepted, remaining) for each request of this very batch;
                # it finishes those it gives their remaining (none, most steps: one check).
                lens = self._launch[2]
                land = np.minimum(lens, left)
                done = None if int((left - lens).min()) > 0 else (land > 0) & (land == left)
            else:
                # A request of this batch that ran in it has the same row (nobody was released since).
                _, ran_rows, lens = self._launch
                by_row = np.zeros(len(kv.allocated), dtype=np.int64)
                by_row[ran_rows] = np.minimum(lens, self.batch.left_rows[ran_rows])
                land = by_row[rows]
                done = (land > 0) & (land == left)  # the result in flight finishes it
            ahead -= land
            if done is not None and done.any():
                extra = int(done.sum())
                extra_slots = int((alloc[done] - before[rows[done]]).sum())
        self._add_ahead(int(ahead.sum()), extra, extra_slots)

    def _add_ahead(self, ahead: int, extra: int, extra_slots: int) -> None:
        stats = self.stats
        stats.peak_reserved_ahead_slots = max(stats.peak_reserved_ahead_slots, ahead)
        stats.reserved_ahead_slots_sum += ahead
        stats.overlap_extra_reservations += extra
        stats.overlap_extra_slots += extra_slots

    def _commit_in_flight(self) -> None:
        """Plain decode under overlap: the in-flight step's token counts as committed before
        the next plan (SGLang's alloc_for_decode advanced kv_committed_len when it allocated
        it), while its outputs, finishes and frees land after that plan (_land)."""
        inflight = self.inflight
        if inflight.committed:
            return
        if self._all_live():  # every request of it still runs on its row (most steps)
            _, rows, lens = self._launch
            reqs, left = inflight.batch, self.batch.left_rows[rows]
        else:
            keep = inflight.live()  # a request retracted since it ran has its result dropped
            reqs = [inflight.batch[i] for i in keep]
            rows, lens = rows_of(reqs), self._launch[2][keep]
            left = np.fromiter((r.remaining for r in reqs), dtype=np.int64, count=len(reqs))
        n = np.minimum(lens, left)  # cut at the output limit
        self.manager.commit_batch(reqs, n, rows)
        self.batch.commit(reqs, n, in_order=False)
        inflight.committed = True
        self._lag[:] = 0
        self._lag[rows] = n

    def _commit_planned_finish(self, batch: list[Request], rows: np.ndarray) -> None:
        """Plain decode under 0.5.18 (every running request planned): a request that the
        result in flight finishes is planned and allocated a slot all the same, and
        alloc_for_decode commits that slot; 0.5.18's release hands the tree the committed
        length uncapped (verify_commit "whole"), so the slot reaches the tree."""
        left = self.batch.left_rows[rows]
        if not len(left) or int(left.min()) > 1:  # the usual step: none is one token from its limit
            return
        inflight = self.inflight
        ran = self._launch[1] if self._all_live() else rows_of([inflight.batch[i] for i in inflight.live()])
        hit = np.flatnonzero((left <= 1) & np.isin(rows, ran))
        if not len(hit):
            return
        reqs = [batch[i] for i in hit.tolist()]
        ones = np.ones(len(reqs), dtype=np.int64)
        self.manager.commit_batch(reqs, ones, rows[hit])
        self.batch.commit(reqs, ones, in_order=False)

    def _lag_now(self) -> np.ndarray | None:
        """The rows' committed tokens whose outputs are still in flight (None: none lag)."""
        if self._lag is None or self.inflight is None or not self.inflight.committed:
            return None
        return self._lag

    def land(self) -> bool:
        """Process the result in flight, decode or prefill, if any (overlap). True when one landed."""
        if self.prefill is not None and self.prefill.land():
            return True
        inflight, self.inflight = self.inflight, None
        if inflight is None:
            return False
        _, rows, lens = self._launch
        if self._all_live():
            self._process(inflight.batch, inflight.results, lens, rows, commit=not inflight.committed)
            return True
        keep = inflight.live()  # a request retracted since it ran has its result dropped
        self._process([inflight.batch[i] for i in keep], [inflight.results[i] for i in keep], lens[keep],
                      commit=not inflight.committed)
        return True

    def _process(self, batch: list[Request], results: list[list[int]], lens: np.ndarray | None = None,
                 rows: np.ndarray | None = None, commit: bool = True) -> None:
        """A decode step's result: commit what each request accepted, finish those at their limit.

        One numpy pass over the batch for the lengths; per request only the token lists
        (and the rare finish). lens: each result's length; rows: the requests' rows.
        commit=False: the commits were taken before (plain decode under overlap)."""
        k = len(batch)
        if not k:
            return
        cfg, stats = self.cfg, self.stats
        if lens is None:
            lens = np.fromiter(map(len, results), dtype=np.int64, count=k)
        most = self._most
        if int(lens.min()) < 1 or int(lens.max()) > most:
            i = int(np.flatnonzero((lens < 1) | (lens > most))[0])
            raise RuntimeError(f"backend returned {int(lens[i])} tokens for request {batch[i].rid} "
                               f"(allowed 1..{most})")
        if rows is None:
            rows = rows_of(batch)
        left = self.batch.left_rows[rows]
        room = left - lens  # below 0: the output limit cuts the accepted run; 0 or below: it finishes
        ends = int(room.min()) <= 0
        if ends:
            over = room < 0  # the limit cuts the accepted run
            n = np.minimum(lens, left)
            room = left - n
            # What the verify commits: its overshoot past the limit too under "owned" (verify_commit).
            kept = committed(lens, left, self.verify_commit) if self._spec else n
            if over.any():
                results = list(results)
                for i in np.flatnonzero(over).tolist():
                    if self.verify_commit == "whole":  # 0.5.18 keys the tree on them (verify_commit)
                        batch[i].beyond = results[i][int(left[i]):]
                    results[i] = results[i][: int(left[i])]
        else:
            n = kept = lens
        out = int(n.sum())  # output tokens
        in_order = batch == self.batch.reqs  # the batch arrays hold this batch, in its order
        # SGLang's decode result processing: the finished requests' frees form one group.
        with self.manager.free_group():
            if commit:
                self.manager.commit_batch(batch, kept, rows)
            self.batch.left_rows[rows] = room
            deque(map(list.extend, self.batch.outs if in_order else map(_OUTPUTS, batch), results), maxlen=0)
            if self._spec:
                # tau counts what the verify accepted, even past the output limit; every request
                # here decoded, so counts by row (Request.bind)
                tally = self._tally
                tally.spec_steps[rows] += 1
                tally.accepted[rows] += lens
                stats.spec_verifies += k
                stats.accepted_tokens += out if n is lens else int(lens.sum())
            if cfg.draft_window is not None:
                # K9 itself is an audit check (memory.audit.pool_checks); this only counts the peak.
                stats.peak_compact_draft_len = max(stats.peak_compact_draft_len, *(
                    sizing.compact_draft_len(c, cfg.draft_window, cfg.page_size)
                    for c in self.manager.rows.committed[rows].tolist()))
            if ends:
                for i in np.flatnonzero(room == 0).tolist():
                    self.sched.finish(batch[i])
        if commit:
            self.batch.commit(batch, kept, in_order)
        stats.output_tokens += out
