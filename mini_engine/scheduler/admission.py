"""Admission's memory side as one interface, with its three policies.

Each prefill pass asks one policy, for every candidate in queue order, whether the
request fits (``fits``), charges what a joined chunk takes (``charge``), and reads
from it when the pass stops (``stops`` before a candidate, ``full`` after one joined).
The pass itself (Scheduler._admit_waiting) is the same loop for all three:

* ``Estimate``: kvbench's page estimate against the free list, with the decaying
  new-token ratio (profiles whose admission knob is "estimate");
* ``PrefillAdder``: SGLang's PrefillAdder memory side (prefill_adder.py, with SWA
  prefill_adder_swa.py), admission "sglang";
* ``PDPrealloc``: a PD arrival under admission "sglang", the decode side's prealloc
  queue (pd_prealloc.py), built at the pass's first PD arrival.

Under the estimate a PD arrival is estimated like any request.
"""

from __future__ import annotations

from typing import Callable

from mini_engine.request import Request
from mini_engine.scheduler.pd_prealloc import PDPreallocBudget, waits_for_ever
from mini_engine.scheduler.prefill_adder import PrefillMemory
from mini_engine.scheduler.prefill_tokens import PrefillTokens
from mini_engine.scheduler.prefix_match import match_pins, pd_match_pins


class Admission:
    """The memory side of admitting a prefill batch: the scheduler's admit loop asks its
    policy these questions; a policy answers the three it must and keeps the defaults
    (no cap, never full, nothing to track) for the rest."""

    cap: int | None = None  # the most tokens the last fitting request's first chunk may take
    full = False  # after a request joined: no room is left, the pass stops (SGLang's NO_TOKEN)

    def continuation(self, left: int, chunks: PrefillTokens) -> int | None:
        """Tokens a continuing chunked request may run now (None: parked this pass)."""
        raise NotImplementedError

    def stops(self, chunks: PrefillTokens) -> bool:
        """The pass stops before its next candidate."""
        raise NotImplementedError

    def fits(self, r: Request, match, matched: int) -> bool:
        """Whether ``r`` (``matched`` tokens of it matched by the prefix tree) fits."""
        raise NotImplementedError

    def charge(self, r: Request, n: int, ends_prefill: bool) -> None:
        """A chunk of ``n`` tokens of ``r`` joined the batch."""

    def begin(self) -> None:
        """The pass over the waiting queue starts (the chunks that continue are planned)."""

    def adopted(self, pages: int) -> None:
        """The prefix tree's match of the last fitting request handed back ``pages`` pages."""

    def joined(self) -> None:
        """The last fitting request joined the batch."""

    def refused_idle(self, r: Request, step: int) -> None:
        """``r`` does not fit and nothing runs: raise where SGLang would wait for ever."""


class Estimate(Admission):
    """kvbench's estimate: a request needs its pages to the end of its expected output
    (``need``), against the pages free less the running requests' headroom."""

    def __init__(self, free_pages: Callable[[], int], need: Callable[[Request, int], int]):
        self._free_pages = free_pages
        self._need_of = need
        self.free = self._need = 0

    def begin(self) -> None:
        self.free = self._free_pages()

    def continuation(self, left: int, chunks: PrefillTokens) -> int:
        return chunks.continuation(left)

    def stops(self, chunks: PrefillTokens) -> bool:
        return not chunks.open

    def fits(self, r: Request, match, matched: int) -> bool:
        self._need = self._need_of(r, matched)
        return self._need <= self.free

    def adopted(self, pages: int) -> None:
        self.free += pages  # a matched prefix is not allocated again

    def joined(self) -> None:
        self.free -= self._need

    # refused_idle: nothing; the request is tried, and one that cannot complete ends the
    # run pool_exhausted rather than wait for ever.


class PrefillAdder(Admission):
    """SGLang's PrefillAdder memory side over a PrefillMemory (SWAPrefillMemory with SWA)."""

    def __init__(self, mem: PrefillMemory, manager):
        self.mem = mem
        self.manager = manager

    def continuation(self, left: int, chunks: PrefillTokens) -> int | None:
        return self.mem.continuation(max(chunks.left, 0))

    def stops(self, chunks: PrefillTokens) -> bool:
        # A spent compute budget stops the pass (OTHER) unless memory is spent too (NO_TOKEN).
        return not (chunks.open and self.mem.rem_input > 0) and self.mem.has_room

    def fits(self, r: Request, match, matched: int) -> bool:
        if self.manager.prefix is not None:
            return self.mem.fits(r, r.seq_len - matched, *match_pins(self.manager, match))
        return self.mem.fits_ignore_eos(r, r.seq_len - matched)

    @property
    def cap(self) -> int | None:
        return getattr(self.mem, "cap", None)

    def charge(self, r: Request, n: int, ends_prefill: bool) -> None:
        self.mem.charge(r, n, ends_prefill)

    # refused_idle: nothing. The clip at arrival (Engine.submit) makes a prompt fit an empty
    # engine, except at the edge of add_one_req_ignore_eos' reserve, where SGLang would wait for ever.

    @property
    def full(self) -> bool:
        return not self.mem.has_room


class PDPrealloc(Admission):
    """The PD decode side's prealloc budget (SGLang's pop_preallocated), built when the
    pass meets its first PD arrival: it reads the pools as they are then. A PD arrival
    joins whole, with no chunk: the pass's own policy says when the pass stops."""

    def __init__(self, build: Callable[[bool], PDPreallocBudget], manager):
        self._build = build
        self.manager = manager
        self.budget: PDPreallocBudget | None = None

    def fits(self, r: Request, match, matched: int) -> bool:
        self.budget = self.budget or self._build(True)
        pinned = pd_match_pins(self.manager, match)
        if self.budget.fits(r, prefix=matched, pinned=pinned):
            return True
        if not self.budget.idles:
            return False
        # SGLang idles an iteration (no batch, no step) and its next pass, with the
        # finished requests filtered out of its running batch, is the one that admits.
        self.budget = self._build(False)
        return self.budget.fits(r, prefix=matched, pinned=pinned)

    def refused_idle(self, r: Request, step: int) -> None:
        # Without pd_radix an arrival is refused only by pages of the prompts' tree (an
        # engine that mixes the two), which its prealloc evicts: it is tried.
        if self.manager.mem.rules.pd_radix:
            # Nothing runs and the decode side's budget refuses its head arrival: only a
            # 0.5.18 decode tree's SWA pages, which that budget does not count, do that, and
            # nothing will free them. SGLang idles for ever; the run stops here.
            raise waits_for_ever(r, step)
