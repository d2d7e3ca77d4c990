"""The memory side of one prefill batch's admission, as SGLang's PrefillAdder counts it.

0.5.23's rules below (0.5.18's computes the same figures inline in its adder, except
where noted).

SGLang (managers/schedule_policy.py ``PrefillAdder``, mem_cache/prefill_budget.py
``PrefillBudget``) counts in tokens against what is free plus what the prefix tree could
evict (``rem_total_tokens``), less two offsets it keeps for the batch:

* at the start, every decoding request's remaining output,
  ``min(max_new - outputs, CLIP_MAX_NEW_TOKENS) x ratio``, where the ratio is 1.0 for an
  ``ignore_eos`` request. kvbench's requests always run to their length (the side-by-side
  tests drive SGLang with ``ignore_eos``), so the decaying new-token ratio never enters
  0.5.23's count; 0.5.18 has no ``ignore_eos`` case there and multiplies by the
  scheduler's new-token ratio (0.7 decaying to 0.098, re-estimated after a retraction,
  back to 0.7 whenever the scheduler idles);
* each admitted chunk reserves ``ceil_ps(extend) + ps`` now and, when the chunk ends the
  prefill, ``min(max_new, CLIP)`` for later (total offset; the current offset takes the
  first part only).

A request is checked before it joins:

* with a prefix tree (``add_one_req``): ``extend + min(max_new - outputs, CLIP) + ps``
  must be strictly below ``rem_total_tokens``, the request's matched prefix held locked
  (its pages are not evictable room);
* without one (``--disable-radix-cache``: ``add_one_req_ignore_eos``): ``ceil_ps(extend)
  + ps`` (0.5.18: ``ceil_ps(extend)``) must fit what is left now, and a simulation must pass: the requests of the
  batch, the decoding ones and this one sorted by the output they still owe, each
  finishing in turn and giving back its prompt and outputs, never leave the pool with
  at most one token per request still running;
* the continuing chunked request (``add_chunked_req``) takes at most ``rem_total_tokens``
  (when that is positive) besides the chunk budget.

``max_prefill_tokens`` (SGLang's default 16384) is a second compute budget: each chunk
charges ``ceil_ps(extend)`` to it and the batch closes once it is spent.

Example (ps 16, 4096 tokens free, no tree, one request decoding with 100 outputs left,
two waiting requests of 1000 prompt and 1500 outputs): the total offset starts at 100.
The first request needs 1000 + 1500 + 16 = 2516 < 3996 and reserves 1008 + 16 + 1500;
then 4096 - 100 - 2524 = 1472 is left and the second's 2516 does not fit: one joins.
kvbench's own estimate (ratio 0.7, whole pages) would have admitted both.
"""

from __future__ import annotations

from typing import Callable

from mini_engine.request import Request

CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION's default
IGNORE_EOS_RESERVE_TOKENS = 1  # SGLANG_IGNORE_EOS_RESERVE_TOKENS's default
MAX_PREFILL_TOKENS = 16384  # --max-prefill-tokens' default


def clip_new_tokens(n: int) -> int:
    """SGLang's CLIP_MAX_NEW_TOKENS: at most this many of a request's outputs are counted ahead."""
    return min(n, CLIP_MAX_NEW_TOKENS)


