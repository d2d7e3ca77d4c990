"""User-facing errors: each carries one line that names the problem.

The CLI prints ``str(err)`` and exits 2 for any ``KVBenchError``; nothing below
should need a traceback to be understood.
"""

from __future__ import annotations

import numbers


class KVBenchError(Exception):
    """Base of every error a user can cause (bad option, bad file, bad trace)."""


class ConfigError(KVBenchError, ValueError):
    """An option is out of its allowed range or contradicts another option."""


def check_positive(name: str, value: object, *, minimum: int = 1) -> int:
    """Return ``value`` as an int if it is an integer >= ``minimum``, else raise ConfigError.

    numpy integers count (sizes often come out of host arrays); bools do not.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{name} must be an integer >= {minimum} (got {value!r})")
    value = int(value)
    if value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum} (got {value})")
    return value


def check_choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(allowed)} (got {value!r})")
    return value  # type: ignore[return-value]


class EvictFloorError(KVBenchError, AssertionError):
    """The SWA evict cursor was written below the floor (negative, unaligned or backwards)."""

    def __init__(self, rid: object, value: int, previous: int, page_size: int, **context: int):
        self.rid = rid
        self.value = value
        self.previous = previous
        self.page_size = page_size
        self.context = context
        extra = "".join(f", {k}={v}" for k, v in context.items())
        super().__init__(
            f"K6 evict floor: swa_evicted_seqlen={value} for request {rid} must be >= 0, "
            f"a multiple of page_size={page_size} and >= previous={previous}{extra}"
        )


class SGLangHalts(KVBenchError):
    """The modelled SGLang release cannot go on here: one of its own assertions fails (its
    scheduler stops) or nothing it runs will ever free what its admission waits for (it
    idles for ever). The run stops too, with what it counted so far (verdict pool_exhausted)."""


class InvariantViolation(KVBenchError, AssertionError):
    """Raised in ``raise`` audit mode at the first violated invariant."""

    def __init__(self, violation: object):
        self.violation = violation
        super().__init__(str(violation))


class TraceError(KVBenchError):
    """A trace file is missing, empty or malformed."""
