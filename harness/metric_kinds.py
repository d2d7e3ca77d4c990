"""What kind of figure a metric is, which decides how compare gates it.

counter: deterministic (pages, slots, leaks, violations, syncs, steps, tokens,
         retractions): any change is a regression.
timing:  noisy time or rate: a regression only when it is >= 10% worse and a
         Mann-Whitney U over repeated samples says the shift is real.
memory:  bytes of one run (torch's peak, reset per run): gated like a timing.
info:    reported, never gated (acceptance figures of a real model, process RSS
         and NVML's device-wide used bytes, ...).
"""

from __future__ import annotations

_TIMING_SUFFIXES = ("_per_s", "_s", "_ms", "_us", "_seconds")
_TIMING_WORDS = ("time", "us_per", "ms_per", "throughput", "latency")
# Process- and device-wide figures hold what earlier configs in the same worker left
# (allocator caches, imports): repeats of one config agree closely, so a different
# test order would pass the noise test as a significant shift.
_PROCESS_WORDS = ("rss", "nvml")
_COUNTER_WORDS = ("page", "slot", "leak", "violation", "sync", "step", "token", "retraction",
                  "request", "release", "arrival", "running", "compact_draft", "k9_checks")


def kind(name: str) -> str:
    n = name.lower()
    if n.endswith(_TIMING_SUFFIXES) or any(w in n for w in _TIMING_WORDS):
        return "timing"
    if any(w in n for w in _PROCESS_WORDS):
        return "info"
    if "bytes" in n:
        return "memory"
    if n.startswith("violations.") or any(w in n for w in _COUNTER_WORDS):
        return "counter"
    return "info"


def higher_is_better(name: str) -> bool:
    n = name.lower()
    return n.endswith("_per_s") or "throughput" in n
