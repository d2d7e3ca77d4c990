"""The ``engine`` option: which engine runs a config (``mini``: kvbench's own; ``sglang``:
the installed SGLang's own scheduler loop, the reference, docs/reference.md).

A run option, not an engine or workload one: neither EngineConfig nor WorkloadConfig
holds it. Declared once here and joined to the schema (harness/core/options.py), so it is
``kvbench run --engine``, a suite's TOML key and axis, and shows in a result key (and so
the baseline key) as ``engine=sglang`` where it is not the default: a reference row never
meets the mini engine's baseline row of the same options.
"""

from __future__ import annotations

from typing import Any

from harness.core.errors import UsageError
from mini_engine.config.option import Option

ENGINES = ("mini", "sglang")
ENGINE = Option("engine", str, "mini", "mini: kvbench's engine; sglang: the installed SGLang's own scheduler loop "
                "with a stand-in forward (the reference, docs/reference.md)", choices=ENGINES, group="run")


def engine_of(config: dict[str, Any]) -> str:
    """The config's engine, validated (one line naming the choices, else)."""
    value = config.get("engine")
    if value is None:
        return ENGINE.default
    if value not in ENGINES:
        raise UsageError(f"engine must be one of {', '.join(ENGINES)} (got {value!r})")
    return value


def without_engine(config: dict[str, Any]) -> dict[str, Any]:
    """The config's engine and workload options: what EngineConfig and WorkloadConfig take."""
    return {k: v for k, v in config.items() if k != "engine"}
