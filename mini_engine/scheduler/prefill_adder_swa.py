"""The memory side of admission for hybrid SWA models, as SGLang 0.5.23's PrefillAdder counts it.

A hybrid SWA allocator (mem_cache/allocator/swa.py ``SWATokenToKVPoolAllocator``) hands
the adder a ``SWAPrefillBudget`` (mem_cache/prefill_budget.py), with the radix cache
(``UnifiedRadixCache``) and with the chunk cache alike (``--disable-radix-cache`` builds
the same tree, disabled: it evicts nothing and matches nothing, but its SWA component
still gives the window). It keeps PrefillBudget's full-pool figures, on the full pool
alone (``full_available_size + full_evictable_size``), and adds a third one:

* ``remaining_swa``: the SWA pool's free tokens plus the tree's evictable SWA tokens, less
  ``swa_offset``. The offset starts at 0: the decoding requests' windows are not reserved.
* ``estimate_swa_kv_tokens(extend, max_new, window, ps, chunk_limit)``: what one request
  may hold in the SWA pool: the part of its chunk below the window (``max(min(extend,
  chunk_limit) - window, 0)``), plus what stays in the window (``min(extend + max_new,
  window)``), plus a page.

A request is checked before it joins (max_new: its remaining output, clipped at 4096):

* with a prefix tree (``check_prefill``): the full test (``extend + max_new + ps <
  remaining_total``) and then ``estimate(ceil_ps(extend)) < remaining_swa``, both with
  the request's match locked (its full path and the window the SWA lock covers are not
  room). When the SWA test fails because the estimate reaches the whole SWA pool
  (``swa_never_fits``), the request may still join with a shorter chunk:
  ``floor_ps(remaining_swa - (min(max_new, window) + ps))``; a pool only short for now
  makes it wait;
* without one (``add_one_req_ignore_eos`` -> ``can_allocate_prefill``): ``ceil_ps(extend)
  + ps`` (0.5.18: ``ceil_ps(extend)``) within what is left now, and ``estimate(extend) <= remaining_swa`` (raw extend,
  and not strict); the finish simulation of full-attention pools is skipped for SWA;
* the continuing chunked request (``available_chunk_tokens``) takes at most
  ``min(chunk_left, remaining_total, remaining_swa - ps)``; where that is not positive it
  is parked: it prefills nothing this pass, and the waiting queue is still tried.

Each chunk that joins adds ``estimate(ceil_ps(n), later, chunk_limit)`` to ``swa_offset``
(``reserve``; later: its outputs when the chunk ends its prefill, else 0; chunk_limit:
the chunk budget before this chunk). The batch closes once any of the three remainders
is not positive (``has_capacity``).

Example (ps 16, window 256, an SWA pool of 2048 tokens with 1024 free, full pool large,
chunk budget 8192; two waiting requests of 1000 prompt and 100 outputs): the first's estimate is
(1008 - 256) + min(1100, 256) + 16 = 1024, not below 1024: it waits, though kvbench's
estimate (which reserves only the window) would admit it. With 1100 SWA tokens free it
joins and reserves 1024; the second then sees 76 left and waits.
"""

from __future__ import annotations

from typing import Callable

from mini_engine.scheduler.prefill_adder import PrefillMemory, clip_new_tokens
from mini_engine.request import Request


def estimate_swa_tokens(extend: int, max_new: int, *, window: int, page_size: int,
                        chunk_limit: int | None = None) -> int:
    """SGLang's estimate_swa_kv_tokens for a windowed model without host hits: the tokens
    below the window of what this pass allocates, the window it keeps, and a page."""
    allocated = extend if chunk_limit is None else min(extend, chunk_limit)
    return max(allocated - window, 0) + min(extend + max_new, window) + page_size


