"""SGLang's min-free-slots admission delay (managers/min_free_slots_delayer.py).

With the DFLASH family (SGLang's spec_algorithm.is_dflash_family) and no user value
(--min-free-slots-delay, which kvbench does not offer), the scheduler resolves a
threshold from max_running_requests: none below 8, else min(4, max(2, (max_running + 5)
// 6)); 0.5.23 and 0.5.18 alike. A prefill pass with no chunked request then admits
nothing while requests run and fewer than that many could be added
(get_num_allocatable_reqs: min(max_running - running_bs, free req_to_token rows)), so
fresh requests join several at once rather than one per free slot. The check sits in
_get_new_batch_prefill_raw after the batch_is_full test and before the no-row test,
so a delayed pass sets no flag. The decode side of disaggregation (kvbench's PD
arrivals) has its own queue without it.

Example: max_running 16: (16 + 5) // 6 = 3, so with 15 requests running (1 slot
free) or 14 (2 free) nothing joins; at 13 running, three may.
"""

from __future__ import annotations


def min_free_slots(max_running: int, delays: bool) -> int | None:
    """The threshold SGLang resolves without a user value (None: no delay). delays: the
    algorithm is of the DFLASH family (Algorithm.delays_admission)."""
    max_running = max(0, int(max_running))
    if delays and max_running >= 8:
        return min(4, max(2, (max_running + 5) // 6))
    return None


def delayed(threshold: int | None, running_bs: int, allocatable: int) -> bool:
    """Whether a pass without a chunked request admits nobody (MinFreeSlotsDelayer.should_delay)."""
    return threshold is not None and running_bs > 0 and allocatable < threshold
