"""SGLang 0.5.23's waiting-prefix refresh: every 32nd prefill pass touches the waiting
requests' cached prefixes, so LRU eviction keeps what the queue will match.

SGLang 0.5.23 (managers/schedule_policy.py, ``SchedulePolicy._touch_waiting_prefixes``,
called at the end of ``calc_priority``) counts the calls that reach it with a non-empty
waiting queue under the default loop (the fcfs policy, LRU eviction, a radix tree that
shares prefixes and matches slowly, not the decode side of disaggregation,
``SGLANG_ENABLE_WAITING_PREFIX_REFRESH`` on by default). On the calls numbered 0, 32,
64, ... (``WAITING_PREFIX_REFRESH_INTERVAL``) it walks the tree for each of the first 128
waiting requests (``WAITING_QUEUE_PREFIX_MATCH_MAX``), last one first, so the head ends
most recent (``touch_waiting_prefix``: the tree walk of a match of prompt + outputs,
``UnifiedRadixCache.touch_prefix``). The FULL and SWA trees alike; 0.5.18 has no refresh.

``calc_priority`` runs in ``_get_new_batch_prefill_raw`` after its early returns: with no
chunked request a pass stops before it when ``batch_is_full`` is set, when the
min-free-slots delay holds or when no request row can be added
(``Scheduler.reaches_queue_policy`` says which passes get there). Counting is O(1) a
pass; only a refresh walks the queue.

Example (interval 32): passes 0 and 32 that reach the policy refresh, 1 to 31 do not; a
pass stopped by ``batch_is_full`` is not counted, so the next refresh comes one pass later.
"""

from __future__ import annotations

from itertools import islice

INTERVAL = 32  # WAITING_PREFIX_REFRESH_INTERVAL
QUEUE_MAX = 128  # WAITING_QUEUE_PREFIX_MATCH_MAX: how many waiting requests one refresh touches


class PrefixRefresh:
    def __init__(self, interval: int = INTERVAL, queue_max: int = QUEUE_MAX):
        self.interval, self.queue_max = interval, queue_max
        self.calls = 0  # SGLang's _waiting_prefix_refresh_calls
        self.refreshes = 0  # passes that touched the queue

    def on_pass(self, prefix, waiting) -> bool:
        """A pass reached the queue policy with requests waiting: touch their prefixes on every
        interval-th such pass (the first included). prefix: the tree (its ``touch``);
        waiting: the queue, head first. Returns whether it refreshed."""
        fire = self.calls % self.interval == 0
        self.calls += 1
        if not fire:
            return False
        self.refreshes += 1
        for r in reversed(list(islice(waiting, self.queue_max))):
            prefix.touch(r.tokens(0, r.seq_len), r.rid)
        return True
