"""Accounting profiles: the knobs that make the engine count as one production version does.

A profile is a small declarative object. Each knob names one rule of the KV
accounting that differs between versions of the system under study (docs/DESIGN.md
section 1); the engine reads the knobs, never the profile's name. Each knob can be
overridden on its own (``resolve``); a knob that would break what a profile is
named for (host-aligned's aligned writers, floor-free's floor free) is refused.

What each knob means and each profile's value: docs/profiles.md, the one place they
are written (its test checks the table against PROFILES and the option schema).
"""


from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from mini_engine.algos import ALGORITHMS, ROW_HEADROOM_RULES
from mini_engine.errors import ConfigError, check_choice, check_positive
from mini_engine.memory.rules import BASE_WRITERS, FREE_RULES, POLICIES, PREFIX_CACHES, RELEASES, MemoryRules

# The memory side of prefill admission (the scheduler's admission policies): SGLang's
# PrefillAdder or kvbench's page estimate.
ADMISSIONS = ("sglang", "estimate")
# Who is retracted on a short pool: SGLang's fewest-outputs-first or the newest.
RETRACTIONS = ("sglang", "newest")
# What a verify past the output limit commits (mini_engine/decode/verify_commit.py): the run cut
# at the limit, up to SGLang 0.5.23's owned length (one slot past it), or 0.5.18's whole run.
VERIFY_COMMITS = ("cut", "owned", "whole")
OVERLAP = ("on", "off")
OVERLAP_PLANS = ("skip-finishing", "every-running")


def writers() -> tuple[str, ...]:
    """The writers a profile can align: the engine's own, then the one each registered
    speculative algorithm declares (Algorithm.writer_name), a plugin's too. Read when
    asked, so an algorithm registered after this module loaded is one of them."""
    out = list(BASE_WRITERS)
    for algo in ALGORITHMS.values():
        if algo.speculative and algo.writer_name not in out:
            out.append(algo.writer_name)
    return tuple(out)


