"""One config on both engines, compared total by total and step by step (``kvbench conform --engine``).

The mini engine runs as ``kvbench run`` runs it, with a recorder on its per-step
sample (Stats.sample, after every step) that reads the same quantities the reference
engine reads from SGLang's components (sampler.py): requests running, pages used and
held, SWA pages held, hit tokens so far, retractions so far, evictable tree pages.
The first step where a series differs is named with its quantity and both values;
every total that differs is listed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from harness.core.run_spec import RunSpec
from harness.core.workloads import make_workload
from harness.reference import loader
from harness.reference.run import UnsupportedByReference, check_supported, run_reference
from harness.run.runner import as_spec
from mini_engine.scheduler.sessions import engine_for

# The totals compared (the metric names both rows carry).
TOTALS = ("steps", "prefill_steps", "decode_steps", "prefill_tokens", "output_tokens", "finished_requests",
          "peak_running", "peak_pages_used", "peak_pages_held", "peak_swa_pages_held", "prefix_hit_tokens",
          "retractions", "tree_pages", "tree_evictable_pages", "leaked_pages")
# The per-step quantities compared, in the order a first difference is looked for.
STEP_SERIES = ("running", "used", "held", "swa_held", "hits", "retractions", "evictable")


@dataclass
class Comparison:
    key: str
    totals: list[tuple[str, Any, Any]] = field(default_factory=list)  # (metric, mini, sglang) that differ
    first_step: tuple[int, str, int, int] | None = None  # (step, quantity, mini, sglang)
    steps: tuple[int, int] = (0, 0)  # steps run by (mini, sglang)
    error: str | None = None  # the reference's run failed
    seconds: float = 0.0  # both runs, wall clock (shown, never judged)
    mine: dict[str, Any] = field(default_factory=dict)  # the mini engine's TOTALS
    theirs: dict[str, Any] = field(default_factory=dict)  # the reference's TOTALS

    @property
    def equal(self) -> bool:
        return self.error is None and not self.totals and self.first_step is None and self.steps[0] == self.steps[1]


def mini_steps(spec: RunSpec) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """The mini engine's totals and its per-step STEP_SERIES for ``spec``."""
    cfg = spec.engine
    work = make_workload(spec.workload, cfg.seed, max_context=cfg.max_context)
    engine = engine_for(cfg, work.next_turns)
    engine.validate(work.requests)
    series: dict[str, list[int]] = {k: [] for k in STEP_SERIES}
    sample = engine.stats.sample

    def recorded(manager, running: int) -> None:
        sample(manager, running)
        prefix = manager.prefix
        tree = int(getattr(manager, "tree_pages", 0))
        for k, v in (("running", running), ("used", int(manager.pages_held) + tree),
                     ("held", int(manager.pages_in_use)), ("swa_held", int(manager.swa_pages_held)),
                     ("hits", prefix.hit_tokens if prefix is not None else 0),
                     ("retractions", engine.sched.retractions),
                     ("evictable", prefix.evictable_pages if prefix is not None else 0)):
            series[k].append(int(v))

    engine.stats.sample = recorded
    result = engine.run(work.requests)
    return result.stats, series


def compare(config: RunSpec | dict[str, Any]) -> Comparison:
    """``config`` (a spec, or a dict parsed once here) on the mini engine and on SGLang's
    loop: what differs, and where first."""
    spec = as_spec(config)
    loader.load()  # SGLang's import (once a process) is not the config's time
    t0 = time.perf_counter()
    ref = run_reference(spec)
    mini, steps = mini_steps(spec)
    out = Comparison(key=spec.key, seconds=time.perf_counter() - t0)  # the options, on both engines
    if ref["status"] == "failed":
        out.error = ref["error"].splitlines()[0]
        return out
    theirs, their_steps = ref["metrics"], ref["series"]
    out.mine, out.theirs = {m: mini.get(m) for m in TOTALS}, {m: theirs.get(m) for m in TOTALS}
    out.totals = [(m, mini.get(m), theirs.get(m)) for m in TOTALS if mini.get(m) != theirs.get(m)]
    out.steps = (len(steps["held"]), len(their_steps["held"]))
    for i in range(min(out.steps)):
        for q in STEP_SERIES:
            if steps[q][i] != their_steps[q][i]:
                out.first_step = (i, q, steps[q][i], their_steps[q][i])
                return out
    return out


def compare_suite(configs: list[tuple[str, RunSpec]]) -> Iterator[tuple[str, Comparison | str]]:
    """(id, Comparison) for each config the reference supports, (id, why not) for the others."""
    for cid, spec in configs:
        try:
            check_supported(spec.engine, spec.workload.to_dict(), loader.target())
        except UnsupportedByReference as err:
            yield cid, str(err)
            continue
        try:
            yield cid, compare(spec)
        except UnsupportedByReference as err:  # the mini engine's run failed: no output ids to replay
            yield cid, str(err)


def describe(c: Comparison) -> str:
    """One line per finding, the config's key first."""
    if c.error is not None:
        return f"{c.key}: SGLang's loop failed: {c.error}"
    if c.equal:
        return f"{c.key}: equal on every total and every step ({c.steps[0]} steps, {c.seconds:.1f} s)"
    lines = [f"{c.key}: differs ({c.seconds:.1f} s)"]
    if c.first_step is not None:
        step, q, a, b = c.first_step
        lines.append(f"  first differing step {step}: {q} mini {a}, sglang {b}")
    elif c.steps[0] != c.steps[1] and all(m != "steps" for m, _, _ in c.totals):
        lines.append(f"  steps: mini {c.steps[0]}, sglang {c.steps[1]} (every common step equal)")
    lines += [f"  {m}: mini {a}, sglang {b}" for m, a, b in c.totals]
    return "\n".join(lines)
