"""The step loop and the public Engine API.

One step is either a prefill step (chunks of admitted prompts) or a decode step
(plain or speculative) over every request that finished its prefill, as in
nano-vllm: prefill first, so admission keeps the batch full. PD arrivals are
preallocated (their KV counts as committed) and transferred at the start of any
step; they join the decode batch of that same step when no prefill runs.

Per decode step the host plans everything before the backend runs, in SGLang's
order: whether the batch fits (retracting until it does), the SWA window eviction,
the reservation (``prepare`` with the algorithm's reserve, or 1 slot for plain
decode), the batch arrays (filter/merge as requests leave and join); after the
verify, the commit. Under overlap scheduling the previous step's result lands
between the plan and the forward (mini_engine.overlap). The batch arrays evolve by
those steps alone (filter, merge, the planned extents, the accepted counts), so
K10 checks the engine's bookkeeping against the request states.
"""

from __future__ import annotations

import enum
import time
import weakref
from collections import deque
from contextlib import nullcontext
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np
# numpy loads numpy.ma lazily inside the first np.unique (the page frees use it);
# loading it here keeps that one-off import out of the host planning time.
import numpy.ma  # noqa: F401

from mini_engine.backend import Backend, create_backend
from mini_engine.config import EngineConfig, require_cuda
from mini_engine.errors import ConfigError, EvictFloorError, InvariantViolation
from mini_engine.memory import sizing
from mini_engine.memory.batch import BatchArrays
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.invariants import Auditor, Violation
from mini_engine.memory.manager import KVManager
from mini_engine.memory.trace import TraceWriter
from mini_engine.overlap import InFlight, finishing_in_flight, reserved_ahead
from mini_engine.request import Request, Status, Tally, check_context
from mini_engine.scheduler import Scheduler
from mini_engine.stats import Stats
from mini_engine.step_batch import BatchBuilder, Layout

MAX_SAMPLES = 20
# Columns of a batch of requests, one C-level pass each.
_KV_ROW, _OUTPUTS = attrgetter("kv.row"), attrgetter("outputs")


def _rows(reqs: list[Request]) -> np.ndarray:
    return np.fromiter(map(_KV_ROW, reqs), dtype=np.int64, count=len(reqs))


class StepOutcome(enum.Enum):
    """What one ``step`` (or ``tick``) did."""

    RAN = "ran"  # work was done: tokens prefilled, decoded or transferred
    STALLED = "stalled"  # a step without progress: its decode batch or a stuck prefill was retracted
    EXHAUSTED = "exhausted"  # nothing fits and nothing can be retracted: the pool is exhausted
    IDLE = "idle"  # tick only: no request waits, runs or is still to arrive; no step ran


@dataclass
class RunResult:
    stats: dict[str, float | int]
    series: dict[str, list[int]]
    violations: dict[str, int]
    violation_samples: list[dict]
    outputs: dict[int, list[int]]
    verdict: str  # ok | violated | pool_exhausted
    error: str | None = None
    requests: list[Request] = field(default_factory=list)


def decode_reserve(cfg: EngineConfig) -> int:
    """The speculative reservation ahead of committed (0 for plain decode)."""
    return cfg.step_reserve if cfg.speculative else 0


def memory_config(cfg: EngineConfig) -> MemoryConfig:
    profile = cfg.rules
    return MemoryConfig(
        page_size=cfg.page_size,
        num_pages=cfg.num_pages,
        max_reqs=cfg.max_running,
        row_width=cfg.max_context + cfg.algo.row_headroom(cfg, profile.row_headroom),
        policy=cfg.policy,
        free_policy=cfg.free_policy,
        swa_num_pages=swa_pages(cfg.num_pages, profile.swa_ratio) if cfg.has_swa else None,
        window=cfg.window if cfg.has_swa else None,
        draft_window=cfg.draft_window,
        algo=cfg.algo.writer_name if cfg.speculative else None,  # the profile writer it plans as
        profile=profile,
    ).validate()