class SWAPrefillMemory(PrefillMemory):
    def __init__(self, available: Callable[[], int], swa_available: Callable[[], int], page_size: int,
                 decoding: list[Request], *, window: int, swa_size: int, chunk_left: Callable[[], int],
                 **kw):
        """available: the full pool's free plus evictable tokens; swa_available: the SWA
        pool's free tokens plus the tree's evictable SWA tokens; swa_size: the SWA pool's
        tokens (allocator.size_swa); chunk_left: the chunk budget now (rem_chunk_tokens)."""
        super().__init__(available, page_size, decoding, **kw)
        self.swa_available = swa_available
        self.window = window
        self.swa_size = swa_size
        self.chunk_left = chunk_left
        self.swa_offset = 0  # SWAPrefillBudget reserves nothing for the decoding requests' windows
        self.cap: int | None = None  # the last fits(): a shorter chunk the SWA pool allows, else None
        # SWA tokens the pass's chunk-cache window evictions freed: SGLang frees them only
        # after the adder's pass (maybe_evict_swa in alloc_for_extend), so they are not room.
        self.evicted_early = 0

    def _swa(self, extend: int, max_new: int, chunk_limit: int | None) -> int:
        return estimate_swa_tokens(extend, max_new, window=self.window, page_size=self.ps,
                                   chunk_limit=chunk_limit)

    @staticmethod
    def _new_tokens(r: Request) -> int:
        # _swa_new_tokens: the remaining output, then the clip (add_one_req's order).
        return clip_new_tokens(max(r.max_new_tokens - len(r.outputs), 0))

    @property
    def remaining_swa(self) -> int:
        return self.swa_available() - self.evicted_early - self.swa_offset

    @property
    def has_room(self) -> bool:
        """has_capacity: the full pool's two remainders and the SWA one all positive."""
        return super().has_room and self.remaining_swa > 0

    def window_evicted(self, tokens: int) -> None:
        self.evicted_early += tokens

    def continuation(self, chunk_left: int) -> int | None:
        """available_chunk_tokens: None parks the chunked request for this pass."""
        left = min(chunk_left, int(self.remaining_total), int(self.remaining_swa) - self.ps)
        return left if left > 0 else None

    def fits(self, r: Request, extend: int, locked: int = 0, locked_swa: int = 0) -> bool:
        """check_prefill with the match locked (locked / locked_swa: the full and SWA evictable
        tokens its lock pins). Sets cap when only a shorter chunk may join."""
        self.cap = None
        max_new = self._new_tokens(r)
        if extend + max_new + self.ps >= self.remaining_total - locked:
            return False
        chunk_limit = self.chunk_left()
        room = self.remaining_swa - locked_swa
        need = self._swa(self._ceil(extend), max_new, chunk_limit)
        if need < room:
            return True
        if need < self.swa_size:  # transient pressure: wait for the running requests
            return False
        # swa_never_fits: only part of the window's worth can ever sit beside the decode headroom.
        cap = (room - self._swa(0, max_new, None)) // self.ps * self.ps
        if cap <= 0:
            return False
        self.cap = min(chunk_limit, cap)
        return True

    def fits_ignore_eos(self, r: Request, extend: int) -> bool:
        """can_allocate_prefill without a tree; SGLang skips the finish simulation for SWA."""
        paged = self._ceil(extend) + self.gate_extra
        if paged > min(self.remaining_current, self.remaining_total):
            return False
        return self._swa(extend, self._new_tokens(r), self.chunk_left()) <= self.remaining_swa

    def charge(self, r: Request, n: int, ends_prefill: bool) -> None:
        """reserve: call before the chunk budget is charged (its chunk_limit is the budget before)."""
        later = clip_new_tokens(r.max_new_tokens) if ends_prefill else 0
        self.swa_offset += self._swa(self._ceil(n), later, self.chunk_left())
        super().charge(r, n, ends_prefill)


def admission_memory(manager, page_size: int, decoding: list[Request], chunk_left: Callable[[], int], *,
                     release: str = "0.5.23", ratio: float = 1.0) -> PrefillMemory:
    """The budget SGLang's allocator hands the adder (create_prefill_budget): PrefillBudget on a
    full-attention pool, SWAPrefillBudget with an SWA pool. Figures in tokens, read live: an
    admitted request's lock takes its match out of the evictable sizes. release, ratio:
    PrefillMemory's (0.5.18 computes the same figures inline in its PrefillAdder)."""
    ps, m = page_size, manager

    def full() -> int:  # with SWA: the full pool's own (full_available_size + full_evictable_size)
        return (m.num_free_pages + m.evictable_pages) * ps

    if m.swa is None:
        return PrefillMemory(full, ps, decoding, release=release, ratio=ratio)
    a = m.swa.allocator
    return SWAPrefillMemory(full, lambda: a.num_free_pages * ps + m.evictable_swa_tokens, ps, decoding,
                            window=m.mem.window, swa_size=a.num_pages * ps, chunk_left=chunk_left,
                            release=release, ratio=ratio)
