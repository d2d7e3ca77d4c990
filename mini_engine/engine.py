"""The step loop and the public Engine API.

One step is either a prefill step (chunks of admitted prompts) or a decode step
(plain or speculative) over every request that finished its prefill, as in
nano-vllm: prefill first, so admission keeps the batch full. PD arrivals are
preallocated (their KV counts as committed) and transferred at the start of any
step; they join the decode batch of that same step when no prefill runs.

The engine holds its parts and runs the loop: the decode step is a DecodeStep
(mini_engine.decode.step), the running decode batch's arrays a DecodeBatch
(mini_engine.decode.batch), the result of a run mini_engine.run_result, the pool
sizes a config asks for mini_engine.config.pools.
"""

from __future__ import annotations

import enum
import inspect
import time
import weakref
from contextlib import nullcontext
from typing import Callable

from mini_engine.config.engine_config import EngineConfig
from mini_engine.config.engine_config import require_cuda
from mini_engine.config.pools import (admission_pages, decode_reserve, memory_config, min_pool_pages, output_cap,
                                     request_pages)
from mini_engine.errors import ConfigError, EvictFloorError, InvariantViolation, SGLangHalts
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.manager import KVManager
from mini_engine.memory.trace.writer import TraceWriter
from mini_engine.request import Request, Status, Tally, check_context
# The step's parts, in the order a step runs them: admit, prefill, decode, forward.
from mini_engine.scheduler.pd_prealloc import empty_pool_budget
from mini_engine.scheduler.scheduler import Scheduler
from mini_engine.prefill.checkpoint import checkpoint_transfer
from mini_engine.prefill.step import PrefillStep
from mini_engine.decode.batch import DecodeBatch
from mini_engine.decode.step import DecodeStep
from mini_engine.forward.backend import Backend, checked_results, create_backend
from mini_engine.forward.step_batch import BatchBuilder, Layout
from mini_engine.run_result import RunResult, run_result, unfinished
from mini_engine.stats import Stats

class StepOutcome(enum.Enum):
    """What one ``step`` (or ``tick``) did."""

    RAN = "ran"  # work was done: tokens prefilled, decoded or transferred
    STALLED = "stalled"  # a step without progress: its decode batch or a stuck prefill was retracted
    EXHAUSTED = "exhausted"  # nothing fits and nothing can be retracted: the pool is exhausted
    IDLE = "idle"  # tick only: no request waits, runs or is still to arrive; no step ran


def open_trace(cfg: EngineConfig, path_or_file) -> TraceWriter:
    """The allocation trace writer of an engine built from ``cfg``: its header names
    that engine's pools and options. The caller owns it: open it as a context manager
    around the engine's run, so it is closed (and a crash keeps every line written
    before it) in one place, the caller's ``with``."""
    return TraceWriter.for_memory(path_or_file, memory_config(cfg), cfg.to_dict())


