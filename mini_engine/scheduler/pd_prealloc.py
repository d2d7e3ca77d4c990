"""The memory side of the PD decode side's prealloc queue, as SGLang counts it.

A request transferred from a prefill node waits in the decode node's
``DecodePreallocQueue`` (disaggregation/decode.py) until ``pop_preallocated`` gives it
KV slots: first come, first served, the pass stopping at the first request that does
not fit. Each check sets what a request needs against what the pool can give once
every active request keeps ``num_reserved_decode_tokens`` (R, 512 by default) for its
decoding:

* full pool: ``need = max(alloc + R, prompt + min(max_new, 4096) - retractable)`` against
  ``full_free (+ the decode radix tree's evictable) - max(R * active, single)`` (full_free:
  the smaller of the two pools for an SWA model at ps 1, which takes no tail path), where
  ``alloc`` is the prompt's slots (page-ceiled; raw in 0.5.18 without the decode radix
  cache; with it, the new pages past the request's match, whose tokens also leave
  ``prompt``, and the match's lock takes its evictable tokens out first), ``retractable``
  the running requests' prompt and output tokens, ``active`` the running requests plus
  those preallocated in this pass, and ``single`` the largest running request's prompt
  and (clipped) output less ``retractable``: room for one request to finish if all
  others were retracted;
* SWA pool (the tail prealloc: an SWA model at ps > 1): ``max(ceil_ps(tail) + R', tail +
  min(max_new, 4096) - retractable_swa)`` (R' = R with the decode radix cache, else 0)
  against ``swa_free (+ evictable, 0.5.23) - max(min(R * active, active * window -
  swa_used), single_swa)``: the SWA pool is only reserved up to each active request's
  window.

After a prealloc 0.5.23 reads both budgets from the pool again (the request now holds
its slots and counts as active); 0.5.18 reads the full one again and subtracts the
request's SWA need from the SWA one.

Example (0.5.23, ps 16, R 512, a full pool of 2048 tokens, nothing running): a
200-token prompt with 64 outputs needs max(208 + 512, 264) = 720 of 2048; after its
prealloc (208 slots taken, one active request) the pool gives 1840 - 512 = 1328, so a
second identical request fits and a third (1632 - 1024 = 608 < 720) waits.

What follows an admission that the pools cannot hold (``refused_prealloc``): 0.5.23 on
the SWA tail path reclaims the tail's SWA from the tree first and aborts the request
where that falls short; otherwise ``_pre_alloc`` asserts its allocation and the
scheduler stops.

What kvbench leaves out (docs/conform.md): the transfer queue and the prebuilt batch's
timing (a transfer lands at once here, so a preallocated request is running at the next
step; the prebuilt batch's checkpoint is made at the transfer), the retracted queue (a
retracted PD request prefills again here), host hits.
"""

from __future__ import annotations

from typing import Callable

from mini_engine.errors import SGLangHalts
from mini_engine.memory.sizing import pd_swa_tail_len
from mini_engine.config.pools import swa_pages
from mini_engine.scheduler.prefill_adder import clip_new_tokens
from mini_engine.request import Request


