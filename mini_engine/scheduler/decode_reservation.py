"""The decode side of the running batch: one step's reservation, retraction, and leaving.

A decode reservation that fails retracts a request (freed and requeued to recompute later)
by the profile's rule (retraction.py): SGLang's fewest-outputs-first, or the newest. Either
way the request furthest along keeps progressing, so a pool that holds any single request
finishes every request. The step's SWA window eviction is swa_window.py's.

A mixin of Scheduler (scheduler.py), not an object of its own: it reads and writes the
scheduler's queues and counters (running, waiting, ratio, retractions, gate, extend_batches)
in place, and tests and the engine reach these methods on the scheduler itself.
"""
from __future__ import annotations

import numpy as np

from mini_engine.request import Request, Status
from mini_engine.scheduler.retraction import retract_demand
from mini_engine.scheduler.swa_window import evict_window


class DecodeReservation:
    """Scheduler's decode-step methods; the attributes they use are Scheduler.__init__'s."""

    def decode_batch(self) -> list[Request]:
        return [r for r in self.running if not r.prefilling]

    def reserve_decode(self, batch: list[Request], *, wait: bool = False,
                       lag: np.ndarray | None = None) -> list[Request] | None:
        """Reserve the slots of one decode step, retracting the rule's victim on shortage.

        In SGLang's order (Scheduler.update_running_batch): whether the step fits is decided on
        the pools as they are (ScheduleBatch.check_decode_mem), retract_decode retracts until it
        does, only then prepare_for_decode evicts the SWA window (maybe_evict_swa; swa_window.py)
        and allocates: an eviction that would have made room does not spare a retraction, and a
        request retracted this step is not evicted first.

        Returns the batch that got its slots (possibly smaller), or None when even a lone request
        cannot get them: the pool is exhausted. wait (overlap: a result in flight will finish
        requests): on a shortage reserve (and evict) nothing and return [] instead of retracting;
        those requests' frees come first (update_running_batch returns None: no decode step).
        lag: by row, the committed tokens whose output has not landed yet (evict_window's pre_len)."""
        first = True
        while batch:
            states = [r.kv for r in batch]
            if self.manager.prepare_fits(states, self.step_reserve):
                if first:
                    self.ratio = self.rules.decay_step(self.ratio)
                else:  # retract_decode re-sorted the batch it kept
                    batch = self._resort(batch)
                    states = [r.kv for r in batch]
                evict_window(self.manager, batch, lag)
                if not self.manager.prepare(states, self.step_reserve, after_fits=True):
                    # The eviction only frees: SGLang's alloc after a passed check is fail-loud too.
                    raise RuntimeError("decode reservation refused after its capacity check passed")
                return batch
            if first:
                if wait:
                    return []
                self.ratio = self.rules.decay_step(self.ratio)  # a retraction re-estimates it below
                first = False
            swa_short = self.manager.short_pool == "swa"
            if not self._retract_for(batch):
                return None
            self.swa_retractions += swa_short
        return batch

    def _resort(self, batch: list[Request]) -> list[Request]:
        """The kept batch in the retraction rule's order (Retraction.kept_order), in running
        too, so later steps decode in it and new requests join at its end (SGLang's merge).
        A request still prefilling is not in SGLang's running batch: it keeps its place."""
        order = self.rules.kept_order(batch)
        if order == batch:
            return batch
        kept, it = set(map(id, batch)), iter(order)
        self.running = [next(it) if id(r) in kept else r for r in self.running]
        return order

    def _retract_for(self, batch: list[Request]) -> bool:
        """Retract the retraction rule's victim (it leaves the batch being reserved too); False
        when only one request runs (nothing to gain)."""
        if len(self.running) <= 1:
            return False
        victim = self.rules.victim(self.running, batch)
        self.retract(victim)
        if victim in batch:
            batch.remove(victim)
        # SGLang's release_req then evicts from the prefix tree so the batch it keeps has
        # room for its next steps ("use the newly evictable memory instantly").
        self.manager.make_room(retract_demand(len(batch)))
        self.ratio = self.rules.ratio_after(self.ratio, batch)
        return True

    def retract(self, r: Request) -> None:
        self.gate.left()  # retract_decode's shrink clears batch_is_full
        self._leave(r, retracted=True)
        r.status = Status.WAITING
        r.prefilled = r.prefill_target = 0
        r.retractions += 1
        self.retractions += 1
        if self.requeue_back:  # SGLang's update_running_batch: appended, in retraction order
            self.waiting.append(r)
        else:  # kvbench's: the front, as retracted requests are older than anything waiting
            self.waiting.appendleft(r)

    def finish(self, r: Request, *, filtered: bool = False) -> None:
        """filtered: a prefill result processed in its own step (AdmissionGate.finished)."""
        self.gate.finished(filtered)
        self._leave(r, retracted=False)
        r.status = Status.FINISHED
        self.finished_since.append(r)

    def _leave(self, r: Request, *, retracted: bool) -> None:
        self.extend_batches.pop(r.rid, None)
        self.on_release(r, retracted)
        if self.manager.prefix is None or retracted:  # a retraction inserts nothing into the tree
            self.manager.release(r.kv)
        else:  # a finish inserts prompt + outputs (+ a verify's ids past the limit, 0.5.18) into the prefix tree
            self.manager.release(r.kv, r.tokens(0, r.seq_len) + r.beyond, len(r.prompt))
        self.running.remove(r)
        r.kv = None

    def retract_stuck(self) -> bool:
        """Free the newest request so the others can run; False when only one runs (nothing to gain).
        Admission appends, so the newest is last; retracting it lets the oldest always progress."""
        if len(self.running) <= 1:
            return False
        self.retract(self.running[-1])
        self.ratio = self.rules.ratio_after(self.ratio, self.decode_batch())
        return True
