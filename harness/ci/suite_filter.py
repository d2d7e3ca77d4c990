"""Does a rerun's --filter select any config of its suite? Answered before a runner starts.

`/rerun-suite smoke --filter dflash and ps:2` used to be accepted, dispatched, and only
refused by the sweep on the runner, minutes later. The bot and `kvbench ci rerun-args`
run in the ``ci`` install role, which has no numpy, so the suite is read here with the
stdlib (tomllib, through mini_engine.files.read_document) and expanded by the same grid code the sweep uses (harness.grid.suites.expand,
which needs no numpy), without the sweep's validation (that imports the engine). The
filter is the sweep's own (harness.grid.filter), so what is refused here is exactly what
the sweep would refuse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.ci.specs import Refusal, show
from harness.core.errors import HarnessError
from harness.grid.filter import compile_filter
from harness.grid.suites import MAX_CONFIGS, _check_grid_size, expand
from mini_engine.errors import KVBenchError
from mini_engine.files import read_document


def _tables(data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise Refusal(f"suite file: [[{key}]] must be tables")
    return value


def grid_of(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(id, config) of every config of the suite file at ``path``."""

    data = read_document(path, "suite file", Refusal, fmt="toml")
    defaults, axes = data.get("defaults") or {}, data.get("axes") or {}
    if not isinstance(defaults, dict) or not isinstance(axes, dict) or \
            not all(isinstance(v, list) for v in axes.values()):
        raise Refusal(f"suite {path.name}: [defaults] and [axes] must be tables, each axis a list")
    includes, excludes = _tables(data, "include"), _tables(data, "exclude")
    try:
        _check_grid_size(axes, includes, f"suite {path.name}")  # before building it: at most MAX_CONFIGS
        ids, configs = expand(defaults, axes, includes, excludes)
    except (KVBenchError, HarnessError) as err:
        raise Refusal(str(err)) from None
    return list(zip(ids, configs))[:MAX_CONFIGS]


def check_selects(suite_file: Path, suite: str, expr: str) -> int:
    """How many configs of ``suite`` the filter selects; Refusal when none."""

    try:
        selects = compile_filter(expr)
    except KVBenchError as err:
        raise Refusal(str(err)) from None
    grid = grid_of(suite_file)
    selected = sum(1 for cid, cfg in grid if selects(cid, cfg))
    if not selected:
        example = f" (ids look like {show(grid[0][0])})" if grid else ""
        raise Refusal(f"--filter {show(expr)} selects no config of suite {suite}{example}")
    return selected
