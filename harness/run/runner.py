"""run_config: the one execution path for one configuration.

``kvbench run``, the sweeps and the pytest suites all call it. A configuration is
a flat dict of engine options (EngineConfig) and workload options
(WorkloadConfig); the result row is JSON-serialisable. Bad options raise
UsageError (the engine's ConfigError for an engine option); anything that breaks
inside the run becomes status 'failed' with its error text, so a sweep records it
and goes on.
"""

from __future__ import annotations

import os
import traceback
from contextlib import nullcontext
from typing import Any

from harness.core.engine_option import ENGINE, engine_of, without_engine
from harness.core.errors import UsageError
from harness.core.kv_units import derive
from harness.core.options import config_key as key_of
from harness.core.prefixes import check_fits
from harness.core.safe_write import replacing
from harness.core.workloads import WorkloadConfig, check_given, make_workload
from harness.run.hardware import RssPeak
from mini_engine.config import EngineConfig, read_tables
from mini_engine.errors import ConfigError, KVBenchError


_TABLES = ("engine", "workload")  # the tables of a run's config file


def _normalise(config: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(config, dict):
        raise UsageError(f"a configuration must be a table of options (got {type(config).__name__})")
    return {str(k).replace("-", "_"): v for k, v in config.items()}


def load_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The options of a run's TOML file (``kvbench run --config``), flat: top-level keys
    and the [engine] and [workload] tables merged in; split_config says whose each is."""

    return read_tables(path, _TABLES, UsageError)  # a missing or malformed file: one line


def split_config(config: dict[str, Any]) -> tuple[EngineConfig, dict[str, Any]]:
    """(validated EngineConfig, validated workload options with defaults filled in)."""
    engine_names = set(EngineConfig.option_names())
    workload_names = set(WorkloadConfig.option_names())
    engine, workload = {}, {}
    config = _normalise(config)
    engine_of(config)  # which engine runs it: validated here, held by neither config
    for key, value in without_engine(config).items():
        if key in engine_names:
            engine[key] = value
        elif key in workload_names:
            workload[key] = value
        else:
            allowed = ", ".join(sorted(engine_names | workload_names | {ENGINE.name}))
            raise UsageError(f"unknown option {key!r} (allowed: {allowed})")
    cfg = EngineConfig.from_dict(engine)
    if cfg.model != "none" and "prompt_vocab" not in workload and "prompts" not in workload:
        # Synthetic prompts must be token ids the model knows: draw from its vocabulary.
        from mini_engine.model.loader import model_vocab_size  # torch: only a real model loads it

        workload["prompt_vocab"] = model_vocab_size(cfg.model)
    wl = WorkloadConfig(**workload)
    check_given(workload, wl, cfg.pd_radix, cfg.rules.prefix_cache)
    check_fits(wl.shared_prefix, cfg.max_context)
    return cfg, wl.to_dict()


def resolved_config(config: dict[str, Any]) -> dict[str, Any]:
    """Every option's value, the engine that runs it included."""
    cfg, wl = split_config(config)
    return {**cfg.to_dict(), **wl, ENGINE.name: engine_of(_normalise(config))}


def config_key(config: dict[str, Any]) -> str:
    """A stable, readable key: the main axes always, any other option when not default."""
    return _key(resolved_config(config))


def _key(full: dict[str, Any]) -> str:
    """config_key of an already resolved configuration (its spelling: harness/core/options.py)."""

    return key_of(full)


def run_config(config: dict[str, Any], *, trace: str | None = None, outputs: bool = False) -> dict[str, Any]:
    """Run one configuration and return its result row.

    ``outputs`` adds every request's prompt and output ids; ``trace`` writes the
    allocation trace to that file.
    """
    from mini_engine.engine import open_trace  # numpy: the memory layer loads only when a run starts
    from mini_engine.scheduler.sessions import engine_for  # numpy: optional, loaded only on this path

    if engine_of(_normalise(config)) != ENGINE.default:  # the reference's own path (harness/reference/run.py)
        raise UsageError(f"run_config runs the mini engine; engine={engine_of(_normalise(config))} is run by its own path")
    cfg, wl = split_config(config)
    full = {**cfg.to_dict(), **wl}
    row: dict[str, Any] = {
        "key": _key(full), "config": full, "metrics": {}, "series": {},
        "violations": {}, "violation_samples": [], "status": "failed", "error": None,
    }
    work = make_workload(WorkloadConfig(**wl), cfg.seed, max_context=cfg.max_context)
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