class PrefillMemory:
    def __init__(self, available: Callable[[], int], page_size: int, decoding: list[Request],
                 max_prefill_tokens: int = MAX_PREFILL_TOKENS, *, release: str = "0.5.23", ratio: float = 1.0):
        """available: tokens free plus tokens the prefix tree could evict, now (it changes
        as admitted requests lock their prefixes). decoding: SGLang's running batch.
        release: the SGLang release whose adder this is; ratio: the scheduler's new-token
        ratio now, which 0.5.18 applies to ignore_eos requests too."""
        self.available = available
        self.ps = page_size
        self.decoding = decoding
        owed = (clip_new_tokens(r.max_new_tokens - len(r.outputs)) for r in decoding)
        if release == "0.5.18":  # _get_running_request_total_token_offset: no ignore_eos case (a float)
            self.total_offset = sum(n * ratio for n in owed)
        else:
            self.total_offset = sum(owed)
        # add_one_req_ignore_eos asks ceil_ps(extend) plus, in 0.5.23, one page more
        # (per_req_token_overhead); 0.5.18 asks the extend alone, and its finish simulation
        # starts from what is left after the extend alone.
        self.gate_extra = 0 if release == "0.5.18" else page_size
        self.current_offset = 0
        self.rem_input = max_prefill_tokens
        self.admitted: list[Request] = []  # the batch so far (SGLang's can_run_list)
        self._owed: list[tuple[int, int]] | None = None  # the ignore_eos simulation's (owed, held)

    def _ceil(self, n: int) -> int:
        return -(-n // self.ps) * self.ps

    # -- what is left --------------------------------------------------------------
    @property
    def remaining_total(self) -> int:
        return self.available() - self.total_offset

    @property
    def remaining_current(self) -> int:
        return self.available() - self.current_offset

    @property
    def has_room(self) -> bool:
        """SGLang's budget_state is not NO_TOKEN."""
        return self.remaining_total > 0 and self.remaining_current > 0

    @property
    def open(self) -> bool:
        """Neither budget_state stop: memory left and max_prefill_tokens not spent."""
        return self.has_room and self.rem_input > 0

    def window_evicted(self, tokens: int) -> None:
        """The pass freed SWA tokens SGLang frees only after it: a full-attention pool has none."""

    # -- the checks ----------------------------------------------------------------
    def continuation(self, chunk_left: int) -> int:
        """The continuing chunked request's cap: the chunk budget, and the memory left
        when that is positive (available_chunk_tokens)."""
        left = min(chunk_left, int(self.remaining_total))
        return left if left > 0 else chunk_left

    def fits(self, r: Request, extend: int, locked: int = 0) -> bool:
        """add_one_req's test with a prefix tree. locked: the evictable tokens the request's
        match pins while it is tested (they are not room)."""
        need = extend + clip_new_tokens(max(r.max_new_tokens - len(r.outputs), 0)) + self.ps
        return need < self.remaining_total - locked

    def fits_ignore_eos(self, r: Request, extend: int) -> bool:
        """add_one_req_ignore_eos's tests without a tree (full-attention pools)."""
        paged = self._ceil(extend) + self.gate_extra
        if paged > min(self.remaining_current, self.remaining_total):
            return False
        if self._owed is None:
            self._owed = [s for q in [r, *self.decoding, *self.admitted] if (s := self._state(q))]
            self._owed.sort(key=lambda s: s[0])
        elif s := self._state(r):
            # Before the first entry owing as much or more (the last entry when none does).
            at = next((i for i, (owed, _) in enumerate(self._owed) if s[0] <= owed), max(len(self._owed) - 1, 0))
            self._owed.insert(at, s)
        left, freed = self.remaining_current - paged, 0
        for i, (owed, held) in enumerate(self._owed):
            running = len(self._owed) - i
            if left + freed - owed * running <= IGNORE_EOS_RESERVE_TOKENS * running:
                return False
            freed += held
        return True

    @staticmethod
    def _state(r: Request) -> tuple[int, int] | None:
        owed = r.max_new_tokens - len(r.outputs)
        return (owed, len(r.prompt) + len(r.outputs)) if owed > 0 else None

    # -- charging ------------------------------------------------------------------
    def charge(self, r: Request, n: int, ends_prefill: bool) -> None:
        """r's chunk of n tokens joins the batch (_update_prefill_budget). ends_prefill: the
        chunk is its last, so its outputs are reserved too."""
        paged = self._ceil(n)
        later = clip_new_tokens(r.max_new_tokens) if ends_prefill else 0
        self.total_offset += paged + self.ps + later
        self.current_offset += paged + self.ps
        self.rem_input -= paged
        self.admitted.append(r)
