"""SGLang's ``batch_is_full``: a prefill pass that ran out of room shuts admission until
something changes in the running batch.

SGLang 0.5.23 keeps one flag on its running batch (``ScheduleBatch.batch_is_full``,
managers/scheduler.py). While it is set, ``Scheduler._get_new_batch_prefill_raw`` admits
no waiting request: with no chunked request it returns before building a PrefillAdder;
with one, the chunked request still continues (``add_chunked_req``) and the waiting loop
stops at its first candidate. kvbench tests the queue again every step, so without the
flag it admits a request some steps before SGLang would.

It is set in ``_get_new_batch_prefill_raw``

* when no request row is left (``get_num_allocatable_reqs <= 0``) and no chunked request
  continues, before the pass; or when the batch being built reaches that count, at the
  next candidate (after the compute budget's stop, ``budget_state() == OTHER``);
* when ``add_one_req`` answers NO_TOKEN: a candidate that does not fit, or one admitted
  that leaves the memory budget without capacity. The flag then becomes "the batch
  being built or the running batch holds a request": a refusal on an empty engine
  leaves it clear.

It is cleared by ``get_next_batch_to_run`` before the pass when the previous batch, an
extend, loses a request at its filter (one that finished, or the chunked request, which
is excluded from it: so after every non-final chunk), when the running batch loses a
request at its per-step filter (finished), when the running batch is empty, when an empty
running batch is replaced by the previous batch at the merge (the flag lives on the batch
object, and a new batch starts clear: so a flag set while nothing decoded never outlives
the next pass), and by
``update_running_batch`` when a retraction shrinks the batch (or, under overlap, when
the requests its in-flight result finishes leave it). All but the chunk come down to "a
request left the running set since the last pass" here (Scheduler._leave). Under
overlap the decode result that finishes a request lands after the next pass was planned
(event_loop_overlap), in SGLang and in kvbench alike, so the pass after that one is the
first to see the leave in both; so does a prefill result's (mini_engine.prefill.step),
which finishes a request whose first output is its last.

SGLang 0.5.18 filters its running batch only in ``update_running_batch``, which runs after
the pass and only when the pass formed no batch (0.5.23 filters it before every pass,
PR 35265's scheduler). So there a request that a decode result finished (or, under
overlap, a prefill result: it landed after the next pass's filter of that batch) leaves
the running batch, and clears the flag, at the next pass that forms no batch, and the
pass after that one is the first to admit: one step later than 0.5.23. Only a prefill
result processed in its own step (overlap off) is dropped by the next pass's filter of
the previous batch, before it. Retractions happen in update_running_batch in both.

SGLang also clears the flag at every pass for hybrid SWA models and under priority
preemption; kvbench's SWA pools take SGLang's SWA budget (mini_engine.scheduler.prefill_adder_swa)
and the gate is off for them, which is what a flag cleared at every pass amounts to. The
decode side of disaggregation (kvbench's PD arrivals) has its own queue without the flag.
"""

from __future__ import annotations


class AdmissionGate:
    def __init__(self, active: bool, late_filter: bool = False):
        self.active = active  # the profile's admission rule is "sglang", full-attention pools
        self.late_filter = late_filter  # 0.5.18: finished requests leave at update_running_batch
        self.full = False  # SGLang's running_batch.batch_is_full
        self._left = False  # a request left the running set since the last pass
        self._unfiltered = 0  # finished, still in SGLang's running batch (late_filter)
        self._chunked = False  # the last pass's batch held a chunk that does not end its prefill
        self._decoded = False  # SGLang's running batch held a request at the last pass

    @property
    def shut(self) -> bool:
        """The flag is set: this pass admits no waiting request."""
        return self.active and self.full

    def left(self) -> None:
        """A request finished or was retracted."""
        self._left = True

    def finished(self, filtered: bool) -> None:
        """A request finished. filtered: its batch was a prefill processed in its own step,
        which the next pass's filter of the last batch drops before the pass (0.5.18)."""
        if self.late_filter and not filtered:
            self._unfiltered += 1
        else:
            self._left = True

    def updated(self) -> bool:
        """The pass formed no batch: update_running_batch filters the finished requests out.
        True when it dropped some (the flag is clear for the next pass)."""
        if not self._unfiltered:
            return False
        self._left, self._unfiltered = True, 0
        return True

    def begin(self, decoding: bool) -> None:
        """Before a pass (get_next_batch_to_run's filters). decoding: SGLang's running batch
        (the requests done prefilling, and 0.5.18's finished ones not filtered yet) is not empty."""
        decoding = decoding or self._unfiltered > 0
        if self._left or self._chunked or not decoding or not self._decoded:
            self.full = False
        self._left = self._chunked = False
        self._decoded = decoding

    def end(self, chunks) -> None:
        """After the pass: its batch, whose chunked request the next pass's filter excludes."""
        self._chunked = any(c.end < c.req.prefill_target for c in chunks)

    def close(self) -> None:
        """No row left for the next candidate, or the memory budget spent (NO_TOKEN)."""
        if self.active:
            self.full = True

    def refused(self, holding: bool) -> None:
        """add_one_req refused a candidate (NO_TOKEN). holding: the batch being built or the
        running batch holds a request; SGLang sets the flag only then."""
        if holding:
            self.close()
