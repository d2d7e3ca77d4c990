"""What kind of figure a metric is, which decides how compare gates it.

A lookup into the declared schema (harness/core/metrics.py, where the kinds are
explained); an undeclared name raises UnknownMetric instead of being guessed.
"""

from __future__ import annotations

from harness.core.metrics import lookup


def kind(name: str) -> str:
    """counter, timing, memory or info."""
    return lookup(name).kind


def higher_is_better(name: str) -> bool:
    return lookup(name).higher_is_better
