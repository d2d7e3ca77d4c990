"""Replay an allocation trace on fresh allocators and report the first divergence.

Every allocator call is re-run and its out / available compared with the record;
planning records (prepare, swa_prealloc) are recomputed from the sizing formulas;
the prefix tree's records (trace version 2) run on a fresh tree (tree_replay.py), the
SWA-aware tree's (``swa_`` records) on a fresh SWA tree (swa_tree_replay.py). The file
is read and checked by memory/trace/reader.py, as conform reads it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Mapping

from mini_engine.errors import KVBenchError, TraceError
from mini_engine.memory.pool.allocator import PagedAllocator
from mini_engine.memory.replay.swa_tree_replay import SWATreeReplay
from mini_engine.memory.replay.tree_replay import TreeReplay
from mini_engine.memory.sizing import next_extents, pd_swa_tail_len
from mini_engine.memory.trace.reader import (_short, check_algos, check_profile, header_pd_radix, pool_need_sort,
                                             prepare_aligned, read_trace)
from mini_engine.memory.trace.tree_calls import SWA_TREE_OPS, TREE_OPS


@dataclass
class Divergence:
    call: int  # 1-based index among the records after the header
    line: int
    op: str
    field: str
    expected: object
    got: object

    def __str__(self) -> str:
        return (f"call {self.call} (line {self.line}) {self.op}: {self.field} expected "
                f"{_short(self.expected)}, got {_short(self.got)}")


@dataclass
class ReplayReport:
    calls: int = 0
    divergences: int = 0
    first_divergence: Divergence | None = None
    seconds_per_call: float = 0.0
    allocator_calls: int = 0
    tree_calls: int = 0  # match, insert, lock, unlock and evict records
    all_divergences: list[Divergence] = field(default_factory=list, repr=False)


def replay(path: str | os.PathLike, algorithms: Mapping[str, str],
           releases: Mapping[str, str] | None = None) -> ReplayReport:
    """Replay the trace at ``path`` on fresh allocators; ``algorithms``: the algorithms a
    trace may name (``mini_engine.algos.writers()``); ``releases``: each profile's SGLang
    release (``mini_engine.config.profiles.SGLANG_VERSIONS``), which the header must agree with."""
    path = os.fspath(path)
    head, records = read_trace(path)
    check_profile(path, head, records, releases)
    check_algos(path, head.get("config") or {}, records, algorithms)  # as conform does: an unknown one is bad input
    ps = head["page_size"]
    need_sort = pool_need_sort(path, records)
    pd_radix = header_pd_radix(path, head)
    pools = {"full": PagedAllocator(head["num_pages"], ps, "full", need_sort=need_sort.get("full", False))}
    if head.get("swa_num_pages"):
        pools["swa"] = PagedAllocator(head["swa_num_pages"], ps, "swa", need_sort=need_sort.get("swa", False))

    # Warm numpy's first-call paths on a scratch allocator, so a short trace's
    # per-call figure measures the allocator, not the interpreter warming up.
    scratch = PagedAllocator(4, ps)
    for _ in range(3):
        got = scratch.allocate([0, 0], [ps, 1], [-1, -1])
        scratch.free_pages(got.pages)

    report = ReplayReport()
    spent = 0.0
    tree = TreeReplay(ps)
    swa_tree = SWATreeReplay(head, tree.tokens)  # the SWA-aware tree's records (the same tokens records)

    def diverge(rec_no: int, lineno: int, op: str, fld: str, expected, got) -> None:
        d = Divergence(rec_no, lineno, op, fld, expected, got)
        report.divergences += 1
        if report.first_divergence is None:
            report.first_divergence = d
        if len(report.all_divergences) < 100:
            report.all_divergences.append(d)

    # Where the engine cut a reservation: the row's end, unless its profile wrote past the
    # row as SGLang does (row_overflow; a trace from before the knob was cut).
    cut_at = None if (head.get("profile") or {}).get("row_overflow", False) is True else head.get("row_width")
    for lineno, rec in records:
        report.calls += 1
        n, op = report.calls, rec["op"]
        if op in ("prepare", "swa_prealloc"):
            _check_plan(rec, ps, pd_radix, lambda f, e, g: diverge(n, lineno, op, f, e, g), path, lineno,
                        cut_at)
            continue
        if op in TREE_OPS or op in SWA_TREE_OPS:
            report.tree_calls += op not in (*TREE_OPS[:2], SWA_TREE_OPS[0])
            try:
                found = (swa_tree if op in SWA_TREE_OPS else tree).check(rec)
            except ValueError as err:
                raise TraceError(f"{path}: line {lineno} ({op}) cannot be replayed: {err}") from None
            for fld, expected, got in found:
                diverge(n, lineno, op, fld, expected, got)
            continue
        spent += _replay_alloc(pools[rec.get("pool", "full")], rec, lambda f, e, g: diverge(n, lineno, op, f, e, g))
        report.allocator_calls += 1
    report.seconds_per_call = spent / report.allocator_calls if report.allocator_calls else 0.0
    return report


def _replay_alloc(alloc: PagedAllocator, rec: dict, diverge) -> float:
    """Re-run one allocator record on ``alloc``; each field it gets otherwise goes to
    ``diverge(field, expected, got)``. Returns the seconds the call took."""
    op = rec["op"]
    t0 = time.perf_counter()
    try:
        if op == "alloc_extend":
            got = alloc.allocate(rec["prefix_lens"], rec["seq_lens"], rec["last_locs"],
                                 decode=rec.get("decode", False))
            got = None if got is None else [g.tolist() for g in got.split()]
        elif op == "free":
            alloc.free(rec["indices"])
        else:
            alloc.free_pages(rec["page_ids"])
    except (KVBenchError, ValueError, TypeError, IndexError) as err:
        spent = time.perf_counter() - t0
        diverge("result", "success", f"error: {err}")
        return spent
    spent = time.perf_counter() - t0
    if op == "alloc_extend" and got != rec["out"]:
        diverge("out", rec["out"], got)
    if alloc.available_size() != rec["available"]:
        diverge("available", rec["available"], alloc.available_size())
    return spent


def _check_plan(rec: dict, ps: int, pd_radix: bool, diverge, path: str, lineno: int,
                row_width: int | None = None) -> None:
    try:
        if rec["op"] == "prepare":
            for i, r in enumerate(rec["reqs"]):
                nxt = int(next_extents(r["cur"], r["committed"], rec["reserve"], ps, prepare_aligned(rec)))
                if row_width is not None:
                    nxt = min(nxt, row_width)  # the engine cuts a reservation at the row's end (K4)
                if nxt != r["nxt"]:
                    diverge(f"reqs[{i}].nxt", r["nxt"], nxt)
        else:
            tail = pd_swa_tail_len(rec["fill_len"], rec["window"], ps, pd_radix)
            if tail != rec["tail"]:
                diverge("tail", rec["tail"], tail)
            if rec["fill_len"] - tail != rec["evicted"]:
                diverge("evicted", rec["evicted"], rec["fill_len"] - tail)
    except (KeyError, TypeError, KVBenchError) as err:
        raise TraceError(f"{path}: line {lineno} ({rec['op']}) is malformed ({err})") from None
