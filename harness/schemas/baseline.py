"""A baseline file (results/baselines/<profile>.json) as a declared model.

Baselines are written by ``kvbench baseline`` only, but read back by compare, the bot
and triage, often from another machine's commit: a hand edit or a truncated copy must
fail in one line, not as a KeyError mid-comparison. Keys beside the declared ones are
kept (a newer writer may add some); numbers must be finite.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Optional

from pydantic import ConfigDict, field_validator

from harness.core.metrics import STATUSES
from harness.schemas import Model, check


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


Finite = Annotated[float, check(_finite, "must be a finite number", float)]
# A blessed count (pages, slots, violations): a negative one would make every honest run a move.
# (Before-checks run last to first: >= 0 on the value as written, then a finite number.)
Count = Annotated[float, check(_finite, "must be a finite number", float),
                  check(lambda v: not _finite(v) or v >= 0, "must be a count, a number >= 0")]


class Timing(Model):
    """A timing or memory figure: its median, the spread of its samples, the samples when repeated."""

    model_config = ConfigDict(extra="allow")
    median: Finite
    spread: Finite
    samples: Optional[list[Finite]] = None


class Entry(Model):
    """One config's blessed figures: exact counters, noisy timings."""

    model_config = ConfigDict(extra="allow")
    counters: dict[str, Count]
    timings: dict[str, Timing]
    status: Optional[str] = None
    test_id: Optional[str] = None
    suite: Optional[str] = None

    @field_validator("counters")
    @classmethod
    def _some_counters(cls, value: dict[str, float]) -> dict[str, float]:
        # No counter: compare finds nothing to move, and every run passes against the entry.
        if not value:
            raise ValueError("must hold the config's counters (got none): a blessed config has figures")
        return value

    @field_validator("status")
    @classmethod
    def _known_status(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and value not in STATUSES:
            raise ValueError(f"must be one of {', '.join(STATUSES)} (got {value!r})")
        return value


class BaselineFile(Model):
    model_config = ConfigDict(extra="allow")
    profile: str
    created: str
    git_commit: Optional[str]
    configs: dict[str, Entry]

    @field_validator("configs")
    @classmethod
    def _some_configs(cls, value: dict[str, Entry]) -> dict[str, Entry]:
        # No config: every run's configs are "new", and nothing ever gates against it.
        if not value:
            raise ValueError("must hold at least one config (got none); bless a run with kvbench baseline RUN")
        return value
