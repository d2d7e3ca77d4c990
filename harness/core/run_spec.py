"""RunSpec: one run's config, parsed once where it enters (``kvbench run``, a suite's load).

A config arrives as a flat dict of options (a ``--config`` file and flags, a suite's
grid); ``RunSpec.parse`` splits it into the engine's options and the workload's, fills in
their defaults and checks them and their combination, once. Every layer below takes the
spec: the run, its bounds and capacity, a sweep's repeats, the reference engine, the
result key. None of them parses the dict again.

The engine's EngineConfig is mutable, but only while it is built (an algorithm fills in
its own defaults in ``resolve``, called from ``__post_init__``); a run reads it and writes
nothing into it, so one spec serves a config's warmup and every repeat.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from harness.core.engine_option import ENGINE, engine_of, without_engine
from harness.core.errors import UsageError
from harness.core.options import config_key
from harness.core.prefixes import check_fits
from harness.core.workloads import WorkloadConfig, check_given
from mini_engine.config.engine_config import EngineConfig


@dataclass(frozen=True)
class RunSpec:
    engine: EngineConfig
    workload: WorkloadConfig
    runs_on: str = ENGINE.default  # which engine runs it: "mini", or "sglang" (the reference)

    @classmethod
    def parse(cls, config: dict[str, Any]) -> RunSpec:
        """The one parse of a config dict: UsageError (the engine's ConfigError for an
        engine option) naming the first option that is wrong."""
        config = normalise(config)
        runs_on = engine_of(config)  # validated here, held by neither config
        engine, workload = _split(without_engine(config))
        cfg = EngineConfig.from_dict(engine)
        if cfg.model != "none" and "prompt_vocab" not in workload and "prompts" not in workload:
            # Synthetic prompts must be token ids the model knows: draw from its vocabulary.
            from mini_engine.model.loader import model_vocab_size  # torch: only a real model loads it

            workload["prompt_vocab"] = model_vocab_size(cfg.model)
        wl = WorkloadConfig(**workload)
        check_given(workload, wl, cfg.pd_radix, cfg.rules.prefix_cache)
        check_fits(wl.shared_prefix, cfg.max_context)
        return cls(cfg, wl, runs_on)

    def options(self) -> dict[str, Any]:
        """Every engine and workload option's value (a result row's ``config``)."""
        return {**self.engine.to_dict(), **self.workload.to_dict()}

    def resolved(self) -> dict[str, Any]:
        """Every option's value, the engine that runs it included."""
        return {**self.options(), ENGINE.name: self.runs_on}

    @cached_property
    def key(self) -> str:
        """The result key (harness/core/options.py spells it): the engine shows when not the default."""
        return config_key(self.resolved())

    def on(self, runs_on: str) -> RunSpec:
        """The same options on another engine."""
        return dataclasses.replace(self, runs_on=engine_of({ENGINE.name: runs_on}))


def normalise(config: dict[str, Any]) -> dict[str, Any]:
    """Option names as the schema spells them (a TOML key may use '-')."""
    if not isinstance(config, dict):
        raise UsageError(f"a configuration must be a table of options (got {type(config).__name__})")
    return {str(k).replace("-", "_"): v for k, v in config.items()}


def _split(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(engine options, workload options) as given; an option of neither is refused."""
    engine_names = set(EngineConfig.option_names())
    workload_names = set(WorkloadConfig.option_names())
    engine, workload = {}, {}
    for key, value in config.items():
        if key in engine_names:
            engine[key] = value
        elif key in workload_names:
            workload[key] = value
        else:
            allowed = ", ".join(sorted(engine_names | workload_names | {ENGINE.name}))
            raise UsageError(f"unknown option {key!r} (allowed: {allowed})")
    return engine, workload
