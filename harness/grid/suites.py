"""Suites as data: a TOML grid of engine + workload options, expanded to configs.

A suite file has::

    name = "smoke"            # defaults to the file name
    repeat = 1                # runs per config (timing samples for compare)
    marks = []                # pytest markers for every config, e.g. ["gpu", "nightly"]
    [defaults]                # options every config starts from
    [axes]                    # option = [values...]: the grid is their product.
                              # A value may be a table of options merged together
                              # (lists inside it are sub-axes), for options that
                              # only make sense together (spec + block_size).
    [[include]]               # extra configs (options over the defaults, lists expand)
    [[exclude]]               # drop product configs matching all of these options
    [[expect]]                # expected outcomes (see harness.judge.expect)

TOML has no null: the string "none" stands for "not set" for options whose
default is unset (window, block_size, ...). What the file may hold is declared in
harness/schemas/suite.py; every config is then validated as the run would build it,
before any work, so a value out of range fails the sweep at once, naming the config.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from harness import ROOT
from harness.core.errors import HarnessError
from harness.core.numbers import check_numbers
from harness.core.options import option_names, short_names
from harness.core.run_spec import RunSpec
from harness.core.workloads import WorkloadConfig, check_lengths, load_prompts
from harness.judge.expect import ExpectRule, known_metrics, rule_of
from harness.run.bounds import check_spec
from harness.schemas import parse
from harness.schemas.suite import SuiteFile
from mini_engine.config.engine_config import EngineConfig
from mini_engine.errors import KVBenchError
from mini_engine.files import failure, parse_document, read_document

SUITES_DIR = ROOT / "suites"
PATH_OPTIONS = ("prompts",)  # resolved once, against the suite file's directory

# Short names for test ids, the result keys' (harness/core/options.py): ids must read
# well and work in `pytest -k` (whose grammar has no '=', hence name:value).
SHORT = short_names()


class SuiteError(HarnessError):
    """A suite is unknown, malformed, or holds a config that does not validate."""


@dataclass(frozen=True)
class GridConfig:
    id: str
    config: dict[str, Any]

    @cached_property
    def spec(self) -> RunSpec:
        """The config parsed once: at the suite's load where it is validated, else at first
        use (a pytest worker's suite is loaded unvalidated), then kept for every repeat."""
        return RunSpec.parse(self.config)

    def on(self, engine: str) -> GridConfig:
        """The config on ``engine`` (kvbench sweep --engine); a spec parsed already is kept."""
        out = GridConfig(self.id, {**self.config, "engine": engine})
        if "spec" in self.__dict__:  # the suite was validated: its spec changes engine, not parsed again
            out.__dict__["spec"] = self.spec.on(engine)  # as cached_property stores it
        return out


@dataclass
class Suite:
    name: str
    path: Path
    digest: str
    repeat: int
    marks: tuple[str, ...]
    configs: list[GridConfig]
    rules: list[ExpectRule] = field(default_factory=list)
    description: str = ""

    @property
    def needs_gpu(self) -> bool:
        return "gpu" in self.marks

    def by_id(self) -> dict[str, GridConfig]:
        return {c.id: c for c in self.configs}


def available() -> list[str]:
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml"))


def resolve(name_or_path: str | os.PathLike[str]) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" or os.sep in str(name_or_path):
        if not p.is_file():
            raise failure(SuiteError, "suite file", p, "not found")
        return p.resolve()
    q = SUITES_DIR / f"{name_or_path}.toml"
    if not q.is_file():
        names = ", ".join(available()) or "none"
        raise SuiteError(f"unknown suite {str(name_or_path)!r} (available: {names}; or a path to a .toml file)")
    return q


def load_suite(name_or_path: str | os.PathLike[str], *, validate: bool = True) -> Suite:
    path = resolve(name_or_path)
    text = read_document(path, "suite file", SuiteError)
    data = parse_document(text, path, "suite file", SuiteError, fmt="toml")
    where = f"suite {path.name}"

    check_numbers(data, where)  # inf/nan bounds and int64 overflow, before the rules are built
    context = {"options": frozenset(option_names()), "metrics": known_metrics()}
    model = parse(SuiteFile, data, where, SuiteError, context)
    name = model.name if model.name is not None else path.stem
    repeat, marks, rules = model.repeat, model.marks, [rule_of(r, i) for i, r in enumerate(model.expect)]
    defaults, axes = dict(model.defaults), dict(model.axes)
    includes, excludes = [dict(t) for t in model.include], [dict(t) for t in model.exclude]

    _check_grid_size(axes, includes, where)
    if not axes and not includes:  # _product({}) is one empty combo: an all-defaults config nobody asked for
        raise SuiteError(f"{where}: the suite has no configs (give [axes] or [[include]])")
    ids, configs = expand(defaults, axes, includes, excludes)
    if not configs:
        raise SuiteError(f"{where}: the grid is empty (check [axes], [[include]] and [[exclude]])")
    seen: dict[str, dict[str, Any]] = {}
    grid = []
    for cid, cfg in zip(ids, configs):
        if cid in seen:
            if seen[cid] == cfg:
                continue  # the same config reached twice (an include repeating the grid)
            raise SuiteError(f"{where}: two different configs share the id {cid!r}")
        seen[cid] = cfg
        grid.append(GridConfig(cid, _resolve_paths(cfg, path.parent)))
    suite = Suite(name=name, path=path, digest=hashlib.sha256(text.encode("utf-8")).hexdigest()[:16], repeat=repeat,
                  marks=tuple(marks), configs=grid, rules=rules, description=model.description)
    if validate:
        for gc in grid:
            validate_config(gc, f"{where}, config {gc.id}")
    return suite


def expand(defaults: dict[str, Any], axes: dict[str, Any], includes: list[dict[str, Any]],
           excludes: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """(ids, configs) of the grid, duplicates kept. Needs no numpy: the CI role (which has
    none) checks a rerun's --filter against it (harness/ci/suite_filter.py)."""
    configs: list[dict[str, Any]] = []
    for combo in _product(axes):
        if any(_matches(combo, ex) for ex in excludes):
            continue
        configs.append({**defaults, **combo})
    for inc in includes:
        for combo in _product({k: v if isinstance(v, list) else [v] for k, v in inc.items()}):
            configs.append({**defaults, **combo})
    configs = [_normalise(c) for c in configs]
    return _ids(configs, defaults, _axis_keys(axes)), configs


def validate_config(gc: GridConfig, where: str) -> None:
    """Parse the config into the spec its runs take (gc.spec), and check what the run would
    refuse before its first step; a KVBenchError -> SuiteError."""

    try:
        spec = gc.spec
        check_spec(spec)
        wl = spec.workload
        if wl.prompts is not None:  # a missing or bad file is bad input too, not a failed run
            load_prompts(wl.prompts, default_output_len=wl.output_len)
        check_lengths(wl, spec.engine.seed, spec.engine.max_context)  # as the run draws them
    except (KVBenchError, HarnessError, TypeError) as err:  # TypeError: a workload option of the wrong shape
        raise SuiteError(f"{where}: {err}") from None


MAX_CONFIGS = 10_000  # a nightly grid is hundreds; 10**8 combos were an OOM kill before the first config


def _grid_size(axes: dict[str, Any]) -> int:
    """How many combos _product would build, counted without building them."""
    size = 1
    for values in axes.values():
        size *= sum(_grid_size({k: v if isinstance(v, list) else [v] for k, v in value.items()})
                    if isinstance(value, dict) else 1 for value in values)
        if size > MAX_CONFIGS:
            return size  # enough to refuse; the exact product may be astronomically large
    return size


def _check_grid_size(axes: dict[str, Any], includes: list[dict[str, Any]], where: str) -> None:
    size = _grid_size(axes)
    for inc in includes:
        size += _grid_size({k: v if isinstance(v, list) else [v] for k, v in inc.items()})
        if size > MAX_CONFIGS:
            break
    if size > MAX_CONFIGS:
        raise SuiteError(f"{where}: the grid has more than {MAX_CONFIGS} configs (it builds at least {size} "
                         f"before [[exclude]]); split the suite or narrow [axes]")


def _product(axes: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Cartesian product; a table value merges its options (lists inside are sub-axes)."""
    combos: list[dict[str, Any]] = [{}]
    for axis, values in axes.items():
        expanded: list[dict[str, Any]] = []
        for value in values:
            if isinstance(value, dict):
                expanded.extend(_product({k: v if isinstance(v, list) else [v] for k, v in value.items()}))
            else:
                expanded.append({axis: value})
        combos = [{**c, **e} for c, e in itertools.product(combos, expanded)]
    return combos


def _matches(config: dict[str, Any], pattern: dict[str, Any]) -> bool:
    for key, want in pattern.items():
        have = config.get(key)
        if isinstance(want, list):
            if have not in want:
                return False
        elif have != want:
            return False
    return True


def _axis_keys(axes: dict[str, list[Any]]) -> list[str]:
    keys: dict[str, None] = {}
    for axis, values in axes.items():
        if any(isinstance(v, dict) for v in values):
            for v in values:
                if isinstance(v, dict):
                    keys.update(dict.fromkeys(v))
        else:
            keys[axis] = None
    return list(keys)


def _normalise(config: dict[str, Any]) -> dict[str, Any]:
    """'none' -> None for options whose default is unset (TOML cannot say null)."""

    unset = {f for f, d in EngineConfig.__dataclass_fields__.items() if d.default is None}
    unset |= {f for f, d in WorkloadConfig.__dataclass_fields__.items() if d.default is None}
    return {k: (None if v == "none" and k in unset else v) for k, v in config.items()}


def _resolve_paths(config: dict[str, Any], base: Path) -> dict[str, Any]:
    """A relative file option names a file beside the suite, wherever kvbench runs from
    (validation and the pytest workers then open the same file)."""
    out = dict(config)
    for key in PATH_OPTIONS:
        value = out.get(key)
        if isinstance(value, str) and value and not os.path.isabs(value):
            out[key] = str((base / value).resolve())
    return out


def fmt_value(value: Any) -> str:
    """An option's value as the test ids spell it."""
    return _fmt(value)


def _fmt(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).replace(" ", "_")


def _ids(configs: list[dict[str, Any]], defaults: dict[str, Any], axis_keys: list[str]) -> list[str]:
    """Readable ids from the options that vary; a non-axis option shows only where it
    differs from the suite default, so one odd include does not lengthen every id."""
    keys = list(dict.fromkeys([*axis_keys, *(k for c in configs for k in c)]))
    varying = [k for k in keys if len({repr(c.get(k)) for c in configs}) > 1]
    ids = []
    for cfg in configs:
        parts = []
        for k in varying:
            if k not in cfg:
                continue  # an option one branch of a table axis does not set
            v = cfg[k]
            if k not in axis_keys and v == defaults.get(k):
                continue
            parts.append(f"{SHORT.get(k, k)}:{_fmt(v)}")
        ids.append("-".join(parts) or "default")
    return ids
