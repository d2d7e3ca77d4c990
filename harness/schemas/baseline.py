"""A baseline file (results/baselines/<profile>.json) as a declared model.

Baselines are written by ``kvbench baseline`` only, but read back by compare, the bot
and triage, often from another machine's commit: a hand edit or a truncated copy must
fail in one line, not as a KeyError mid-comparison. Keys beside the declared ones are
kept (a newer writer may add some); numbers must be finite.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Optional

from pydantic import ConfigDict

from harness.schemas import Model, check


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


Finite = Annotated[float, check(_finite, "must be a finite number", float)]


class Timing(Model):
    """A timing or memory figure: its median, the spread of its samples, the samples when repeated."""

    model_config = ConfigDict(extra="allow")
    median: Finite
    spread: Finite
    samples: Optional[list[Finite]] = None


class Entry(Model):
    """One config's blessed figures: exact counters, noisy timings."""

    model_config = ConfigDict(extra="allow")
    counters: dict[str, Finite]
    timings: dict[str, Timing]
    status: Optional[str] = None
    test_id: Optional[str] = None
    suite: Optional[str] = None


class BaselineFile(Model):
    model_config = ConfigDict(extra="allow")
    profile: str
    created: str
    git_commit: Optional[str]
    configs: dict[str, Entry]