class Engine:
    """The step loop over one config's pools and backend.

    ``on_finish``, when given, is called with each request that finished with all its
    outputs, once its pages are released (a retracted request, or one a stopped run
    drains unfinished, is no finish). It may submit new requests: the session engine
    (mini_engine/scheduler/sessions.py) submits a finished turn's next turn from it.
    """

    def __init__(self, cfg: EngineConfig, backend: Backend | None = None, *,
                 trace: TraceWriter | None = None, on_finish: Callable[[Request], None] | None = None):
        self.cfg = cfg
        # A method of this engine is held weakly, as the scheduler's callback below is.
        self.on_finish = (_weak_callback(on_finish) if inspect.ismethod(on_finish) and on_finish.__self__ is self
                          else on_finish)
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
        # The running decode batch's host arrays, and the decode step that plans, runs and lands it.
        self.decoding = DecodeBatch(self.manager, self.auditor, step_reserve=self.sched.step_reserve,
                                    page_size=cfg.page_size)
        self.prefiller = PrefillStep(cfg, manager=self.manager, sched=self.sched, backend=self.backend,
                                     builder=self.batches, stats=self.stats, batch=self.decoding)
        self.decoder = DecodeStep(cfg, manager=self.manager, sched=self.sched, backend=self.backend,
                                  builder=self.batches, stats=self.stats, batch=self.decoding,
                                  tally=Tally(self.mem.max_reqs), prefill=self.prefiller)
        self.step_no = 0
        self.error: str | None = None
        self.halted: str | None = None  # why the modelled SGLang cannot go on (SGLangHalts), if it cannot
        self.requests: list[Request] = []

    @property
    def overlap(self) -> bool:
        """Whether a decode step's result lands after the next plan (mini_engine.scheduler.overlap)."""
        return self.decoder.overlap

    @property
    def commit_at_alloc(self) -> bool:
        """Plain decode under overlap: the in-flight token counts as committed before the plan."""
        return self.decoder.commit_at_alloc

    @property
    def inflight(self):
        """The decode result in flight (overlap), or None."""
        return self.decoder.inflight

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
        # One refusal naming the largest request, not the first too large, and the smallest pool
        # that passes every rule below (N17: a minimum that fits one rule was refused by the next).
        if not reqs:
            return
        broken = self._pool_rule_broken(reqs, cfg.num_pages)
        if broken is None:
            return
        # A pool that holds the largest request whole passes once the other rules do; under
        # admission sglang a smaller one may pass too, with outputs clipped. Below the clip's
        # floor (a page-ceiled prompt and a page) nothing passes. The PD rule need not get
        # easier with every page (its SWA side grows slower than the clip lets outputs grow),
        # so the pools between are tried one by one.
        hi = min_pool_pages(cfg, max(request_pages(cfg, len(r.prompt), r.max_new_tokens) for r in reqs))
        while self._pool_rule_broken(reqs, hi) is not None:
            hi += 1
        pages = hi
        if cfg.rules.admission == "sglang":
            pages = max(-(-len(r.prompt) // cfg.page_size) + 1 for r in reqs)
            while pages < hi and self._pool_rule_broken(reqs, pages) is not None:
                pages += 1
        raise ConfigError(broken.replace("MINIMUM", str(pages * cfg.page_size)))

    def _pool_rule_broken(self, reqs: list[Request], pages: int) -> str | None:
        """The first rule a pool of ``pages`` full pages breaks for the workload, as its refusal
        (MINIMUM: where the smallest pool that passes goes), or None. Under admission sglang
        each request is sized with its output as SGLang's clip at arrival leaves it."""
        cfg, ps = self.cfg, self.cfg.page_size
        sglang = cfg.rules.admission == "sglang"
        caps = {r.rid: self._output_cap(r, pages) if sglang else r.max_new_tokens for r in reqs}
        have = admission_pages(cfg, pages)
        need, r = max(((request_pages(cfg, len(r.prompt), max(caps[r.rid], 1)), r) for r in reqs),
                      key=lambda x: x[0])
        if need > have:
            total = len(r.prompt) + max(caps[r.rid], 1)
            pool = "" if have == pages else f" (its SWA pool {have} pages at swa_ratio={cfg.rules.swa_ratio})"
            return (f"pool_tokens={pages * ps}{pool} is too small for one request of the workload: request {r.rid} "
                    f"needs {need} pages of {ps} ({total} tokens + reserve {self.reserve}); raise pool_tokens to >= "
                    f"MINIMUM")
        if not sglang:
            return None
        r = next((r for r in reqs if caps[r.rid] == 0), None)
        if r is not None:
            # SGLang would clip its output to 0 (a prefill-only request, no token out): kvbench
            # runs every request to at least one token, so it cannot count this one.
            return (f"pool_tokens={pages * ps} leaves request {r.rid} no output under SGLang's clip at arrival "
                    f"(prompt {len(r.prompt)} page-ceiled, one page and one token); raise pool_tokens to >= MINIMUM")
        # SGLang's decode side waits for ever on a transfer its empty pool cannot preallocate with
        # the decode reservation (it aborts only a prompt longer than the pool); the clip comes first.
        empty = empty_pool_budget(cfg, pages)
        r = next((r for r in reqs if r.is_pd and not empty.fits(r, caps[r.rid])), None)
        if r is not None:
            return (f"reserved_decode_tokens={cfg.reserved_decode_tokens} with pool_tokens={pages * ps}: SGLang's "
                    f"decode side would never preallocate PD request {r.rid} (prompt {len(r.prompt)}, output "
                    f"{r.max_new_tokens}); lower reserved_decode_tokens or raise pool_tokens to >= MINIMUM")
        return None

    def _output_cap(self, r: Request, pages: int | None = None) -> int:
        """r's output after SGLang's clip at arrival, in a full pool of ``pages`` (default: this
        engine's). max_total_num_tokens is the full pool's size, with SWA layers too."""
        ps = self.cfg.page_size
        return output_cap(len(r.prompt), r.max_new_tokens, (self.cfg.num_pages if pages is None else pages) * ps, ps)

    def submit(self, reqs: list[Request]) -> None:
        """Queue requests (validated first); they join at their arrival_step."""
        self.validate(reqs)
        if self.cfg.rules.admission == "sglang":
            # SGLang clips each request's output at arrival to what an empty pool holds
            # (init_req_max_new_tokens), so its PrefillAdder can always admit it alone.
            for r in reqs:
                cap = self._output_cap(r)
                if cap < r.max_new_tokens:
                    self.stats.clipped_requests += 1
                    self.stats.clipped_output_tokens += r.max_new_tokens - cap
                    r.max_new_tokens = cap
        if any(r.is_pd for r in reqs):
            # A node that receives PD transfers is SGLang's decode side, whose pools stage
            # their frees and merge them sorted (need_sort). A node's role is fixed once it
            # has freed pages: PD arrivals after that keep the order it started with.
            self.manager.stage_frees()
            # SGLang's decode side forces --disable-radix-cache unless
            # --disaggregation-decode-enable-radix-cache (pd_radix).
            if not self.cfg.rules.pd_radix:
                self.manager.disable_prefix_cache()
            # A node of PD arrivals only runs SGLang's decode loop, whose overlap variant never
            # turns enable_skip_finishing_decode on (event_loop_overlap does): a request its
            # in-flight result finishes is planned once more, as 0.5.18 plans every request.
            if all(r.is_pd for r in (*self.requests, *reqs)):
                self.decoder.skip_finishing = False
        self.sched.add(reqs)
        self.requests.extend(reqs)

    def tick(self) -> StepOutcome:
        """Let arrivals in and run one step (see ``step``); idle time jumps to the next arrival."""
        self.sched.arrive(self.step_no)
        if not (self.sched.waiting or self.sched.running or self.decoder.inflight):
            nxt = self.sched.next_arrival()
            if nxt is None:
                return StepOutcome.IDLE
            self.sched.idle()
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
            # A decode result in flight is work too: under launch_finished it may be all that is left.
            while self.sched.has_work() or self.decoder.inflight is not None:
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
            pool = (f"pool exhausted at step {self.step_no}: {self.manager.num_free_pages} free pages of "
                    f"{self.cfg.num_pages}, {self.manager.leaked_pages()} leaked, "
                    f"{unfinished(self.requests)} requests unfinished")
            self.error = pool if self.halted is None else f"{self.halted}; {pool}"
        self._drain()
        return run_result(self, self.requests, verdict, wall)

    # -- one step --------------------------------------------------------------

    def step(self) -> StepOutcome:
        """Run one step: RAN, STALLED (no progress, the step still counts) or EXHAUSTED."""
        self.auditor.step = self.manager.step = self.step_no  # stamps event violations
        aborted = self.sched.aborted
        self.prefiller.stash()  # overlap: the last prefill's mid-prompt chunks, checkpointed before this pass
        try:
            chunks, arrivals = self.sched.admit()
            if self.sched.emptied and not arrivals and self.decoder.inflight is None and self.prefiller.inflight is None:
                # 0.5.18: that iteration ran nothing (not a step) and cleared batch_is_full.
                chunks, arrivals = self.sched.admit()
        except SGLangHalts as err:  # SGLang stops there (an assertion) or idles for ever
            self.halted = str(err)
            return StepOutcome.EXHAUSTED
        progress = self.sched.aborted > aborted  # an abort frees the queue's head: the engine moves on
        if arrivals:
            self._transfer(arrivals)
            progress = True
        if chunks:
            # Overlap: the prefill was planned (admitted) before the result in flight, decode or prefill, lands.
            self.decoder.land()
            self.prefiller.run(chunks)
            progress = True
        elif batch := self.sched.decode_batch():
            got = self.decoder.run(batch, self.step_no)
            if got is None:
                return StepOutcome.EXHAUSTED
            progress = progress or got
        elif self.decoder.land():
            progress = True
        elif not progress:
            # Nothing fits: running prefills are stuck on a short pool.
            if not self.sched.retract_stuck():
                return StepOutcome.EXHAUSTED
        self._end_step()
        return StepOutcome.RAN if progress else StepOutcome.STALLED

    def _transfer(self, reqs: list[Request]) -> None:
        firsts = checked_results(self.backend.forward(self.batches.transfer(reqs)), len(reqs))  # pd_prealloc committed the fill_len tokens
        for r, tok in zip(reqs, firsts):
            r.outputs.append(int(tok))
            self.stats.output_tokens += 1
            self.stats.pd_arrivals += 1
            checkpoint_transfer(self.manager, r)  # process_prebuilt, outside the result's free group
        # SGLang groups the frees of this batch only with the decode-side radix cache.
        with self.manager.free_group() if self.cfg.rules.pd_radix else nullcontext():
            for r in reqs:
                if r.remaining <= 0:
                    # The decode side's own loop (no update_running_batch filter modelled there).
                    self.sched.finish(r, filtered=True)

    def _end_step(self) -> None:
        self.decoding.filter()  # requests that finished or were retracted this step
        if self.cfg.audit != "off":
            # K10 reads the backend's device mirror, when it keeps one (the accounting-only one does not).
            self.manager.check(self.step_no, batch=self.decoding.arrays, mirror=getattr(self.backend, "mirror", None))
        self.stats.steps += 1
        self.stats.sample(self.manager, len(self.sched.running))
        self.step_no += 1

    # -- bookkeeping -------------------------------------------------------------

    def _on_release(self, r: Request, retracted: bool) -> None:
        self.stats.on_release(int(r.kv.allocated), self.cfg.rules.free)
        r.unbind()  # its row goes back: the counters stay with the request
        r.decode_batches = 0  # a retracted request starts over
        self.decoding.released(r.rid)
        self.backend.release(r)
        if self.on_finish is not None and not retracted and r.remaining <= 0:
            self.on_finish(r)

    def _drain(self) -> None:
        """Release whatever still runs (a stopped run) so leaks are measured on a drained pool."""
        for r in list(self.sched.running):
            self.sched.finish(r)
            r.status = Status.WAITING  # freed, but not finished: the result counts it unfinished


def _weak_callback(method):
    """The scheduler's release callback without a reference cycle: an engine and its
    scheduler holding each other kept every run's KV pools (up to gigabytes) alive
    until a full garbage collection, so a worker running config after config grew."""
    ref = weakref.WeakMethod(method)
    return lambda *args: ref()(*args)
