"""The prefill tokens one prefill batch may run (SGLang's chunked-prefill budget): what each request costs, where a chunk ends.

SGLang 0.5.23's ``PrefillAdder`` (managers/schedule_policy.py) works in whole pages:

* a request's chunk is charged ``ceil_ps(extend)`` against ``rem_chunk_tokens``
  (``_update_prefill_budget``; gfx95's exact-chunk-fill, the one exception, is off elsewhere);
* a new request fits whole when ``ceil_ps(extend)`` does; otherwise it is cut at
  ``floor_ps(prefix + floor_ps(left)) - prefix`` (``_select_prefill_admission``), and a cut
  of 0 closes the batch without it (``AddReqResult.OTHER``);
* the continuing chunked request takes ``min(remaining, left)``, not floored
  (``add_chunked_req``): it comes first in the batch, so ``left`` is the whole chunk size;
* the batch closes once ``left <= 0`` (``budget_state``).

With the chunk cache (``--disable-radix-cache``) SGLang's fixed-length requests
(``ignore_eos``: kvbench's requests always run to their length) take
``add_one_req_ignore_eos`` instead: a request fits whole when its raw length does, and a
cut lands at ``left`` itself; the charge is still page-ceiled. That is ``raw_fit``.

Example (20 prompts of 37 tokens, chunk 512, ps 16): ten requests cost 48 each (480), the
eleventh is cut at floor_ps(32) = 32: 11 requests, 402 tokens. Charging raw tokens
("tokens", the what-if profiles' rule) gives 14 requests and 512 tokens.

Where the page rule makes no progress at all (a budget under one page: SGLang's server
refuses ``chunked_prefill_size % page_size != 0`` at start), the first request of an
otherwise empty batch is cut at the raw budget, so a run still finishes.
"""

from __future__ import annotations

RULES = ("pages", "tokens")


class PrefillTokens:
    def __init__(self, size: int, page_size: int, rule: str = "pages", *, raw_fit: bool = False):
        if rule not in RULES:
            raise ValueError(f"prefill tokens rule must be one of {', '.join(RULES)} (got {rule!r})")
        self.left = size
        self.ps = page_size
        self.rule = rule
        self.raw_fit = raw_fit
        self.requests = 0  # chunks charged so far
        self.tokens = 0  # tokens those chunks prefill (raw)

    def _ceil(self, n: int) -> int:
        return -(-n // self.ps) * self.ps

    def _floor(self, n: int) -> int:
        return n // self.ps * self.ps

    @property
    def open(self) -> bool:
        """Whether another request may join the batch (SGLang's budget_state != OTHER)."""
        return self.left > 0

    def continuation(self, remaining: int) -> int:
        """Tokens the continuing chunked request prefills now (not charged yet)."""
        return min(remaining, max(self.left, 0))

    def first_chunk(self, extend: int, *, prefix: int = 0, alone: bool = False, limit: int | None = None) -> int:
        """Tokens of a new request's first chunk (not charged yet); 0: it does not join, the batch closes.

        extend: the tokens it still needs ([prefix, prompt + outputs)); prefix: what a
        prefix cache matched (page-aligned). alone: nothing else is in the batch yet.
        limit: a shorter cut the memory budget allows (SGLang's check_prefill chunk limit,
        cut the same way as the chunk budget: _select_prefill_admission).
        """
        left = self.left if limit is None else min(self.left, limit)
        if left <= 0 or extend <= 0:
            return 0
        if self.rule == "tokens":
            n = min(extend, left)
        elif self.raw_fit:
            n = extend if extend <= left else left
        elif self._ceil(extend) <= left:
            n = extend
        else:
            n = self._floor(prefix + self._floor(left)) - prefix
        if n <= 0 and alone:
            n = min(extend, left)  # a budget under one page: see the module docstring
        return max(n, 0)

    def charge(self, n: int) -> None:
        """One request's chunk of n tokens joins the batch."""
        self.left -= self._ceil(n) if self.rule == "pages" else n
        self.requests += 1
        self.tokens += n