def open_trace(cfg: EngineConfig, path_or_file) -> TraceWriter:
    """The allocation trace writer of an engine built from ``cfg``: its header names
    that engine's pools and options. The caller owns it: open it as a context manager
    around the engine's run, so it is closed (and a crash keeps every line written
    before it) in one place, the caller's ``with``."""
    return TraceWriter.for_memory(path_or_file, memory_config(cfg), cfg.to_dict())


def swa_pages(full_pages: int, ratio: float) -> int:
    """SWA pool pages: the profile's share of the full pool (at least one page)."""
    return max(1, int(full_pages * ratio))


def request_pages(cfg: EngineConfig, prompt_len: int, max_new: int) -> int:
    """Pages one request may hold at its peak: full context plus the decode reservation."""
    tokens = prompt_len + max_new + decode_reserve(cfg)
    # An unaligned writer may leave the tail of a page stranded: one page more.
    return -(-tokens // cfg.page_size) + (0 if cfg.rules.all_aligned else 1)


def admission_pages(cfg: EngineConfig) -> int:
    """Pages admission can count on: the smaller of the two pools (SGLang's min(full, swa))."""
    return min(cfg.num_pages, swa_pages(cfg.num_pages, cfg.rules.swa_ratio)) if cfg.has_swa else cfg.num_pages


class Engine:
    def __init__(self, cfg: EngineConfig, backend: Backend | None = None, *,
                 trace: TraceWriter | None = None):
        self.cfg = cfg
        if cfg.device == "cuda":
            require_cuda()
        self.reserve = decode_reserve(cfg)
        self.mem = memory_config(cfg)
        self.auditor = Auditor(cfg.audit)
        if trace is not None and not isinstance(trace, TraceWriter):
            raise TypeError(f"trace must be a TraceWriter (open_trace(cfg, path)), got {type(trace).__name__}")
        try:  # the trace is the caller's: written here, never closed here
            self.manager = KVManager(self.mem, self.auditor, trace)
        except MemoryError:  # host arrays of the pool and the rows are sized by the config
            raise ConfigError(
                f"pool_tokens={cfg.num_pages * cfg.page_size} with max_running={cfg.max_running} rows of "
                f"max_context={cfg.max_context} does not fit in host memory; lower them") from None
        self.backend = backend if backend is not None else create_backend(cfg)
        self.backend.setup(Layout.of(self.mem))
        # The one reader of the memory plan on the backend's behalf: each forward gets a StepBatch.
        self.batches = BatchBuilder(self.manager, reads=getattr(self.backend, "reads", ()),
                                    mirror=getattr(self.backend, "mirror", None) is not None)
        self.stats = Stats(cfg.page_size, cfg.max_accept, swa=cfg.has_swa)
        self.sched = Scheduler(cfg, self.manager, _weak_callback(self._on_release))
        self.batch: BatchArrays | None = None
        self._batch_reqs: list = []  # the requests of the batch arrays, in their order
        self._batch_outs: list = []  # and their outputs lists (a request keeps its list for life)
        self._aranged = np.arange(0, dtype=np.int64)
        self._left: set = set()  # rids released since the batch arrays were last filtered
        self._releases = 0  # requests released so far (a step without one keeps every position)
        # Output tokens each decoding request may still produce, by row: set when it joins the
        # decode batch, then moved by its results only (no other writer adds outputs meanwhile).
        self._left_rows = np.zeros(self.mem.max_reqs, dtype=np.int64)
        self._tally = Tally(self.mem.max_reqs)  # decoding requests' step counters, by row
        # What every decode step asks of the config (its properties look the algorithm up each time).
        self._spec, self._most = cfg.speculative, cfg.max_accept
        self.step_no = 0
        # Overlap scheduling (mini_engine.overlap): a decode step's result lands after the
        # next step is planned. Plain decode counts its token committed when it allocates
        # (SGLang's alloc_for_decode), so that part of its result is taken before the plan.
        self.overlap = cfg.rules.overlap
        self.commit_at_alloc = not cfg.algo.stale_under_overlap
        self.inflight: InFlight | None = None
        # The in-flight step's (releases when it ran, its rows, its result lengths).
        self._launch: tuple = (-1, None, None)
        self.error: str | None = None
        self.requests: list[Request] = []

    # -- public API ----------------------------------------------------------

    def validate(self, reqs: list[Request]) -> None:
        """Bad workloads are bad input (ConfigError), found before the first step."""
        cfg = self.cfg
        seen = {r.rid for r in self.requests}
        for r in reqs:
            if r.rid in seen:
                raise ConfigError(f"request id {r.rid} appears twice; request ids must be unique")
            seen.add(r.rid)
            if not r.prompt or r.max_new_tokens < 1:
                raise ConfigError(f"request {r.rid} needs a non-empty prompt and max_new_tokens >= 1 "
                                  f"(got {len(r.prompt)} prompt tokens, max_new_tokens={r.max_new_tokens})")
            if r.fill_len not in (0, len(r.prompt)):
                raise ConfigError(f"request {r.rid}: fill_len must be 0 or the prompt length {len(r.prompt)} "
                                  f"(got {r.fill_len})")
            check_context(r.rid, len(r.prompt), r.max_new_tokens, cfg.max_context)
            need = request_pages(cfg, len(r.prompt), r.max_new_tokens)
            have = admission_pages(cfg)
            if need > have:
                total = len(r.prompt) + r.max_new_tokens
                pool = "" if have == cfg.num_pages else f" (its SWA pool {have} pages at swa_ratio={cfg.rules.swa_ratio})"
                raise ConfigError(
                    f"pool_tokens={cfg.num_pages * cfg.page_size}{pool} is too small for one request of the workload: "
                    f"request {r.rid} needs {need} pages of {cfg.page_size} ({total} tokens + reserve "
                    f"{self.reserve}); raise pool_tokens to >= {-(-need * cfg.num_pages // have) * cfg.page_size}"
                )

    def submit(self, reqs: list[Request]) -> None:
        """Queue requests (validated first); they join at their arrival_step."""
        self.validate(reqs)
        if any(r.is_pd for r in reqs):
            # A node that receives PD transfers is SGLang's decode side, whose pools stage
            # their frees and merge them sorted (need_sort). A node's role is fixed once it
            # has freed pages: PD arrivals after that keep the order it started with.
            self.manager.stage_frees()
        self.sched.add(reqs)
        self.requests.extend(reqs)

    def tick(self) -> StepOutcome:
        """Let arrivals in and run one step (see ``step``); idle time jumps to the next arrival."""
        self.sched.arrive(self.step_no)
        if not (self.sched.waiting or self.sched.running):
            nxt = self.sched.next_arrival()
            if nxt is None:
                return StepOutcome.IDLE
            self.step_no = max(self.step_no, nxt)
            self.sched.arrive(self.step_no)
        return self.step()

    def run(self, reqs: list[Request] | None = None) -> RunResult:
        """Run every submitted request (and ``reqs``) to completion, or until the pool is exhausted."""
        if reqs:
            self.submit(reqs)
        verdict = "ok"
        stall = 0
        t0 = time.perf_counter()
        try:
            while self.sched.has_work():
                outcome = self.tick()
                if outcome is StepOutcome.EXHAUSTED:
                    verdict = "pool_exhausted"
                    break
                stall = 0 if outcome is StepOutcome.RAN else stall + 1
                if stall > 2 * self.cfg.max_running + 8:  # a safety net: never spin
                    verdict = "pool_exhausted"
                    self.error = f"no progress for {stall} steps"
                    break
        except (InvariantViolation, EvictFloorError) as err:
            verdict = "violated"  # raise mode: stop at the first one, keep what was counted
            self.error = f"{type(err).__name__}: {err}"
            self.auditor.mode = "off"  # the drain below must not raise again
        wall = time.perf_counter() - t0
        if verdict == "pool_exhausted" and self.error is None:
            self.error = (f"pool exhausted at step {self.step_no}: {self.manager.num_free_pages} free pages of "
                          f"{self.cfg.num_pages}, {self.manager.leaked_pages()} leaked, "
                          f"{self._unfinished(self.requests)} requests unfinished")
        self._drain()
        return self._result(self.requests, verdict, wall)

    # -- one step --------------------------------------------------------------

    def step(self) -> StepOutcome:
        """Run one step: RAN, STALLED (no progress, the step still counts) or EXHAUSTED."""
        self.auditor.step = self.manager.step = self.step_no  # stamps event violations
        chunks, arrivals = self.sched.admit()
        progress = False
        if arrivals:
            self._transfer(arrivals)
            progress = True
        if chunks:
            # Overlap: the prefill was planned (admitted) before the decode result in flight lands.
            self._land()
            self._prefill(chunks)
            progress = True
        elif batch := self.sched.decode_batch():
            got = self._decode(batch)
            if got is None:
                return StepOutcome.EXHAUSTED
            progress = progress or got
        elif self._land():
            progress = True
        elif not progress:
            # Nothing fits: running prefills are stuck on a short pool.
            if not self.sched.retract_stuck():
                return StepOutcome.EXHAUSTED
        self._end_step()
        return StepOutcome.RAN if progress else StepOutcome.STALLED

    def _transfer(self, reqs: list[Request]) -> None:
        firsts = _results(self.backend.forward(self.batches.transfer(reqs)), len(reqs))  # pd_prealloc committed the fill_len tokens
        # SGLang groups the frees of this batch only with the decode-side radix cache.
        with self.manager.free_group() if self.mem.profile.pd_radix else nullcontext():
            for r, tok in zip(reqs, firsts):
                r.outputs.append(int(tok))
                self.stats.output_tokens += 1
                self.stats.pd_arrivals += 1
                if r.remaining <= 0:
                    self.sched.finish(r)

    def _prefill(self, chunks) -> None:
        reqs = [c.req for c in chunks]
        toks = _results(self.backend.forward(self.batches.prefill(reqs, [c.start for c in chunks],
                                                                  [c.end for c in chunks])), len(reqs))
        self.stats.prefill_steps += 1
        with self.manager.free_group():  # SGLang's prefill result processing: one free group
            for c, tok in zip(chunks, toks):
                r = c.req
                self.manager.commit(r.kv, c.end - c.start)
                r.prefilled = c.end
                self.stats.prefill_tokens += c.end - c.start
                if tok is not None:
                    r.outputs.append(int(tok))
                    self.stats.output_tokens += 1
                    if r.remaining <= 0:
                        self.sched.finish(r)

    def _decode(self, batch: list[Request]) -> bool | None:
        t0 = time.perf_counter()
        # Overlap: a request the in-flight result finishes by length sits this plan out.
        finishing = self._finishing(batch)
        if finishing:
            batch = [r for r in batch if r not in finishing]
            if not batch:
                return self._land()
        if self.commit_at_alloc and self.inflight is not None:
            self._commit_in_flight()
        before = self.manager.rows.allocated.copy()  # every row's extent before the reservation
        # SGLang's order: check and retract on the pools as they are, then evict, then allocate.
        got = self.sched.reserve_decode(batch, wait=bool(finishing))
        if not got:
            landed = self._land()  # waiting on the frees of the result in flight: no decode batch
            if got is None and not landed:
                return None  # the pool is exhausted
            return landed  # after its frees, the next plan tries again
        if got == self._batch_reqs:  # all counted by row already (bound when they first decoded)
            self._tally.decode_batches[self.batch.rows] += 1
        else:
            for r in got:
                if r._tally is None:
                    r.bind(self._tally, r.kv.row)
                r.decode_batches += 1
        batch = got
        self._sync_batch(batch)
        # The batch arrays' rows when they hold exactly this batch (a wrong row there would fail
        # K10's rid check at the end of the step), else read from the requests.
        rows = self.batch.rows if batch == self._batch_reqs else _rows(batch)
        self._count_ahead(batch, rows, before)
        if self.overlap:
            # SGLang's event_loop_overlap: step N's result is processed after step N+1 is planned.
            # A request it finishes drops out of step N+1 (that result would be skipped).
            released = self._releases
            self._land()
            if self._releases != released:
                batch = [r for r in batch if r.status is Status.RUNNING and r.kv is not None]
                rows = _rows(batch)
        t1 = time.perf_counter()
        results = self._forward(batch) if batch else []
        t2 = time.perf_counter()
        lens = np.fromiter(map(len, results), dtype=np.int64, count=len(results))
        if self.overlap:
            self.inflight = InFlight(batch, results) if batch else None
            self._launch = (self._releases, rows, lens)
        else:
            self._process(batch, results, lens, rows)
        self.stats.plan_s += (t1 - t0) + (time.perf_counter() - t2)  # host time, the forward excluded
        self.stats.decode_steps += 1
        return True

    def _forward(self, batch: list[Request]) -> list[list[int]]:
        if self._spec:
            return _results(self.backend.forward(self.batches.verify(batch)), len(batch))
        return [[t] for t in _results(self.backend.forward(self.batches.decode(batch)), len(batch))]

    def _all_live(self) -> bool:
        """Nobody was released since the result in flight ran: every request of it still runs
        on the KV state (and row) it ran with, so InFlight.live() keeps them all."""
        return self._releases == self._launch[0]

    def _finishing(self, batch: list[Request]) -> list[Request]:
        """finishing_in_flight over the batch, read from the rows' remaining outputs."""
        inflight = self.inflight
        if inflight is None:
            return []
        if not self._all_live():
            return finishing_in_flight(batch, inflight)
        left = self._left_rows[self._launch[1]]
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
            left = self._left_rows[rows]
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
                by_row[ran_rows] = np.minimum(lens, self._left_rows[ran_rows])
                land = by_row[rows]
                done = (land > 0) & (land == left)  # the result in flight finishes it
            ahead -= land
            if done is not None and done.any():
                extra = int(done.sum())
                extra_slots = int((alloc[done] - before[rows[done]]).sum())
        self._add_ahead(int(ahead.sum()), extra, extra_slots)

    def _add_ahead(self, ahead: int, extra: int, extra_slots: int) -> None:
        stats = self.stats
        stats.peak_reserved_ahead = max(stats.peak_reserved_ahead, ahead)
        stats.reserved_ahead_sum += ahead
        stats.overlap_extra_reservations += extra
        stats.overlap_extra_slots += extra_slots

    def _commit_in_flight(self) -> None:
        """Plain decode under overlap: the in-flight step's token counts as committed before
        the next plan (SGLang's alloc_for_decode advanced kv_committed_len when it allocated
        it), while its outputs, finishes and frees land after that plan (_land)."""
        inflight = self.inflight
        if inflight.committed:
            return
        counts = np.zeros(len(self.batch), dtype=np.int64)
        pos = {rid: i for i, rid in enumerate(self.batch.rids)}
        for i in inflight.live():
            r = inflight.batch[i]
            n = min(len(inflight.results[i]), r.remaining)
            self.manager.commit(r.kv, n)
            at = pos.get(r.rid, -1)
            if at >= 0:
                counts[at] = n
        self.batch.commit(counts)
        inflight.committed = True

    def _land(self) -> bool:
        """Process the in-flight decode result, if any (overlap). True when one landed."""
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
            rows = _rows(batch)
        left = self._left_rows[rows]
        room = left - lens  # below 0: the output limit cuts the accepted run; 0 or below: it finishes
        ends = int(room.min()) <= 0
        if ends:
            n = np.minimum(lens, left)
            room = left - n
            if (lens > left).any():
                results = list(results)
                for i in np.flatnonzero(lens > left).tolist():
                    results[i] = results[i][: int(left[i])]
        else:
            n = lens
        out = int(n.sum())  # output tokens
        in_order = batch == self._batch_reqs  # the batch arrays hold this batch, in its order
        # SGLang's decode result processing: the finished requests' frees form one group.
        with self.manager.free_group():
            if commit:
                self.manager.commit_batch(batch, n, rows)
            self._left_rows[rows] = room
            deque(map(list.extend, self._batch_outs if in_order else map(_OUTPUTS, batch), results), maxlen=0)
            if self._spec:
                # tau counts what the verify accepted, even past the output limit; every request
                # here decoded, so counts by row (Request.bind)
                tally = self._tally
                tally.spec_steps[rows] += 1
                tally.accepted[rows] += lens
                stats.spec_verifies += k
                stats.accepted_tokens += out if n is lens else int(lens.sum())
            if cfg.draft_window is not None:
                # K9 itself is an audit check (memory.invariants); this only counts the peak.
                stats.peak_compact_draft = max(stats.peak_compact_draft, *(
                    sizing.compact_draft_len(c, cfg.draft_window, cfg.page_size)
                    for c in self.manager.rows.committed[rows].tolist()))
            if ends:
                for i in np.flatnonzero(room == 0).tolist():
                    self.sched.finish(batch[i])
        if commit:
            if in_order:
                counts = n
            else:
                pos = self._positions(batch)  # -1: missing from the batch arrays (K10 reported at the sync)
                counts = np.zeros(len(self.batch), dtype=np.int64)
                ok = pos >= 0
                counts[pos[ok]] = n[ok]
            self.batch.commit(counts)
        stats.output_tokens += out

    def _positions(self, reqs: list[Request]) -> np.ndarray:
        """Each request's position in the batch arrays, by rid (-1: not there)."""
        if reqs == self._batch_reqs:
            return self._arange(len(reqs))
        pos = {rid: i for i, rid in enumerate(self.batch.rids)}
        return np.fromiter((pos.get(r.rid, -1) for r in reqs), dtype=np.int64, count=len(reqs))

    def _arange(self, n: int) -> np.ndarray:
        if len(self._aranged) != n:
            self._aranged = np.arange(n, dtype=np.int64)
        return self._aranged

    def _sync_batch(self, batch: list[Request]) -> np.ndarray:
        """After the reservation: requests that left leave the batch arrays, those that joined
        are merged, and the extents the reservation gave are recorded (host arrays only).

        Returns each request's position in the batch arrays (-1: missing, reported as K10).
        """
        if self.batch is None:
            self.batch = BatchArrays.from_states([])
        b = self.batch
        # The common step: nobody left since the last filter and the same requests decode in
        # the same order, so there is nothing to filter, merge or look up.
        if self._left or batch != self._batch_reqs:
            rids = [r.rid for r in batch]
            self._filter_batch(set(rids))
            pos = {rid: i for i, rid in enumerate(b.rids)}
            joined = [r for r in batch if r.rid not in pos]
            if joined:
                b.merge(BatchArrays.from_states([r.kv for r in joined]))
                # A joining request's remaining outputs; from here on its results keep it.
                self._left_rows[_rows(joined)] = [r.remaining for r in joined]
                pos = {rid: i for i, rid in enumerate(b.rids)}  # read back: a missed merge shows as K10
            self._match_batch(batch)
            where = np.fromiter((pos.get(rid, -1) for rid in rids), dtype=np.int64, count=len(rids))
        else:
            where = self._arange(len(batch))
        b.set_allocated(b.plan_extents(self.sched.step_reserve, self.cfg.page_size, self.manager.step_aligned,
                                       self.mem.row_width))
        if where is not self._aranged and (where < 0).any():
            for r, at in zip(batch, where.tolist()):
                if at < 0:  # a missed merge: its commits have no place in the arrays
                    self.auditor.report(Violation("K10", r.rid, self.step_no,
                                                  {"row": r.kv.row, "reason": "decoding but not in the batch"}))
        return where

    def _match_batch(self, reqs: list[Request]) -> None:
        """The requests of the batch arrays, in their order (read from the arrays' rids)."""
        by_rid = {r.rid: r for r in self._batch_reqs}
        by_rid.update((r.rid, r) for r in reqs)
        self._batch_reqs = [by_rid.get(rid) for rid in self.batch.rids]
        self._batch_outs = [getattr(r, "outputs", None) for r in self._batch_reqs]  # their token lists

    def _filter_batch(self, decoding: set | None = None) -> None:
        """Requests that were released (or, given the decoding rids, do not decode) leave the batch."""
        left, self._left = self._left, set()
        if self.batch is None or not (left or decoding is not None):
            return
        rids = self.batch.rids
        if decoding is not None and not left and len(decoding) == len(rids) and decoding.issuperset(rids):
            return  # everyone stays
        keep = [i for i, rid in enumerate(rids)
                if rid not in left and (decoding is None or rid in decoding)]
        if len(keep) != len(rids):
            self.batch.filter(keep)
            self._match_batch([])

    def _end_step(self) -> None:
        self._filter_batch()  # requests that finished or were retracted this step
        if self.cfg.audit != "off":
            # K10 reads the backend's device mirror, when it keeps one (the accounting-only one does not).
            self.manager.check(self.step_no, batch=self.batch, mirror=getattr(self.backend, "mirror", None))
        self.stats.steps += 1
        self.stats.sample(self.manager, len(self.sched.running))
        self.step_no += 1

    # -- bookkeeping -------------------------------------------------------------

    def _on_release(self, r: Request, retracted: bool) -> None:
        self._releases += 1
        self.stats.on_release(int(r.kv.allocated), self.mem.profile.free)
        r.unbind()  # its row goes back: the counters stay with the request
        r.decode_batches = 0  # a retracted request starts over
        self._left.add(r.rid)
        self.backend.release(r)

    def _drain(self) -> None:
        """Release whatever still runs (a stopped run) so leaks are measured on a drained pool."""
        for r in list(self.sched.running):
            self.sched.finish(r)
            r.status = Status.WAITING  # freed, but not finished: the result counts it unfinished

    @staticmethod
    def _unfinished(reqs: list[Request]) -> int:
        return sum(r.status is not Status.FINISHED for r in reqs)

    def _result(self, reqs: list[Request], verdict: str, wall: float) -> RunResult:
        self.stats.retractions = self.sched.retractions
        self.stats.swa_retractions = self.sched.swa_retractions
        self.stats.row_overflow_slots = self.manager.row_overflow_slots
        counts = dict(self.auditor.counts)
        total = sum(counts.values())
        if verdict == "ok" and total:
            verdict = "violated"
        stats = self.stats.finalize(
            wall_s=wall, syncs=int(self.manager.syncs), leaked_pages=int(self.manager.leaked_pages("full")),
            leaked_swa_pages=int(self.manager.leaked_pages("swa")),
            requests=len(reqs), finished=len(reqs) - self._unfinished(reqs), violations=total,
        )
        samples = [{"id": v.id, "rid": v.rid, "step": v.step, "values": _plain(v.values)}
                   for v in self.auditor.records[:MAX_SAMPLES]]
        return RunResult(
            stats=stats, series=self.stats.series, violations=counts, violation_samples=samples,
            outputs={r.rid: list(r.outputs) for r in reqs}, verdict=verdict, error=self.error,
            requests=reqs,
        )


def _results(results: list, n: int) -> list:
    # zip() would drop the missing ones silently and the loop would wait on them forever.
    if len(results) != n:
        raise RuntimeError(f"backend returned {len(results)} results for a batch of {n}")
    return results


def _plain(values: dict) -> dict:
    """Violation values as JSON-friendly Python scalars (they may hold numpy ints)."""
    out = {}
    for k, v in values.items():
        if hasattr(v, "tolist"):
            v = v.tolist()
        out[str(k)] = v if isinstance(v, (int, float, str, bool, list, type(None))) else str(v)
    return out


def _weak_callback(method):
    """The scheduler's release callback without a reference cycle: an engine and its
    scheduler holding each other kept every run's KV pools (up to gigabytes) alive
    until a full garbage collection, so a worker running config after config grew."""
    ref = weakref.WeakMethod(method)
    return lambda *args: ref()(*args)
