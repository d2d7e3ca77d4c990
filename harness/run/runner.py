"""run_config: the one execution path for one configuration.

``kvbench run``, the sweeps and the pytest suites all call it. A configuration is
a RunSpec (harness/core/run_spec.py: the engine's EngineConfig and the workload's
WorkloadConfig, parsed once where the config entered), or a flat dict of their
options that is parsed once here; the result row is JSON-serialisable. Bad options raise
UsageError (the engine's ConfigError for an engine option); anything that breaks
inside the run becomes status 'failed' with its error text, so a sweep records it
and goes on.
"""

from __future__ import annotations

import os
import traceback
from contextlib import nullcontext
from typing import Any

from harness.core.engine_option import ENGINE
from harness.core.errors import UsageError
from harness.core.kv_units import derive
from harness.core.run_spec import RunSpec
from harness.core.safe_write import replacing
from harness.core.workloads import make_workload
from harness.run.hardware import RssPeak
from mini_engine.config.engine_config import read_tables
from mini_engine.errors import ConfigError, KVBenchError


_TABLES = ("engine", "workload")  # the tables of a run's config file


def load_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The options of a run's TOML file (``kvbench run --config``), flat: top-level keys
    and the [engine] and [workload] tables merged in; RunSpec.parse says whose each is."""

    return read_tables(path, _TABLES, UsageError)  # a missing or malformed file: one line


def as_spec(config: RunSpec | dict[str, Any]) -> RunSpec:
    """The spec itself, or a config dict from outside parsed once (tests, scripts)."""
    return config if isinstance(config, RunSpec) else RunSpec.parse(config)


def run_config(config: RunSpec | dict[str, Any], *, trace: str | None = None,
               outputs: bool = False) -> dict[str, Any]:
    """Run one configuration (a spec, or a dict parsed once here) and return its result row.

    ``outputs`` adds every request's prompt and output ids; ``trace`` writes the
    allocation trace to that file.
    """
    from mini_engine.engine import open_trace  # numpy: the memory layer loads only when a run starts
    from mini_engine.scheduler.sessions import engine_for  # numpy: optional, loaded only on this path

    spec = as_spec(config)
    if spec.runs_on != ENGINE.default:  # the reference's own path (harness/reference/run.py)
        raise UsageError(f"run_config runs the mini engine; engine={spec.runs_on} is run by its own path")
    cfg, full = spec.engine, spec.options()
    row: dict[str, Any] = {
        "key": spec.key, "config": full, "metrics": {}, "series": {},
        "violations": {}, "violation_samples": [], "status": "failed", "error": None,
    }
    work = make_workload(spec.workload, cfg.seed, max_context=cfg.max_context)
    reqs = work.requests
    # The trace is ours: the one ``with`` closes it, so a run that raises keeps every
    # record written before the failing call. The RSS peak spans the engine's
    # construction (its pools and rows) and its run.

    # The trace file appears whole when the run ends (safe_write), never through a link.
    with RssPeak() as rss, replacing(trace, "--trace") if trace else nullcontext() as fh, \
            open_trace(cfg, fh) if trace else nullcontext() as writer:
        engine = engine_for(cfg, work.next_turns, trace=writer)  # later turns arrive as earlier ones finish
        engine.validate(reqs)
        try:
            result = engine.run(reqs)
        except ConfigError:  # bad input found inside the run is still bad input, not a result
            raise
        except KVBenchError as err:
            row["error"] = f"{type(err).__name__}: {err}"
            return row
        except Exception as err:  # a crash inside the run is a result, not a lost sweep
            row["error"] = f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=8)}"
            return row

    metrics = {**result.stats, "rss_peak_bytes": rss.bytes}
    metrics.update(derive(full, metrics, result.series))  # tokens and bytes beside the pages
    row.update(
        metrics=metrics, series=result.series, violations=result.violations,
        violation_samples=result.violation_samples, status=result.verdict, error=result.error,
    )
    if outputs:
        row["outputs"] = [
            {"rid": r.rid, "prompt": list(r.prompt), "output": list(r.outputs), "fill_len": r.fill_len}
            for r in result.requests
        ]
    return row
