"""What the reference engine reads from SGLang's own components after each step.

The per-step series and the peaks carry the mini engine's names (mini_engine/stats.py),
read SGLang's way:

* held: pages in use less the tree's evictable pages (requests' own pages and the
  prefix pages their locks protect), used: total less free pages (the tree included);
  swa_held: the SWA pool's (a hybrid SWA model's) pages the requests hold themselves,
  the tree's SWA pages (evictable or locked) left out, as the mini engine's ledger counts;
* reserved: slots allocated past the committed length (``kv_allocated_len -
  kv_committed_len``), stranded: slots of held pages past the allocated length;
* running: request rows in use (``ReqToTokenPool``); hits: the sum of SGLang's
  ``cached_tokens``; evictable: the tree's evictable pages; retractions: requests
  ``update_running_batch`` put back in the queue.
"""

from __future__ import annotations

from harness.reference.req_fields import committed, extend_len, pool_idx

SERIES = ("stranded", "reserved", "held", "swa_held", "used", "running", "hits", "retractions", "evictable")


class Sampler:
    def __init__(self):
        self.series: dict[str, list[int]] = {k: [] for k in SERIES}
        self.retractions = 0
        self.prefill_steps = self.decode_steps = self.prefill_tokens = 0

    def launched(self, batch, extend: bool) -> None:
        if extend:
            self.prefill_steps += 1
            self.prefill_tokens += sum(map(extend_len, batch.reqs))
        else:
            self.decode_steps += 1

    def sample(self, s, reqs) -> None:
        ps = s.page_size
        alloc, tree = s.token_to_kv_pool_allocator, s.tree_cache
        swa = getattr(alloc, "swa_attn_allocator", None)
        full = alloc if swa is None else alloc.full_attn_allocator
        used = (full.size - full.available_size()) // ps
        evictable = (tree.evictable_size() if swa is None else tree.full_evictable_size()) // ps
        swa_tree = 0 if swa is None else tree.swa_evictable_size() + tree.swa_protected_size()
        swa_held = 0 if swa is None else (swa.size - swa.available_size() - swa_tree) // ps
        live = [r for r in reqs if pool_idx(r) is not None]
        reserved = sum(r.kv.kv_allocated_len - committed(r) for r in live)
        stranded = sum(-(-r.kv.kv_allocated_len // ps) * ps - r.kv.kv_allocated_len for r in live)
        values = {"stranded": stranded, "reserved": reserved, "held": used - evictable, "swa_held": swa_held, "used": used,
                  "running": _rows_in_use(s.req_to_token_pool),
                  "hits": sum(r.cached_tokens for r in reqs), "retractions": self.retractions,
                  "evictable": evictable}
        for k, v in values.items():
            self.series[k].append(int(v))


def _rows_in_use(pool) -> int:
    """Request rows taken: a PD decode node's pool has pre_alloc_size more for requests in transfer."""
    return pool.size + getattr(pool, "pre_alloc_size", 0) - pool.available_size()
