"""The result of a run: its figures, violations, outputs and verdict."""

from __future__ import annotations

from dataclasses import dataclass, field

from mini_engine.request import Request, Status

MAX_SAMPLES = 20


@dataclass
class RunResult:
    stats: dict[str, float | int]
    series: dict[str, list[int]]
    violations: dict[str, int]
    violation_samples: list[dict]
    outputs: dict[int, list[int]]
    verdict: str  # ok | violated | pool_exhausted
    error: str | None = None
    requests: list[Request] = field(default_factory=list)


def unfinished(reqs: list[Request]) -> int:
    return sum(r.status not in (Status.FINISHED, Status.ABORTED) for r in reqs)


def run_result(engine, reqs: list[Request], verdict: str, wall: float) -> RunResult:
    """The RunResult of ``engine``'s run of ``reqs`` (its stats take their final counts)."""
    engine.stats.retractions = engine.sched.retractions
    engine.stats.swa_retractions = engine.sched.swa_retractions
    engine.stats.row_overflow_slots = engine.manager.row_overflow_slots
    engine.stats.release_syncs = engine.manager.release_syncs
    engine.stats.row_overwritten_slots = engine.manager.row_overwritten_slots
    counts = dict(engine.auditor.counts)
    total = sum(counts.values())
    if verdict == "ok" and total:
        verdict = "violated"
    stats = engine.stats.finalize(
        wall_s=wall, syncs=int(engine.manager.syncs), leaked_pages=int(engine.manager.leaked_pages("full")),
        leaked_swa_pages=int(engine.manager.leaked_pages("swa")),
        requests=len(reqs), finished=sum(r.status is Status.FINISHED for r in reqs), violations=total,
        aborted=sum(r.status is Status.ABORTED for r in reqs),
    )
    stats.update(prefix_figures(engine.manager))
    samples = [{"id": v.id, "rid": v.rid, "step": v.step, "values": _plain(v.values)}
               for v in engine.auditor.records[:MAX_SAMPLES]]
    return RunResult(
        stats=stats, series=engine.stats.series, violations=counts, violation_samples=samples,
        outputs={r.rid: list(r.outputs) for r in reqs}, verdict=verdict, error=engine.error,
        requests=reqs,
    )


def _plain(values: dict) -> dict:
    """Violation values as JSON-friendly Python scalars (they may hold numpy ints)."""
    out = {}
    for k, v in values.items():
        if hasattr(v, "tolist"):
            v = v.tolist()
        out[str(k)] = v if isinstance(v, (int, float, str, bool, list, type(None))) else str(v)
    return out


def prefix_figures(manager) -> dict[str, float | int]:
    """The prefix tree's figures after the drain (0 without a tree: chunk cache, SWA, PD decode)."""
    prefix = manager.prefix
    if prefix is None:
        return {"tree_pages": 0, "tree_evictable_pages": 0, "tree_evicted_pages": 0,
                "prefix_hit_tokens": 0, "prefix_hit_rate": 0.0, "readmit_hit_tokens": 0}
    return {"tree_pages": prefix.pages, "tree_evictable_pages": prefix.evictable_pages,
            "tree_evicted_pages": prefix.evicted_pages, "prefix_hit_tokens": prefix.hit_tokens,
            "prefix_hit_rate": prefix.hit_tokens / prefix.lookup_tokens if prefix.lookup_tokens else 0.0,
            "readmit_hit_tokens": prefix.readmit_hit_tokens}
