"""What kind of figure a metric is, which decides how compare gates it.

counter: deterministic (pages, slots, leaks, violations, syncs, steps, tokens,
         retractions): any change is a regression.
timing:  noisy time or rate: a regression only when it is >= 10% worse and a
         Mann-Whitney U over repeated samples says the shift is real.
memory:  device or process bytes: gated like a timing (lower is better).
info:    reported, never gated (acceptance figures of a real model, ...).
"""

from __future__ import annotations

_TIMING_SUFFIXES = ("_per_s", "_s", "_ms", "_us", "_seconds")
_TIMING_WORDS = ("time", "us_per", "ms_per", "throughput", "latency")
_COUNTER_WORDS = ("page", "slot", "leak", "violation", "sync", "step", "token", "retraction",
                  "request", "release", "arrival", "running", "compact_draft", "k9_checks")


def kind(name: str) -> str:
    n = name.lower()
    if n.endswith(_TIMING_SUFFIXES) or any(w in n for w in _TIMING_WORDS):
        return "timing"
    if "bytes" in n:
        return "memory"
    if n.startswith("violations.") or any(w in n for w in _COUNTER_WORDS):
        return "counter"
    return "info"


def higher_is_better(name: str) -> bool:
    n = name.lower()
    return n.endswith("_per_s") or "throughput" in n
