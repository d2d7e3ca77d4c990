"""What the step loop counts (DESIGN.md section 3), as plain ints and floats.

Every figure is read from host counters the memory layer keeps anyway, so
sampling after each step costs a few attribute reads, never a device read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mini_engine.memory.manager import WRITER_KINDS


@dataclass
class Stats:
    page_size: int
    max_accept: int
    swa: bool = False  # an SWA pool exists (its copy of the last page leaks alike)
    steps: int = 0
    prefill_steps: int = 0
    decode_steps: int = 0
    prefill_tokens: int = 0
    output_tokens: int = 0
    spec_verifies: int = 0  # one per request per spec step
    accepted_tokens: int = 0  # bonus included
    plan_s: float = 0.0  # host planning time of decode steps (retract, evict, reserve + allocate)
    result_s: float = 0.0  # host time processing decode results (commits, outputs, finishes)
    peak_pages_held: int = 0
    # The pool's use with the prefix tree counted (requests + tree): SGLang's total - free.
    peak_pages_used: int = 0
    peak_tree_pages: int = 0
    peak_reserved_slots: int = 0
    peak_stranded_slots: int = 0
    stranded_slots_sum: int = 0
    peak_running: int = 0
    retractions: int = 0
    swa_retractions: int = 0
    row_overflow_slots: int = 0
    release_syncs: int = 0  # set at the end of a run from the pools (KVManager.release_syncs)
    row_overwritten_slots: int = 0
    peak_swa_pages_held: int = 0
    peak_stranded_by: dict[str, int] = field(default_factory=lambda: {k: 0 for k in WRITER_KINDS})
    releases: int = 0
    predicted_leaked_pages: int = 0
    predicted_leaked_swa_pages: int = 0
    pd_arrivals: int = 0
    clipped_requests: int = 0  # outputs SGLang clips at arrival to what an empty pool holds
    clipped_output_tokens: int = 0
    peak_compact_draft_len: int = 0
    # Reserved ahead of the true committed lengths (in-flight results counted), right after
    # each decode reservation; under overlap, the extra reservations of requests the
    # in-flight result finishes (mini_engine.scheduler.overlap).
    peak_reserved_ahead_slots: int = 0
    reserved_ahead_slots_sum: int = 0
    overlap_extra_reservations: int = 0
    overlap_extra_slots: int = 0
    series: dict[str, list[int]] = field(default_factory=lambda: {"stranded": [], "reserved": [], "held": [],
                                                                  "swa_held": []})

    def on_release(self, extent: int, free_rule: str) -> None:
        # DESIGN.md: a floor free returns extent // ps pages; an unaligned
        # extent leaves its last page behind, one leaked page per such release.
        self.releases += 1
        if free_rule == "floor" and extent % self.page_size:
            self.predicted_leaked_pages += 1
            # The SWA cursor is page-floored below the extent, so the SWA pool holds
            # a copy of that last page too and drops it the same way.
            self.predicted_leaked_swa_pages += self.swa

    def sample(self, manager, running: int) -> None:
        stranded = int(manager.stranded_slots)
        reserved = int(manager.reserved_unwritten_slots)
        held = int(manager.pages_in_use)  # own pages + locked prefix pages (memory/tree/prefix.py)
        self.series["stranded"].append(stranded)
        self.series["reserved"].append(reserved)
        self.series["held"].append(held)
        swa_held = int(manager.swa_pages_held)
        self.series["swa_held"].append(swa_held)
        self.peak_swa_pages_held = max(self.peak_swa_pages_held, swa_held)
        for k, v in manager.stranded_by_writer.items():
            if v > self.peak_stranded_by[k]:
                self.peak_stranded_by[k] = v
        self.stranded_slots_sum += stranded
        self.peak_stranded_slots = max(self.peak_stranded_slots, stranded)
        self.peak_reserved_slots = max(self.peak_reserved_slots, reserved)
        self.peak_pages_held = max(self.peak_pages_held, held)
        tree = int(getattr(manager, "tree_pages", 0))
        self.peak_tree_pages = max(self.peak_tree_pages, tree)
        self.peak_pages_used = max(self.peak_pages_used, int(manager.pages_held) + tree)  # own + the whole tree
        self.peak_running = max(self.peak_running, running)

    def finalize(self, *, wall_s: float, syncs: int, leaked_pages: int, leaked_swa_pages: int, requests: int,
                 finished: int, violations: int, aborted: int = 0) -> dict[str, float | int]:
        tau = self.accepted_tokens / self.spec_verifies if self.spec_verifies else 0.0
        drafts = self.max_accept - 1
        wall = max(wall_s, 1e-9)
        return {
            "steps": self.steps,
            "prefill_steps": self.prefill_steps,
            "decode_steps": self.decode_steps,
            "requests": requests,
            "finished_requests": finished,
            "aborted_requests": aborted,
            "prefill_tokens": self.prefill_tokens,
            "output_tokens": self.output_tokens,
            "wall_s": wall_s,
            "output_tokens_per_s": self.output_tokens / wall,
            "steps_per_s": self.steps / wall,
            "requests_per_s": finished / wall,
            "tau": tau,
            # Accepted drafts over drafted tokens: the bonus token is not a draft.
            "acceptance_rate": (tau - 1.0) / drafts if self.spec_verifies and drafts > 0 else 0.0,
            "plan_us_per_decode_step": 1e6 * self.plan_s / self.decode_steps if self.decode_steps else 0.0,
            "result_us_per_decode_step": 1e6 * self.result_s / self.decode_steps if self.decode_steps else 0.0,
            "syncs": syncs,
            "syncs_per_step": syncs / self.steps if self.steps else 0.0,
            "release_syncs": self.release_syncs,
            "peak_pages_held": self.peak_pages_held,
            "peak_pages_used": self.peak_pages_used,
            "peak_tree_pages": self.peak_tree_pages,
            "peak_reserved_slots": self.peak_reserved_slots,
            "peak_stranded_slots": self.peak_stranded_slots,
            "stranded_slots_sum": self.stranded_slots_sum,
            **{f"peak_stranded_slots_{k}": v for k, v in self.peak_stranded_by.items()},
            "peak_swa_pages_held": self.peak_swa_pages_held,
            "leaked_pages": leaked_pages,
            "predicted_leaked_pages": self.predicted_leaked_pages,
            "leaked_swa_pages": leaked_swa_pages,
            "predicted_leaked_swa_pages": self.predicted_leaked_swa_pages,
            "peak_running": self.peak_running,
            "retractions": self.retractions,
            "swa_retractions": self.swa_retractions,
            "row_overflow_slots": self.row_overflow_slots,
            "row_overwritten_slots": self.row_overwritten_slots,
            "releases": self.releases,
            "pd_arrivals": self.pd_arrivals,
            "clipped_requests": self.clipped_requests,
            "clipped_output_tokens": self.clipped_output_tokens,
            "peak_compact_draft_len": self.peak_compact_draft_len,
            "peak_reserved_ahead_slots": self.peak_reserved_ahead_slots,
            "reserved_ahead_slots_sum": self.reserved_ahead_slots_sum,
            "overlap_extra_reservations": self.overlap_extra_reservations,
            "overlap_extra_slots": self.overlap_extra_slots,
            "violations": violations,
        }
