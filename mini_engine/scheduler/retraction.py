"""Retraction rules: which decoding request gives its memory back, and how cautious
admission turns afterwards (the new-token ratio: the share of its remaining output
a running request is still expected to need).

"sglang" is SGLang 0.5.23's (ScheduleBatch._get_decode_retraction_order and
NewTokenRatioTracker): the request with the fewest output tokens goes first, the
longest prompt breaking ties and, on a full tie, the one latest in the batch; the
ratio starts at 0.7, decays linearly to 0.7 x 0.14 over 600 decode steps, and after
a retraction is re-estimated from the batch that stays as (decoded + 20 n) /
(max_new + 1), capped at 1, and is back at 0.7 whenever the scheduler idles.
"newest" is kvbench's first rule: the newest request goes, so the oldest always
progresses.

After a retraction SGLang's release_req also evicts from the prefix tree until the
requests still decoding have 20 tokens each allocatable (retract_demand), under either
rule here: it is SGLang's retraction path, not its choice of victim.
"""

from __future__ import annotations

from mini_engine.request import Request

SGLANG_INIT_RATIO = 0.7
SGLANG_MIN_RATIO_FACTOR = 0.14
SGLANG_DECAY_STEPS = 600
SGLANG_RETRACT_DECODE_STEPS = 20


class Retraction:
    def __init__(self, rule: str):
        self.rule = rule
        if rule == "sglang":
            self.init = SGLANG_INIT_RATIO
            self.min = SGLANG_INIT_RATIO * SGLANG_MIN_RATIO_FACTOR
            self.decay = (self.init - self.min) / SGLANG_DECAY_STEPS
        else:
            self.init, self.min, self.decay = 0.7, 0.1, 0.002

    def decay_step(self, ratio: float) -> float:
        return max(self.min, ratio - self.decay)

    def idle_ratio(self, ratio: float) -> float:
        """The ratio once the scheduler found nothing to run (an arrival gap): SGLang's
        on_idle resets it to its initial value once fully idle (both releases)."""
        return self.init if self.rule == "sglang" else ratio

    def victim(self, running: list[Request], batch: list[Request]) -> Request:
        """The request to retract; running is in admission order, batch the decode batch."""
        if self.rule == "sglang" and len(batch) > 1:
            # SGLang sorts the batch by that key, descending and stable, and pops from the
            # end: on a full tie the request latest in the batch goes (hence reversed).
            return min(reversed(batch), key=lambda r: (len(r.outputs), -len(r.prompt)))
        return running[-1]

    def kept_order(self, kept: list[Request]) -> list[Request]:
        """The decode batch's order after a retraction. SGLang's retract_decode ends with
        filter_batch(keep_indices=sorted_indices): the requests it keeps, in its retraction
        order (most outputs first, then the shortest prompt; a stable sort of the reversed
        key, so full ties keep their batch order). "newest" keeps admission order."""
        if self.rule != "sglang":
            return kept
        return sorted(kept, key=lambda r: (len(r.outputs), -len(r.prompt)), reverse=True)

    def ratio_after(self, ratio: float, staying: list[Request]) -> float:
        """The new-token ratio after a retraction, given the requests still decoding."""
        if self.rule == "sglang":
            decoded = sum(len(r.outputs) for r in staying)
            most = sum(r.max_new_tokens for r in staying)
            return min(1.0, (decoded + SGLANG_RETRACT_DECODE_STEPS * len(staying)) / (most + 1))
        return min(1.0, ratio + 0.3)


def retract_demand(remaining: int) -> int:
    """Tokens SGLang's release_req wants allocatable after a retraction: the next
    SGLANG_RETRACT_DECODE_STEPS steps of the remaining requests (schedule_batch.py)."""
    return remaining * SGLANG_RETRACT_DECODE_STEPS
