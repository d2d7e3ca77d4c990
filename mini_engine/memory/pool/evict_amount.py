"""How many tokens SGLang wants allocatable before an allocation, so how much its tree evicts.

Before each allocation SGLang 0.5.23 calls ``evict_to_free_tokens(tree, demand)``
(mem_cache/allocator/base.py), which asks the radix tree to evict
``demand - available_size()`` tokens when that is positive; the tree evicts whole
leaves, least recently used first, until at least that many are gone. The demand
is not the allocation's exact size on every path (mem_cache/allocation.py):

* page size 1 (``alloc_token_slots``): the tokens allocated, on every path;
* a prefill batch and a speculative reservation at page size > 1 go through
  ``alloc_paged_token_slots_extend``: the tokens allocated plus one page per
  request of the batch (``conservative_num_tokens``: each request may start a page);
* plain decode at page size > 1 (``alloc_paged_token_slots_decode``): one page
  per request of the batch, whatever it allocates;
* a PD prealloc (disaggregation/decode.py ``_required_alloc_tokens``): its new pages,
  asked per pool by memory/tables.make_room_pd (0.5.23 reclaims the SWA tail's pages
  first, then the full pool's shortfall; 0.5.18 only the full tokens short of its
  smaller pool).

The decode check (``check_decode_mem``) asks for the step's exact pages, as kvbench's
did before; this module gives the alloc paths' amounts. (A retraction's eviction is
the scheduler's: mini_engine.scheduler.retraction.retract_demand.)

Example (ps 16, 3 free pages = 48 tokens): a prefill batch of two requests growing by
20 and 10 tokens needs 3 new pages. SGLang wants 30 + 2 x 16 = 62 tokens, so it asks
the tree for 62 - 48 = 14 tokens (a leaf of at least one page); the exact-pages rule
asked for nothing.
"""

from __future__ import annotations

from typing import Callable

# The writers of memory/extents/growth.py by the alloc path SGLang takes for them.
_EXTEND_PATH = ("prefill", "spec")


def alloc_demand(writer: str, tokens: int, pages: int, requests: int, page_size: int) -> int:
    """Tokens SGLang wants allocatable before one allocation call.

    writer: who grows ("prefill", "spec", "decode", "pd"); tokens: the positions the call
    adds over the batch; pages: the new pages they take; requests: the batch's size."""
    if page_size == 1:
        return tokens
    if writer in _EXTEND_PATH:
        return tokens + requests * page_size
    if writer == "decode":
        return requests * page_size
    return pages * page_size



def reclaim_swa(swa_free_tokens: Callable[[], int], evict_swa: Callable[[int], None], swa_tokens: int) -> bool:
    """0.5.23's reclaim_for_prealloc (SWATokenToKVPoolAllocator, the PD decode side's SWA
    tail path): ask the tree for the SWA tokens the pool lacks for the tail (page-ceiled
    by the caller), then whether the pool holds them now. False: SGLang aborts the request."""
    short = swa_tokens - swa_free_tokens()
    if short > 0:
        evict_swa(short)
    return swa_free_tokens() >= swa_tokens
