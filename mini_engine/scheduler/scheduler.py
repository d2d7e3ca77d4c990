"""Continuous batching: the queues, admission and chunked prefill (the decode step: decode_reservation.py).

The scheduler decides who runs and asks the memory layer for the slots; it never touches
token ids or the backend. Admission is one pass over the waiting queue that asks an
admission policy (admission.py) whether each request fits: under the admission rule
"sglang" SGLang's PrefillAdder (prefill_adder, prefill_adder_swa) and, for PD arrivals,
the decode side's prealloc budget (pd_prealloc); else kvbench's estimate in whole pages
against the free list. SGLang's batch_is_full (batch_full) and admission delay close the
pass too. The decode step's reservation, its retractions and a request leaving the
running batch are decode_reservation.py's (a mixin: they act on this scheduler's queues).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from mini_engine.config.engine_config import EngineConfig
from mini_engine.request import Request, Status
from mini_engine.scheduler.admission import Admission, Estimate, PDPrealloc, PrefillAdder
from mini_engine.scheduler.admission_delay import delayed, min_free_slots
from mini_engine.scheduler.batch_full import AdmissionGate
from mini_engine.scheduler.decode_reservation import DecodeReservation
from mini_engine.scheduler.overlap import chunk_final_len
from mini_engine.scheduler.pd_prealloc import decode_prealloc_budget, refused_prealloc
from mini_engine.scheduler.prefill_adder import PrefillMemory
from mini_engine.scheduler.prefill_adder_swa import admission_memory
from mini_engine.scheduler.prefill_tokens import PrefillTokens
from mini_engine.scheduler.prefix_refresh import PrefixRefresh
from mini_engine.scheduler.prefix_match import pd_prefix_match, pd_releases_swa, prefix_match
from mini_engine.scheduler.retraction import Retraction

@dataclass
class PrefillChunk:
    req: Request
    start: int
    end: int


class Scheduler(DecodeReservation):
    def __init__(self, cfg: EngineConfig, manager, on_release):
        self.cfg = cfg
        self.manager = manager
        # What one decode step prepares (the algorithm's slots ahead of committed); plain
        # decode reserves one slot, what extend(state, seq_len) records, batched per step.
        self.step_reserve = cfg.step_reserve
        self.on_release = on_release  # engine callback(req, retracted: bool) before the row is freed
        self.future: list[Request] = []  # not arrived yet, sorted by arrival_step
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order, oldest first
        self.profile = cfg.rules  # the knobs the scheduler reads: retraction, prefix cache, overlap
        self.rules = Retraction(self.profile.retraction)
        # Share of its remaining output a running request is expected to still need
        # (SGLang's new_token_ratio): decays each decode step, re-estimated after a retraction.
        self.ratio = self.rules.init
        self.retractions = 0
        self.swa_retractions = 0  # retractions because the SWA pool, not the full one, was short
        self.aborted = 0  # PD arrivals SGLang aborted at prealloc (a step that only aborts made progress)
        self.finished_since: list[Request] = []  # finished since the last pass (pd_prealloc.unfiltered)
        self.extend_batches: dict[int, int] = {}  # rid -> prefill chunks run since it (re)started
        self._planned: list[tuple[Request, int]] = []  # admit's chunks (request, end), allocated at its end
        self.last_memory: PrefillMemory | None = None  # the last batch's memory budget (SGLang's admission rule)
        # The last pass formed no batch and 0.5.18's filter then emptied the running batch of
        # finished requests (AdmissionGate.updated): SGLang's next iteration passes again.
        self.emptied = False
        self.gate = AdmissionGate(self.profile.admission == "sglang" and manager.swa is None,
                                  late_filter=self.profile.release == "0.5.18")
        # SGLang's min-free-slots delay (mini_engine.scheduler.admission_delay), part of its admission.
        self.min_free_slots = (min_free_slots(cfg.max_running, cfg.algo.delays_admission)
                               if self.profile.admission == "sglang" else None)
        # SGLang 0.5.23's waiting-prefix refresh (prefix_refresh.py): with a prefix tree, off
        # once a PD arrival comes (the decode side of disaggregation has none).
        self.refresh = (PrefixRefresh() if self.profile.waiting_prefix_refresh and manager.prefix is not None
                        else None)
        # Where a retracted request waits (Profile.requeue_back): SGLang's back of the queue,
        # except on the decode side, whose retracted requests SGLang keeps in its prealloc
        # queue's own retracted queue (kvbench prefills them again: its rule, the front).
        self.requeue_back = self.profile.requeue_back

    # -- queues ------------------------------------------------------------

    def add(self, reqs: list[Request]) -> None:
        if any(r.is_pd for r in reqs):  # a decode node from now on
            self.refresh, self.requeue_back = None, False
        self.future.extend(reqs)
        self.future.sort(key=lambda r: (r.arrival_step, r.rid))
        self.future.reverse()  # pop() from the end is the earliest

    def arrive(self, step: int) -> None:
        while self.future and self.future[-1].arrival_step <= step:
            self.waiting.append(self.future.pop())

    def next_arrival(self) -> int | None:
        return self.future[-1].arrival_step if self.future else None

    def idle(self) -> None:
        """Nothing waits or runs until the next arrival (SGLang's loop found no batch)."""
        self.ratio = self.rules.idle_ratio(self.ratio)
        self.finished_since = []  # the idle loop's batch forming filtered them out

    def has_work(self) -> bool:
        return bool(self.future or self.waiting or self.running)

    # -- admission ---------------------------------------------------------

    def _pages(self, tokens: float) -> int:
        return -(-int(tokens) // self.cfg.page_size)

    def _headroom(self) -> int:
        """Pages the running requests are expected to take before they finish."""
        return sum(self._pages(r.remaining * self.ratio + self.step_reserve) + 1 for r in self.running)

    def _need(self, r: Request, matched: int = 0) -> int:
        # +1: under the unaligned policy the tail of a page may be stranded. A prefix the
        # tree matched is not allocated again.
        return self._pages(r.seq_len - matched + r.remaining * self.ratio + self.step_reserve) + 1

    def admit(self) -> tuple[list[PrefillChunk], list[Request]]:
        """Continue running prefills, admit waiting requests; reserve their slots.

        Returns the prefill chunks to run now and the PD arrivals preallocated
        (they need ``backend.transfer`` and then decode).
        """
        try:
            chunks, pd = self._admit()
        finally:
            self._allocate_planned()
            self.finished_since = []
        self.gate.end(chunks)
        # No prefill batch: SGLang's update_running_batch runs, and its filter may leave nothing.
        self.emptied = not chunks and self.gate.updated() and not self.decode_batch()
        return chunks, pd

    def prefill_tokens(self) -> PrefillTokens:
        """This batch's chunk budget: SGLang's page-charged PrefillAdder rule, except under a
        what-if profile (no shipped version), which keeps kvbench's raw-token rule."""
        profile = self.profile
        return PrefillTokens(self.cfg.chunked_prefill, self.cfg.page_size,
                           "tokens" if profile.what_if else "pages",
                           raw_fit=profile.prefix_cache == "chunk")

    def prefill_memory(self, budget: PrefillTokens) -> PrefillMemory | None:
        """This batch's memory budget under the profile's admission rule "sglang" (SGLang's
        PrefillAdder: PrefillBudget, or SWAPrefillBudget with SWA), else None: kvbench's estimate."""
        if self.profile.admission != "sglang":
            return None
        return admission_memory(self.manager, self.cfg.page_size, self.decode_batch(), lambda: budget.left,
                                release=self.profile.release, ratio=self.ratio)

    def _admit(self) -> tuple[list[PrefillChunk], list[Request]]:
        if not self.waiting and not any(r.prefilling for r in self.running):
            # A decode-only pass: no candidate, so no budget to build (every step of a long decode).
            self.last_memory = None
            self.gate.begin(bool(self.running))
            return [], []
        budget = self.prefill_tokens()
        mem = self.last_memory = self.prefill_memory(budget)
        dec = self.decode_batch()
        self.gate.begin(bool(dec))  # SGLang's running batch: the requests done prefilling
        if self.refresh is not None and self.waiting and self.reaches_queue_policy(dec):
            self.refresh.on_pass(self.manager.prefix, self.waiting)
        if mem is None:
            policy = Estimate(lambda: self._free_pages() - self._headroom() - self._planned_pages(), self._need)
            pd_policy = policy
        else:
            policy = PrefillAdder(mem, self.manager)
            pd_policy = PDPrealloc(lambda finished: decode_prealloc_budget(
                self.manager, self.cfg, dec, self._planned_pages, finished=self.finished_since if finished else ()),
                                   self.manager)
        chunks = self._continue_prefills(budget, policy)
        pd = self._admit_waiting(budget, policy, pd_policy, dec, chunks) if self.waiting else []
        return chunks, pd

    def reaches_queue_policy(self, dec: list[Request]) -> bool:
        """Whether SGLang's pass gets to calc_priority (_get_new_batch_prefill_raw): a chunked
        request goes on regardless; else batch_is_full, the min-free-slots delay and a
        pass with no request row to add return before it."""
        if len(dec) != len(self.running):
            return True
        if self.gate.shut:
            return False
        allocatable = min(self.cfg.max_running - len(dec), self.manager.num_free_rows)
        return allocatable > 0 and not delayed(self.min_free_slots, len(dec), allocatable)

    def _continue_prefills(self, budget: PrefillTokens, policy: Admission) -> list[PrefillChunk]:
        """The next chunk of each running request still prefilling, oldest first."""
        chunks: list[PrefillChunk] = []
        for r in self.running:
            if not budget.open:
                break
            if r.prefilling:
                left = r.prefill_target - r.prefilled
                n = policy.continuation(left, budget)
                if n is None:
                    continue  # SWA too short: parked this pass, the queue is still tried (add_chunked_req)
                chunk = self._chunk(r, r.prefilled + min(left, n))
                if chunk is None:
                    break  # pool short: admitting more would only make it worse
                chunks.append(chunk)
                # Before the chunk budget: SWA's reserve reads it as it was.
                policy.charge(r, chunk.end - chunk.start, chunk.end == r.prefill_target)
                budget.charge(chunk.end - chunk.start)
        return chunks

    def _admit_waiting(self, budget: PrefillTokens, policy: Admission, pd_policy: Admission,
                       dec: list[Request], chunks: list[PrefillChunk]) -> list[Request]:
        """One pass over the waiting queue, in order, until a request does not join.
        policy: the admission of prompts; pd_policy: of PD arrivals (what they need at
        prealloc). Returns the PD arrivals preallocated; the prompts' chunks join ``chunks``."""
        gate = self.gate
        # No chunked request (one continuing, or parked) and too few slots: only PD arrivals join.
        wait = len(dec) == len(self.running) and delayed(
            self.min_free_slots, len(dec), min(self.cfg.max_running - len(dec), self.manager.num_free_rows))
        if len(self.running) >= self.cfg.max_running and len(dec) == len(self.running) and not wait:
            gate.close()  # get_num_allocatable_reqs <= 0 before the pass
        policy.begin()
        pd: list[Request] = []
        fresh = []  # the batch's new requests' states, in batch order (their rows: batch_rows)
        early = False  # a PD arrival had the planned chunks allocated before the pass's end
        while self.waiting and not policy.stops(budget):
            if len(self.running) >= self.cfg.max_running:
                gate.close()  # the batch reaches get_num_allocatable_reqs
                break
            r = self.waiting[0]
            fresh_pd = r.is_pd and not r.outputs
            if (gate.shut or wait) and not fresh_pd:
                break  # batch_is_full or the delay: only the chunked request went on (_get_new_batch_prefill_raw)
            pol = pd_policy if fresh_pd else policy
            # The prefix tree's match (SGLang's init_next_round_input before add_one_req; a PD
            # arrival's: the decode side's, under pd_radix).
            match = pd_prefix_match(self.manager, r) if fresh_pd else prefix_match(self.manager, r)
            matched = 0 if match is None else len(match[0])
            fits = pol.fits(r, match, matched)
            if not fits and not fresh_pd:  # NO_TOKEN: batch_is_full if a request is held
                gate.refused(bool(chunks or pd or dec))
            if not fits and (self.running or chunks or pd):
                break
            if not fits:
                pol.refused_idle(r, self.manager.step)
            # Else an empty engine tries its head request anyway (each policy's refused_idle says why).
            first = 0
            if not fresh_pd:
                # Where SGLang's cut would be empty the request does not join (AddReqResult.OTHER).
                first = budget.first_chunk(r.seq_len - matched, prefix=matched, alone=not (chunks or pd),
                                           limit=pol.cap)
                if first == 0:
                    break
            state = self.manager.admit(r.rid)
            if state is None:
                break
            r.kv = state
            if not fresh_pd:
                fresh.append(state)
            if match is not None:
                # The matched prefix is written into the row and locked: no longer evictable.
                pol.adopted(self.manager.prefix.adopt(state, *match, r.seq_len, first=not r.retractions))
                if fresh_pd and pd_releases_swa(self.manager, matched):
                    self.manager.prefix.release_swa(state.row, any_lock=True)
            if fresh_pd:
                early |= bool(self._planned)
                joined = self._join_pd(r, pol, fits, chunks)
                if joined is None:  # aborted: SGLang's pass goes on to the next arrival
                    self.waiting.popleft()
                    self.aborted += 1
                    continue
                if not joined:
                    break
                pd.append(r)
            elif not self._join_prompt(r, matched, first, budget, pol, chunks, fresh):
                break
            self.waiting.popleft()
            pol.joined()
            if not fresh_pd and pol.full:
                gate.close()  # add_one_req's own verdict after it: budget_state() NO_TOKEN
                break
        if len(fresh) > 1 and not pd and not early:
            # SGLang's alloc_for_extend hands the batch's new requests their rows in one
            # call (ReqToTokenPool.alloc); a PD arrival takes its own (the prealloc queue's),
            # and a batch allocated early for one (even one that then failed) keeps its rows.
            self.manager.batch_rows(fresh)
        return pd

    def _join_pd(self, r: Request, policy: Admission, fits: bool, chunks: list[PrefillChunk]) -> bool | None:
        """A PD arrival's prealloc (see _preallocate); under SGLang's budget, whether it admitted
        r on a decode node's pools."""
        pdb = policy.budget if isinstance(policy, PDPrealloc) else None
        return self._preallocate(r, pdb, sglang=pdb is not None and fits and self._decode_node(chunks))

    def _join_prompt(self, r: Request, matched: int, first: int, budget: PrefillTokens, policy: Admission,
                     chunks: list[PrefillChunk], fresh: list) -> bool:
        """A waiting prompt starts running with its first chunk; False (and undone) when the
        pool cannot take the chunk."""
        self._start(r)
        r.prefill_target = r.seq_len
        r.prefilled = matched
        chunk = self._chunk(r, matched + first)
        if chunk is None:
            self.running.pop()
            self.manager.release(r.kv)
            fresh.pop()
            r.kv = None
            r.status = Status.WAITING
            return False
        chunks.append(chunk)
        policy.charge(r, first, matched + first == r.seq_len)
        budget.charge(first)
        return True

    def _decode_node(self, chunks: list[PrefillChunk]) -> bool:
        """Whether the pools are as a decode node's would be: no prompt chunk allocated this
        pass, and no tree unless the decode side's own (pd_radix). kvbench runs prompts and PD
        arrivals in one engine; a refusal that their pages cause is not SGLang's."""
        return not chunks and (self.manager.prefix is None or self.manager.mem.rules.pd_radix)

    def _preallocate(self, r: Request, pdb, *, sglang: bool) -> bool | None:
        """A PD arrival's prealloc, its own call (SGLang's decode-side prealloc queue), after
        the chunks planned so far are allocated: it sees the pool they leave. pdb: the pass's
        SGLang budget (None: kvbench's estimate); sglang: whether that budget admitted r on a
        decode node's pools (an empty engine tries its head arrival anyway), so that SGLang
        would go on to reclaim and allocate. True: it joins; False: it waits; None: SGLang aborted
        it."""
        self._allocate_planned()
        if not self.manager.pd_prealloc(r.kv, r.fill_len):
            short, reclaim = self.manager.short_pool, self.manager.reclaim_short
            if sglang and not reclaim:
                self.manager.trace_refused()  # SGLang's own call, refused: the trace shows it
            self.manager.release(r.kv)
            r.kv = None
            if not sglang:
                return False
            if reclaim:  # pop_preallocated: reclaim_for_prealloc's shortfall -> prepare_abort
                r.status = Status.ABORTED
                return None
            raise refused_prealloc(r.rid, r.fill_len, short, self.manager.step)
        if pdb is not None:
            pdb.charge()
        self._start(r)
        r.prefill_target = r.prefilled = r.fill_len
        return True

    def _start(self, r: Request) -> None:
        r.status = Status.RUNNING
        self.extend_batches[r.rid] = 0  # SGLang's extend_batch_idx starts over with the request
        self.running.append(r)  # in admission order: the last one is the newest

    def _free_pages(self) -> int:
        """Free pages admission sees: with SWA, the smaller of the two pools (SGLang's min(full, swa))."""
        m = self.manager
        free = m.num_free_pages + m.evictable_pages  # SGLang's rem_total_tokens counts the tree's evictable size
        # ... and the SWA-aware tree's evictable SWA size on the SWA side (swa_available + swa_evictable).
        return min(free, m.swa.allocator.num_free_pages + m.evictable_swa_pages) if m.swa is not None else free

    def _chunk(self, r: Request, end: int) -> PrefillChunk | None:
        if self.profile.prefix_cache == "chunk":
            # The chunk cache shares no prefix: a chunked prefill evicts the window
            # below what is already final, every chunk (interval 1). SGLang does it in
            # alloc_for_extend (maybe_evict_swa), after the adder's pass: evicted here so the
            # pool check below sees the room, it is kept out of the pass's SWA budget.
            pre_len = self._chunk_final_len(r)
            freed = self.manager.evict_swa(r.kv, pre_len, interval=1) if pre_len > 0 else 0
            if freed and self.last_memory is not None:
                self.last_memory.window_evicted(freed * self.cfg.page_size)
        plan = self._planned
        if not self.manager.extend_fits([q.kv for q, _ in plan] + [r.kv], [e for _, e in plan] + [end]):
            return None
        plan.append((r, end))
        self.extend_batches[r.rid] = self.extend_batches.get(r.rid, 0) + 1
        return PrefillChunk(r, r.prefilled, end)

    def _planned_pages(self) -> int:
        """Pages the chunks planned but not yet allocated will take."""
        ps = self.cfg.page_size
        return sum(-(-end // ps) - (-(-int(r.kv.allocated) // ps)) for r, end in self._planned)

    def _allocate_planned(self) -> None:
        """The prefill batch's allocation: one call for every chunk planned (SGLang's
        alloc_for_extend: one alloc_extend per batch, which under need_sort merges the
        staged frees by the batch's total, not chunk by chunk)."""
        plan, self._planned = self._planned, []
        if plan and not self.manager.extend_batch([r.kv for r, _ in plan], [end for _, end in plan]):
            raise RuntimeError("prefill allocation refused after each chunk's capacity check passed")

    def _chunk_final_len(self, r: Request) -> int:
        return chunk_final_len(self.profile.overlap, self.extend_batches.get(r.rid, 0), r.prefilled,
                               self.cfg.chunked_prefill)
