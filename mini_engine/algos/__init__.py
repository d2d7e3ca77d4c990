"""Decoding algorithms by name: ``get("dflash")`` is the DFLASH object.

Adding an algorithm is one module with an ``Algorithm`` subclass that calls
``register(MyAlgorithm())`` (docs/algorithms.md). A module outside this package is
loaded by naming it in ``KVBENCH_PLUGINS`` (comma-separated import paths), which is
read here, before ``mini_engine.config.engine_config`` builds ``EngineConfig`` from the schema,
so the plugin's own options become engine options, CLI flags and TOML keys.
"""

from __future__ import annotations

import importlib
import os
import sys

from mini_engine.algos.base import ROW_HEADROOM_RULES, Algorithm
from mini_engine.algos.dflash import DFlash
from mini_engine.algos.eagle import Eagle
from mini_engine.algos.ngram import Ngram
from mini_engine.algos.none import Plain
from mini_engine.errors import ConfigError, check_choice

ALGORITHMS: dict[str, Algorithm] = {}
SPECS: list[str] = []  # the registered names, in order (a list, so a late registration shows everywhere)
PLUGINS_ENV = "KVBENCH_PLUGINS"


def register(algo: Algorithm) -> Algorithm:
    """Add an algorithm under its name. Its options must be new or agree with an existing one's."""
    if not isinstance(algo, Algorithm):
        raise ConfigError(f"register() takes an Algorithm instance (got {type(algo).__name__})")
    if algo.name in ALGORITHMS:
        raise ConfigError(f"an algorithm named {algo.name!r} is already registered")
    built = getattr(sys.modules.get("mini_engine.config.engine_config"), "EngineConfig", None)
    if built is not None:  # EngineConfig is built: a new option has no field to live in
        fields = set(built.option_names())
        late = [o.name for o in algo.options if o.name not in fields]
        if late:
            raise ConfigError(f"algorithm {algo.name!r} declares new options ({', '.join(late)}) after "
                              f"mini_engine.config.engine_config was imported; load it through {PLUGINS_ENV}")
    ALGORITHMS[algo.name] = algo
    SPECS.append(algo.name)
    return algo


def writers() -> dict[str, str]:
    """Each registered algorithm's name -> the writer its plans are traced under (a trace's
    header names the one, its prepare records the other). The memory layer's replay checks
    a trace against it, handed in by its caller: memory imports nothing above it."""
    return {a.name: a.writer_name for a in ALGORITHMS.values()}


def get(name: str) -> Algorithm:
    return ALGORITHMS[check_choice("spec", name, tuple(SPECS))]


def load_plugins(names: str | None = None) -> None:
    """Import each module of ``names`` (default: $KVBENCH_PLUGINS); each registers its algorithms."""
    for name in filter(None, (n.strip() for n in (os.environ.get(PLUGINS_ENV, "") if names is None
                                                  else names).split(","))):
        try:
            importlib.import_module(name)
        except ImportError as err:
            raise ConfigError(f"{PLUGINS_ENV}: cannot import {name!r} ({err})") from None
        except Exception as err:  # a syntax error in it, or its own code raising: still the user's setting
            raise ConfigError(f"{PLUGINS_ENV}: module {name!r} failed to import "
                              f"({type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''})") from None


for _algo in (Plain(), Eagle(), DFlash(), Ngram()):
    register(_algo)
load_plugins()

__all__ = ["ALGORITHMS", "PLUGINS_ENV", "ROW_HEADROOM_RULES", "SPECS", "Algorithm", "get", "load_plugins",
           "register"]
