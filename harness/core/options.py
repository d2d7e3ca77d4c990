"""The whole option schema: the engine's (mini_engine/config/options.py) plus the workload's.

One entry per option gives its CLI flag (``kvbench run``), its TOML key (a
``--config`` file, a suite's ``[defaults]``/``[axes]``), its short id and the
config id built from it: a result key (``spec=dflash,ps=16,bs=16,...``, also the
baseline key and the MLflow tag ``kvbench.key``) and a test id
(``spec:dflash-ps:16``, the options a suite varies) spell an option alike.
"""

from __future__ import annotations

from typing import Any

from harness.core.engine_option import ENGINE
from harness.core.workload_options import WORKLOAD
from harness.core.workloads import WorkloadConfig
from mini_engine import algos
from mini_engine.config.engine_config import EngineConfig
from mini_engine.config.option import Option
from mini_engine.config.options import engine_options


# Test ids spelt these options differently before the one schema; --filter still reads them.
ID_ALIASES = {"win": "window", "pat": "layer_pattern", "wl": "workload", "run": "max_running",
              "tau": "accept_mean", "dev": "device", "chunk": "chunked_prefill"}

# The options a result key always shows, in order (when set); the algorithm's own
# follow "page_size", the SWA pair shows only with a window. Any other option shows
# (sorted by name) where it differs from its default.
_KEY_HEAD = ("spec", "page_size")
_KEY_POLICY = ("profile", "policy", "free_policy")
_KEY_SWA = ("window", "layer_pattern")
_KEY_WORKLOAD = ("workload", "num_requests")


def options() -> tuple[Option, ...]:
    return engine_options() + WORKLOAD + (ENGINE,)


def by_name() -> dict[str, Option]:
    return {o.name: o for o in options()}


def short_names() -> dict[str, str]:
    """option -> its short id (test ids, result keys)."""
    return {o.name: o.id for o in options()}


def resolved_defaults() -> dict[str, Any]:
    """Every option's value in a config that sets none (the engine's defaults resolved)."""

    return {**EngineConfig().to_dict(), **WorkloadConfig().to_dict(), ENGINE.name: ENGINE.default}


def option_names() -> tuple[str, ...]:
    """Every option a config may set: the engine's, then the workload's, then which engine runs it."""

    return EngineConfig.option_names() + WorkloadConfig.option_names() + (ENGINE.name,)


def options_of_key(key: str) -> dict[str, str]:
    """A result key read back: every option's value as text, "none" for unset; an option
    the key leaves out is at its default (config_key writes only what differs)."""
    names = {**{o.name: o.name for o in options()}, **{o.id: o.name for o in options()}}
    out = {name: _text(v) for name, v in resolved_defaults().items()}
    for part in key.split(","):
        given, _, value = part.partition("=")
        if given in names:
            out[names[given]] = _text(None if value == "None" else value)
    return out


def _text(value: Any) -> str:
    return "none" if value is None else str(value)


def config_key(full: dict[str, Any]) -> str:
    """The result key of a resolved configuration (every option present)."""

    short = short_names()
    defaults = resolved_defaults()
    algo = algos.get(full["spec"])
    head = (*_KEY_HEAD, *(name for name, _ in algo.key_fields), *_KEY_POLICY,
            *(_KEY_SWA if full.get("window") is not None else ()), *_KEY_WORKLOAD)
    parts = [f"{short[name]}={full[name]}" for name in head if full.get(name) is not None]
    for name in sorted(full):
        if name in head or name not in short:
            continue
        value = full[name]
        if value is not None and value != defaults.get(name):
            parts.append(f"{short[name]}={value}")
    return ",".join(parts)