@dataclass(frozen=True)
class Profile:
    name: str
    align: frozenset[str]
    free: str
    swa_eviction_interval: int = 128
    prefix_cache: str = "radix"
    swa_ratio: float = 0.8
    pd_radix: bool = False
    row_headroom: str = "sglang"
    row_overflow: bool = True
    retraction: str = "sglang"
    admission: str = "sglang"
    overlap: bool = True
    overlap_plan: str = "skip-finishing"
    # The SWA-aware tree's branching point (memory.rules.MemoryRules.swa_branching): what
    # the release has, not a knob a user sets, so it is not in knobs().
    swa_branching: bool = True
    # Two rules of SGLang's spec-v2 result processing under its default loop, not knobs
    # either (the designs keep kvbench's rules). verify_commit, what a verify that accepts
    # past max_new_tokens commits and leaves to the tree (mini_engine/decode/verify_commit.py):
    # "owned" (0.5.23: the whole run, the tree keyed on min(committed, prompt +
    # finished_len), one slot more than a verify that ends on the limit), "whole" (0.5.18:
    # the whole run, the tree keyed on all of it), "cut" (the commit stops at the limit).
    # launch_finished: under overlap a batch is launched for requests the result in flight
    # then finishes (0.5.23: those not exactly one output short; 0.5.18: all), so its
    # result is processed one loop iteration later even when it finished every request of it.
    verify_commit: str = "cut"
    launch_finished: bool = False
    # SGLang 0.5.23's waiting-prefix refresh (mini_engine/scheduler/prefix_refresh.py): every
    # 32nd prefill pass that reaches its queue policy touches the waiting requests' cached
    # prefixes, so LRU eviction spares them. A loop rule, not a knob: 0.5.18 has no such
    # refresh, and the designs keep kvbench's tree recency.
    waiting_prefix_refresh: bool = False
    # Where a retracted request waits: at the back of the queue in retraction order, as
    # SGLang's update_running_batch queues them (_add_request_to_queue appends), or at the
    # front, kvbench's rule (older than anything waiting), which the designs keep. Not a knob.
    requeue_back: bool = False
    # The SGLang release whose rules the profile follows where the releases differ (the PD
    # decode side's budget, tail, match and eviction; 0.5.18's unrounded SWA window, its
    # tree cores) and whose code its traces conform against (SGLANG_VERSIONS); the designs
    # take 0.5.23's. In knobs(): a replay of the trace runs that release's tree code.
    release: str = "0.5.23"
    # Every writer page-ceils, whichever algorithms are registered (align "all"): what
    # host-aligned is named for, so a plugin's reservation is aligned under it too.
    align_all: bool = False
    # Knobs an override may not change: what the profile is named for.
    fixed: tuple[str, ...] = ()
    what_if: bool = False  # no shipped version behaves like this
    about: str = ""

    def __post_init__(self) -> None:
        unknown = set(self.align) - set(writers())
        if unknown:
            raise ConfigError(f"align must name writers among {', '.join(writers())}, or all / none "
                              f"(got {', '.join(sorted(unknown))})")
        check_choice("free", self.free, FREE_RULES)
        check_positive("swa_eviction_interval", self.swa_eviction_interval)
        check_choice("prefix_cache", self.prefix_cache, PREFIX_CACHES)
        check_choice("row_headroom", self.row_headroom, ROW_HEADROOM_RULES)
        check_choice("retraction", self.retraction, RETRACTIONS)
        check_choice("admission", self.admission, ADMISSIONS)
        check_choice("release", self.release, RELEASES)
        if not isinstance(self.overlap, bool):
            raise ConfigError(f"overlap must be on or off (got {self.overlap!r})")
        check_choice("overlap_plan", self.overlap_plan, OVERLAP_PLANS)
        check_choice("verify_commit", self.verify_commit, VERIFY_COMMITS)
        if not isinstance(self.row_overflow, bool):
            raise ConfigError(f"row_overflow must be true or false (got {self.row_overflow!r})")
        if not isinstance(self.pd_radix, bool):
            raise ConfigError(f"pd_radix must be true or false (got {self.pd_radix!r})")
        r = self.swa_ratio
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or not 0 < r <= 1:
            raise ConfigError(f"swa_ratio must be a number in (0, 1] (got {r!r})")

    def aligns(self, writer: str) -> bool:
        return self.align_all or writer in self.align

    @property
    def all_aligned(self) -> bool:
        return self.align_all or self.align >= set(writers())

    def aligned_writers(self) -> list[str]:
        return [w for w in writers() if self.aligns(w)]

    def memory_rules(self) -> MemoryRules:
        """The knobs the memory layer reads, as plain values (it never sees the profile)."""
        return MemoryRules(align=frozenset(self.aligned_writers()), all_aligned=self.all_aligned, free=self.free,
                           swa_eviction_interval=self.swa_eviction_interval,
                           prefix_cache=self.prefix_cache, pd_radix=self.pd_radix,
                           pd_radix_tail=self.pd_radix_tail,
                           row_overflow=self.row_overflow, swa_branching=self.swa_branching,
                           release=self.release,
                           header=self.knobs())

    def knobs(self) -> dict[str, Any]:
        """The knobs as plain JSON values (the trace header, a result row)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("fixed", "about", "align_all",
                                                                                  "swa_branching", "verify_commit",
                                                                                  "launch_finished",
                                                                                  "waiting_prefix_refresh",
                                                                                  "requeue_back")}
        out["align"] = self.aligned_writers()
        out["pd_radix_tail"] = self.pd_radix_tail  # what the trace needs of the release
        return out

    @property
    def swa_keep_unrounded(self) -> bool:
        """0.5.18's radix SWA eviction keeps max(window, ps) below pre_len without
        rounding it up to whole pages (free_swa_out_of_window_slots); kvbench models
        0.5.23's rounded rule only, so such a profile refuses a window that is not whole
        pages (EngineConfig). Only with the radix tree: the chunk cache keeps the window."""
        return self.release == "0.5.18" and self.prefix_cache == "radix"

    @property
    def pd_radix_tail(self) -> bool:
        """Whether the decode radix cache moves the PD SWA tail's window start (0.5.23's
        _swa_tail_len; 0.5.18's has no such variant)."""
        return self.release != "0.5.18"


_SGLANG = dict(free="segment", swa_eviction_interval=128, prefix_cache="radix", swa_ratio=0.8,
               pd_radix=False, row_headroom="sglang", row_overflow=True, retraction="sglang", admission="sglang",
               overlap=True)

PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("sglang-0.5.23", align=frozenset({"eagle", "dflash"}), **_SGLANG, verify_commit="owned",
            launch_finished=True, waiting_prefix_refresh=True, requeue_back=True,
            about="SGLang 0.5.23: only the speculative reservation is page-aligned; segment free"),
    Profile("sglang-pre-35265", align=frozenset({"eagle"}), **{**_SGLANG, "overlap_plan": "every-running", "free": "unique-row",
                                                    "swa_branching": False, "release": "0.5.18",
                                                    "verify_commit": "whole", "launch_finished": True,
                                                    "requeue_back": True},
            about="SGLang 0.5.18, the last release before PR 35265: the DFLASH reservation is unaligned "
                  "(EAGLE stays aligned), every running request is planned under overlap"),
    Profile("host-aligned", align=frozenset(), align_all=True, **{**_SGLANG, "free": "floor", "row_headroom": "generous", "row_overflow": False,
                                                              "overlap": False, "admission": "estimate"},
            fixed=("align", "free"),
            about="tracking issue 35223's target: every writer page-ceiled, whole-page host free"),
    Profile("floor-free", align=frozenset({"eagle"}), **{**_SGLANG, "free": "floor", "row_overflow": False, "overlap": False,
                                                      "admission": "estimate"},
            fixed=("free",),
            what_if=True,
            about="what-if: pre-35265 writers with a floor host free; the only profile whose release itself leaks"),
)}
DEFAULT_PROFILE = "sglang-0.5.23"
# The SGLang release each profile's traces conform against (kvbench conform refuses a
# trace on another version): its Profile.release. The designs have no release of their
# own: their allocator calls are checked on 0.5.23's allocator, where conform has always
# checked them.
SGLANG_VERSIONS = {name: p.release for name, p in PROFILES.items()}
# host-aligned and floor-free are designs, not releases: they keep kvbench's synchronous
# plan (overlap off) and its admission estimate, as before those knobs existed;
# --overlap on and --admission sglang give them SGLang's.


def parse_overlap(value: object) -> bool:
    """overlap as a bool, from "on" / "off" (a flag, a TOML string) or a TOML bool."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in OVERLAP:
        return value == "on"
    raise ConfigError(f"overlap must be on or off (got {value!r})")


def parse_align(value: object) -> frozenset[str] | str:
    """align as a set of writers, from "none", a comma list or a list; "all" stays
    "all" (every writer, those registered later too)."""
    if isinstance(value, (list, tuple, set, frozenset)):
        names = [str(v) for v in value]
    elif isinstance(value, str):
        if value == "all":
            return "all"
        if not value.strip():  # an unset shell variable, not a choice: "none" says no writer aligns
            raise ConfigError(f"align must be all, none or a comma list of {', '.join(writers())} (got an empty value)")
        names = [] if value == "none" else [v.strip() for v in value.split(",")]
    else:
        raise ConfigError(f"align must be all, none or a comma list of {', '.join(writers())} (got {value!r})")
    bad = [n for n in names if n not in writers()]
    if bad:
        raise ConfigError(f"align must be all, none or a comma list of {', '.join(writers())} (got {bad[0]!r})")
    return frozenset(names)


def resolve(name: str, *, policy: str | None = None, **overrides: Any) -> Profile:
    """The named profile with its knobs overridden (None: keep the profile's value).

    policy is the shorthand of the engine's first two switches: "aligned" aligns
    every writer (and gives rows the room an aligned writer needs), "unaligned"
    none. A knob the profile is named for cannot be changed: one line, bad input.
    """
    base = PROFILES[check_choice("profile", name, tuple(PROFILES))]
    knobs = {k: v for k, v in overrides.items() if v is not None}
    if policy is not None:
        check_choice("policy", policy, POLICIES)
        if "align" in knobs:
            raise ConfigError("policy and align both say which writers page-ceil; give one of them")
        knobs["align"] = "all" if policy == "aligned" else "none"
        if policy == "aligned":
            knobs.setdefault("row_headroom", "generous")
    if "align" in knobs:
        align = parse_align(knobs["align"])
        knobs["align_all"] = align == "all"
        knobs["align"] = frozenset() if align == "all" else align
    if "free" in knobs:
        check_choice("free", knobs["free"], FREE_RULES)
    if "overlap" in knobs:
        knobs["overlap"] = parse_overlap(knobs["overlap"])
    for k in base.fixed:
        if k == "align" and "align" in knobs:
            asked = replace(base, align=knobs["align"], align_all=knobs["align_all"])
            if asked.aligned_writers() != base.aligned_writers():
                raise ConfigError(f"align contradicts profile {name} (it is named for "
                                  f"align={','.join(base.aligned_writers())}); drop align or choose another profile")
            del knobs["align"], knobs["align_all"]
        elif k in knobs and knobs[k] != getattr(base, k):
            was = getattr(base, k)
            raise ConfigError(f"{k} contradicts profile {name} (it is named for {k}={was}); "
                              f"drop {k} or choose another profile")
    return replace(base, **knobs) if knobs else base
