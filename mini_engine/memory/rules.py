"""MemoryRules: the accounting knobs the memory layer reads, as plain values.

The engine's profiles (mini_engine.config.profiles) name a production version and resolve
its knobs; the memory layer reads only the few below, handed to it in MemoryConfig,
so it imports nothing from the engine above it. A memory-only caller (a test, a
replay) gets SGLang 0.5.23's rules, or the policy / free / prefix-cache shorthands.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mini_engine.errors import check_choice, check_positive

# The vocabularies of the memory knobs, defined here once (the profiles import them).
FREE_RULES = ("segment", "floor", "dedup", "unique-row")
PREFIX_CACHES = ("radix", "chunk")
POLICIES = ("aligned", "unaligned")  # shorthand for align: every writer or none
# The SGLang releases whose memory-layer code differs where MemoryRules.release says.
RELEASES = ("0.5.23", "0.5.18")
AUDIT_MODES = ("record", "raise", "off")  # the auditor's: off, record violations, or raise on the first
# Who wrote an extent last, as the stranded-slot counters name them (kv_state stores an
# index into this tuple; the harness declares one metric per kind).
WRITER_KINDS = ("prefill", "decode", "spec", "pd")
# The align knob names the same writers as SGLang's allocation paths: the prefill chunk's
# alloc_extend is "extend". Declared here once, kind -> knob name; "spec" has none, as
# each speculative algorithm aligns by its own name (the registry's). Both names are
# read back from configs, traces and results, so neither is renamed into the other.
ALIGN_NAMES = {"prefill": "extend", "decode": "decode", "pd": "pd"}
# Writers every engine has, as the align knob names them; each algorithm adds its own.
BASE_WRITERS = tuple(ALIGN_NAMES.values())


@dataclass(frozen=True)
class MemoryRules:
    align: frozenset[str] = frozenset({"eagle", "dflash"})  # writers that page-ceil their extent
    # Every writer page-ceils (no slot is ever stranded); aligns() is then true for any writer.
    all_aligned: bool = False
    free: str = "segment"  # the free rule of a finished request: segment | floor | dedup | unique-row
    swa_eviction_interval: int = 128  # a decode step evicts once committed - window >= cursor + this
    prefix_cache: str = "radix"  # radix: a prefix tree (full attention) and its SWA threshold; chunk: neither
    pd_radix: bool = False  # the decode side's radix cache (the PD tail rule)
    # 0.5.23's decode-radix PD rules for the SWA tail: the cache moves the tail's window
    # start (_swa_tail_len), a match stops below the tail (max_prefix_len) and a hit keeps
    # the tail path. 0.5.18 has none of them: its match takes the whole prompt and a hit
    # allocates the SWA pool past it in full.
    pd_radix_tail: bool = True
    # A reservation past the row's end is allocated whole and written on into the next
    # row, as SGLang's is (issue 33579; mini_engine.memory.extents.overflow); False: cut at the end.
    row_overflow: bool = True
    # The SWA-aware tree's branching point (0.5.23's swa_branching_seqlen): a match whose
    # FULL hit runs past its SWA-valid part cuts the request's next checkpoint insert
    # there, so the shared prefix gets live SWA again. 0.5.18 has no such point.
    swa_branching: bool = True
    # Whose tree code, where the releases' differ: how a checkpoint frees the row's copies
    # of what the tree already held (0.5.23's UnifiedRadixCache inside the insert, one free
    # per tree node it walked; 0.5.18's RadixCache caller the whole range in one call:
    # memory/tree/prefix.py), and the SWA-aware tree core (0.5.18's orders the SWA LRU otherwise
    # after a split, and its SWA lock passes over tombstones: memory/tree/swa_radix.py).
    release: str = "0.5.23"
    # The whole profile's knobs for the trace header (None: these rules'), so a trace
    # replays on its own terms; not a rule the memory layer reads.
    header: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_choice("free", self.free, FREE_RULES)
        check_choice("prefix_cache", self.prefix_cache, PREFIX_CACHES)
        check_positive("swa_eviction_interval", self.swa_eviction_interval)
        check_choice("release", self.release, RELEASES)

    @classmethod
    def of(cls, policy: str | None = None, free: str | None = None,
           prefix_cache: str | None = None) -> MemoryRules:
        """SGLang 0.5.23's rules with the shorthands applied (None: keep the default)."""
        knobs: dict[str, Any] = {}
        if policy is not None:
            check_choice("policy", policy, POLICIES)
            knobs.update(align=frozenset(BASE_WRITERS) if policy == "aligned" else frozenset(),
                         all_aligned=policy == "aligned")
        if free is not None:
            knobs["free"] = check_choice("free_policy", free, FREE_RULES)
        if prefix_cache is not None:
            knobs["prefix_cache"] = prefix_cache
        return cls(**knobs)

    def aligns(self, writer: str) -> bool:
        return self.all_aligned or writer in self.align

    @property
    def dedup_per_node(self) -> bool:
        """A checkpoint frees the row's copies of what the tree held one call per tree node
        the insert walked (0.5.23's UnifiedRadixCache); 0.5.18's caller frees the range once."""
        return self.release != "0.5.18"

    def knobs(self) -> dict[str, Any]:
        """The knobs as plain JSON values (the trace header)."""
        if self.header is not None:
            return dict(self.header)
        return {"align": sorted(self.align), "all_aligned": self.all_aligned, "free": self.free,
                "swa_eviction_interval": self.swa_eviction_interval,
                "prefix_cache": self.prefix_cache, "pd_radix": self.pd_radix, "row_overflow": self.row_overflow,
                "pd_radix_tail": self.pd_radix_tail, "swa_branching": self.swa_branching, "release": self.release}
