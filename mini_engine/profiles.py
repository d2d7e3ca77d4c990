"""Accounting profiles: the knobs that make the engine count as one production version does.

A profile is a small declarative object. Each knob names one rule of the KV
accounting that differs between versions of the system under study (DESIGN.md
section 1); the engine reads the knobs and never the profile's name.

Knobs:
  align            writers that page-ceil the extent they record: "extend"
                   (prefill and extend chunks), "decode" (plain decode), "pd" (PD
                   prealloc), and each speculative algorithm's reservation
                   ("eagle", "dflash")
  free             how release computes the pages to free: "floor" (whole pages of
                   the recorded extent, floored), "dedup" (unique pages of the row's
                   slots; a device sync)
  swa_eviction     "every-step": after each verify, cursor to floor_ps(committed - window)
  swa_ratio        SWA pool size as a share of the full pool
  pd_tail          "always": the PD prealloc keeps only the window's tail in SWA
  row_headroom     "generous": rows hold max_context + reserve + ps - 1
  retraction       "newest": a short reservation retracts the newest request
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from mini_engine.algos import ROW_HEADROOM_RULES
from mini_engine.errors import ConfigError, check_choice

WRITERS = ("extend", "decode", "pd", "eagle", "dflash")
FREE_RULES = ("floor", "dedup")
SWA_EVICTIONS = ("every-step",)
PD_TAILS = ("always",)
RETRACTIONS = ("newest",)


@dataclass(frozen=True)
class Profile:
    name: str
    align: frozenset[str]
    free: str
    swa_eviction: str = "every-step"
    swa_ratio: float = 1.0
    pd_tail: str = "always"
    row_headroom: str = "generous"
    retraction: str = "newest"

    def __post_init__(self) -> None:
        unknown = set(self.align) - set(WRITERS)
        if unknown:
            raise ConfigError(f"align must name writers among {', '.join(WRITERS)} (got {', '.join(sorted(unknown))})")
        check_choice("free", self.free, FREE_RULES)
        check_choice("swa_eviction", self.swa_eviction, SWA_EVICTIONS)
        check_choice("pd_tail", self.pd_tail, PD_TAILS)
        check_choice("row_headroom", self.row_headroom, ROW_HEADROOM_RULES)
        check_choice("retraction", self.retraction, RETRACTIONS)
        r = self.swa_ratio
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or not 0 < r <= 1:
            raise ConfigError(f"swa_ratio must be a number in (0, 1] (got {r!r})")

    def aligns(self, writer: str) -> bool:
        return writer in self.align

    def knobs(self) -> dict[str, Any]:
        """The knobs as plain JSON values (the trace header, MLflow params)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["align"] = sorted(self.align)
        return out

    def with_knobs(self, **knobs: Any) -> Profile:
        return replace(self, **knobs)


def legacy(policy: str, free_policy: str) -> Profile:
    """The engine's original two switches as a profile: every writer aligned or none."""
    align = frozenset(WRITERS) if policy == "aligned" else frozenset()
    free = {"host_pages": "floor", "dedup": "dedup"}[free_policy]
    return Profile(name=f"{policy}/{free_policy}", align=align, free=free)