class PDPreallocBudget:
    def __init__(self, *, release: str, page_size: int, reserved: int, running: list[Request],
                 full_free: Callable[[], int], full_evictable: Callable[[], int], radix: bool,
                 radix_tail: bool = True, window: int | None = None, swa_free: Callable[[], int] | None = None,
                 swa_evictable: Callable[[], int] = lambda: 0, swa_size: int = 0):
        """Figures in tokens, read live (a prealloc takes its slots from them). window /
        swa_*: the SWA pool (its tail prealloc at ps > 1; at ps 1 it only bounds the full side).
        radix_tail: the decode radix cache moves the tail's window start (Profile.pd_radix_tail)."""
        self.release, self.ps, self.reserved, self.radix = release, page_size, reserved, radix
        self.radix_tail = radix and radix_tail
        self.running = running
        self.full_free, self.full_evictable = full_free, full_evictable
        self.tail = window is not None and page_size > 1
        self.window, self.swa_free, self.swa_evictable, self.swa_size = window, swa_free, swa_evictable, swa_size
        self.preallocated = 0  # this pass's preallocs: active, not running yet
        self.finished = 0  # of running: finished since the last pass, not filtered out yet (unfiltered)
        self.empty = False  # empty_pool_budget's: pools that hold nothing, not a node's own
        self.retractable = sum(len(r.prompt) + len(r.outputs) for r in running)
        self.single = max((clip_new_tokens(r.max_new_tokens) + len(r.prompt) - self.retractable for r in running), default=0)
        if self.tail:
            self.retractable_swa = sum(self.tail_len(len(r.prompt)) + len(r.outputs) for r in running)
            self.single_swa = max((self.tail_len(len(r.prompt)) + clip_new_tokens(r.max_new_tokens) - self.retractable_swa
                                   for r in running), default=self.single)
            self._swa_left = self._swa_allocatable() if release == "0.5.18" else None
        self.swa_need = 0  # the last fits(): the SWA slots its prealloc charges (0.5.18's decrement)

    def _ceil(self, n: int) -> int:
        return -(-n // self.ps) * self.ps

    def tail_len(self, seq_len: int) -> int:
        """_swa_tail_len, the engine's own rule (memory.sizing), as the prealloc allocates it."""
        return pd_swa_tail_len(seq_len, self.window, self.ps, self.radix_tail)

    def full_allocatable(self, pinned: int = 0) -> int:
        """_allocatable_token_budgets with this pass's preallocs counted active; pinned: the
        evictable tokens a decode-radix match's lock takes (SGLang reads the budget after it)."""
        free = self.full_free()
        if self.swa_free is not None and not self.tail:
            # An SWA model at ps 1 takes no tail path: the allocator's available_size is
            # the smaller of its two pools (SWATokenToKVPoolAllocator).
            free = min(free, self.swa_free())
        return free + (self.full_evictable() - pinned if self.radix else 0) - max(
            self.reserved * (len(self.running) + self.preallocated), self.single)

    def _swa_allocatable(self, pinned: int = 0) -> int:
        """_swa_tail_allocatable_token_budget: R per active request, capped at its window;
        pinned: SWA tokens a match's lock holds (evictable before, used after)."""
        active = len(self.running) + self.preallocated
        evictable = self.swa_evictable() - pinned if self.release != "0.5.18" else 0
        free = self.swa_free()
        used = self.swa_size - free - evictable
        reserved = min(self.reserved * active, max(0, active * self.window - used))
        return free + evictable - max(reserved, self.single_swa)

    def swa_allocatable(self, pinned: int = 0) -> int:
        return self._swa_left if self._swa_left is not None else self._swa_allocatable(pinned)

    def fits(self, r: Request, max_new: int | None = None, prefix: int = 0, pinned: tuple[int, int] = (0, 0)) -> bool:
        """Whether r's prealloc fits now; max_new: its output as it will be clipped, if not yet;
        prefix: the tokens its decode-radix match reuses; pinned: the (full, SWA) evictable
        tokens that match's lock holds (pd_match_pins)."""
        self.swa_need = 0
        fill = len(r.prompt)
        max_new = clip_new_tokens(r.max_new_tokens if max_new is None else max_new)
        # _required_alloc_tokens with the decode radix cache: the new pages past the hit;
        # without it 0.5.23 page-ceils the prompt, 0.5.18 takes it raw.
        if self.radix:
            alloc = self._ceil(fill) - self._ceil(prefix)
        else:
            alloc = fill if self.release == "0.5.18" else self._ceil(fill)
        need = max(alloc + self.reserved, fill - prefix + max_new - self.retractable)
        if need > self.full_allocatable(pinned[0]):
            return False
        if not self.tail:
            return True
        # The SWA side ignores the hit (_prealloc_required_tokens): the tail is transferred fresh.
        tail = self.tail_len(fill)
        self.swa_need = self._ceil(tail) + (self.reserved if self.radix else 0)
        return max(self.swa_need, tail + max_new - self.retractable_swa) <= self.swa_allocatable(pinned[1])

    @property
    def idles(self) -> bool:
        """A refusal here makes SGLang's iteration idle: the budget counts only requests
        finished since the last pass and nothing was preallocated (the next pass, with
        them filtered out, is the one that admits)."""
        return self.finished > 0 and self.finished == len(self.running) and not self.preallocated

    def charge(self) -> None:
        """After the request's prealloc: it is active; 0.5.18 takes its SWA need off the budget."""
        self.preallocated += 1
        if self.tail and self._swa_left is not None:
            self._swa_left -= self.swa_need


def unfiltered(release: str, finished: list[Request]) -> list[Request]:
    """The requests a decode result finished since the last pass that SGLang 0.5.23's
    decode node still has in its running batch when it budgets the next prealloc:
    process_decode_queue (pop_preallocated) runs before get_next_disagg_decode_batch_to_run,
    whose update_running_batch filters them out, and the budget reads running_batch.reqs
    (retractable tokens, _need_space_for_single_req, _active_req_count). Their KV is
    freed, but each still counts as active (num_reserved_decode_tokens more). A request
    finished at its transfer (the prebuilt batch, one output) is filtered before the merge.
    When they are all the budget counts and the head is refused, SGLang's iteration is
    idle (no batch) and the next one budgets without them (PDPrealloc.fits).
    0.5.18's loop reads it the same way; its profile keeps its rule until checked there."""
    return [r for r in finished if len(r.outputs) > 1] if release == "0.5.23" else []


def decode_prealloc_budget(manager, cfg, running: list[Request],
                           planned: Callable[[], int] = lambda: 0, finished: list[Request] = ()) -> PDPreallocBudget:
    """The budget of one pop_preallocated pass over the manager's pools, read live; planned:
    full pages the pass's prefill chunks will take (a retracted PD request prefilling again,
    which SGLang's decode side never does), not free for a prealloc; finished: the requests
    finished since the last pass (unfiltered)."""
    finished = unfiltered(cfg.rules.release, list(finished))
    ps, m = cfg.page_size, manager
    kw = {}
    if m.swa is not None:
        a = m.swa.allocator
        kw = dict(window=m.mem.window, swa_size=a.num_pages * ps, swa_free=lambda: a.num_free_pages * ps,
                  swa_evictable=lambda: m.evictable_swa_tokens)
    budget = PDPreallocBudget(release=cfg.rules.release, page_size=ps, reserved=cfg.reserved_decode_tokens,
                              running=[*running, *finished], full_free=lambda: (m.num_free_pages - planned()) * ps,
                              full_evictable=lambda: m.evictable_pages * ps, radix=cfg.rules.pd_radix,
                              radix_tail=cfg.rules.pd_radix_tail, **kw)
    budget.finished = len(finished)
    return budget


def empty_pool_budget(cfg, pages: int) -> PDPreallocBudget:
    """The budget of a node whose pools (of ``pages`` full pages) hold nothing: what a PD
    request must fit to be preallocated ever."""
    ps = cfg.page_size
    kw = {}
    if cfg.has_swa:
        swa = swa_pages(pages, cfg.rules.swa_ratio) * ps
        kw = dict(window=cfg.window, swa_size=swa, swa_free=lambda: swa)
    budget = PDPreallocBudget(release=cfg.rules.release, page_size=ps, reserved=cfg.reserved_decode_tokens,
                              running=[], full_free=lambda: pages * ps, full_evictable=lambda: 0,
                              radix=cfg.rules.pd_radix, radix_tail=cfg.rules.pd_radix_tail, **kw)
    budget.empty = True
    return budget


def refused_prealloc(rid: object, fill_len: int, pool: str | None, step: int) -> SGLangHalts:
    """The error of a prealloc the budget admitted and the pool refused: SGLang's _pre_alloc
    asserts (``kv_loc is not None``) and its scheduler stops; so does the run."""
    return SGLangHalts(
        f"SGLang's decode prealloc fails its assertion at step {step}: the prealloc budget admitted PD "
        f"request {rid} ({fill_len} tokens) but the {pool} pool cannot hold it "
        f"(_pre_alloc: kv_loc is not None, 'KV cache is full! Bug in memory estimation')")


def waits_for_ever(r: Request, step: int) -> SGLangHalts:
    """The error of a head PD arrival the decode side's budget refuses while nothing runs:
    no step will free memory, so SGLang idles for ever with it queued."""
    return SGLangHalts(
        f"SGLang waits for ever from step {step}: nothing runs and its decode side's prealloc budget refuses "
        f"request {r.rid} ({r.seq_len} tokens, {r.remaining} to generate); no later step frees memory")
