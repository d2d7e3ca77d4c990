"""Every CLI flag, TOML key, config-id field and metric against the one declared schema
(mini_engine/config/options.py with the algorithms' options, harness/core/options.py, harness/core/metrics.py).

A flag without a schema entry, or an entry without its flag, fails here; so does a
TOML key, a short id or a metric that the schema does not declare.
"""

from __future__ import annotations

import argparse
import dataclasses
import re

import pytest

from harness.cli import build_parser
from harness.core import metrics
from harness.core.errors import HarnessError, UsageError
from harness.core.options import ID_ALIASES, WORKLOAD, by_name, config_key, options, resolved_defaults, short_names
from harness.core.options import option_names
from harness.core.workloads import WorkloadConfig
from harness.grid.suites import SHORT, available, load_suite
from harness.core.run_spec import RunSpec
from harness.run.runner import load_config_file, run_config
from harness.view import facets
from mini_engine import algos
from mini_engine.config.engine_config import EngineConfig, load_toml
from mini_engine.errors import ConfigError, KVBenchError
from mini_engine.config.options import CORE, engine_options
from mini_engine.config.profiles import DEFAULT_PROFILE

# kvbench run's flags that are not options of a configuration.
# capacity: a table, not an engine option.
RUN_ONLY = {"help", "config", "json", "outputs", "trace", "capacity", "gpu_mem"}


def subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def test_every_run_flag_is_a_schema_option_and_every_option_has_its_flag():
    actions = {a.dest: a for a in subparser("run")._actions}
    schema = by_name()
    assert set(actions) - RUN_ONLY == set(schema)
    for name, o in schema.items():
        a = actions[name]
        assert a.option_strings == [o.cli] and a.default is None and a.help.startswith(o.help), name
        if o.type is bool:
            assert a.const is True and a.nargs == 0, name
        else:
            assert a.type is o.type and (tuple(a.choices) if a.choices else None) == o.allowed, name


def test_sweep_sets_no_option_by_flag_but_the_engine():
    dests = {a.dest for a in subparser("sweep")._actions}
    # a sweep's options come from its suite file; --engine runs all of them on another engine
    assert dests & set(by_name()) == {"engine"}
    assert subparser("sweep")._option_string_actions["--engine"].choices == by_name()["engine"].allowed


def test_engine_fields_and_workload_fields_are_the_schema():
    engine = {f.name: f for f in dataclasses.fields(EngineConfig) if f.init}
    assert list(engine) == [o.name for o in engine_options()]
    assert {n: f.default for n, f in engine.items()} == {o.name: o.default for o in engine_options()}
    workload = {f.name: f.default for f in dataclasses.fields(WorkloadConfig)}
    assert workload == {o.name: o.default for o in WORKLOAD}
    assert set(option_names()) == set(by_name())
    assert by_name()["profile"].default == DEFAULT_PROFILE
    # An algorithm's options are its own schema entries, after spec.
    spec_at = [o.name for o in engine_options()].index("spec")
    algo_opts = list(dict.fromkeys(o.name for a in algos.ALGORITHMS.values() for o in a.options))
    assert [o.name for o in engine_options()][spec_at + 1: spec_at + 1 + len(algo_opts)] == algo_opts
    assert not set(algo_opts) & {o.name for o in CORE}


def test_every_option_is_fully_declared():
    for o in options():
        assert o.help and o.type in (int, float, str, bool) and o.group, o.name
        assert o.allowed is None or (o.type is str and o.allowed), o.name
        if o.default is not None:
            assert o.check(o.default) == o.default, o.name  # a default passes its own check


def test_toml_keys_are_the_schema(tmp_path):
    schema = by_name()
    for o in options():  # each key alone in a file is read back under its own name
        f = tmp_path / f"{o.name}.toml"
        table = "workload" if o.group == "workload" else "engine"
        value = {bool: "true", str: '"x"', int: "3", float: "0.5"}[o.type]
        f.write_text(f"[{table}]\n{o.name} = {value}\n")
        read = load_config_file(f)
        assert list(read) == [o.name]
        try:  # the run knows the key (its value may still be refused, in one line naming it)
            RunSpec.parse(read)
        except (KVBenchError, HarnessError) as err:
            assert "unknown option" not in str(err), (o.name, str(err))
    bad = tmp_path / "bad.toml"
    bad.write_text("page_sise = 16\n")
    with pytest.raises(UsageError, match="unknown option 'page_sise'"):
        RunSpec.parse(load_toml(bad))
    assert set(RunSpec.parse({}).resolved()) == set(schema)


def test_short_ids_are_unique_and_the_ids_and_keys_use_them():
    short = short_names()
    assert SHORT == short
    assert len(set(short.values())) == len(short), "two options share a short id"
    assert not set(ID_ALIASES) & set(short.values()) and set(ID_ALIASES.values()) <= set(short)
    for a in algos.ALGORITHMS.values():
        assert a.key_fields == tuple((o.name, short[o.name]) for o in a.options)
    names = set(short.values())
    for suite in available():
        for gc in load_suite(suite, validate=False).configs:
            parts = re.findall(r"(?:^|-)([A-Za-z_]+):", gc.id)
            assert set(parts) <= names, (suite, gc.id)


@pytest.mark.parametrize("config", [
    {},
    {"spec": "eagle", "topk": 4, "steps": 3, "num_draft_tokens": 8, "window": 64, "layer_pattern": "3:1",
     "profile": "host-aligned", "accept_len": 2, "max_running": 8, "pd_radix": True, "workload": "pd"},
    {"spec": "dflash", "block_size": 4, "draft_window": 32, "page_size": 1, "free_policy": "dedup",
     "workload": "pd", "num_requests": 3, "input_len": 40, "output_len": 8, "min_len": 4, "seed": 5},
])
def test_every_result_key_field_is_a_schema_short_id(config):
    full = RunSpec.parse(config).resolved()
    key = config_key(full)
    defaults = resolved_defaults()
    by_short = {s: n for n, s in short_names().items()}
    shown = dict(part.split("=", 1) for part in key.split(","))
    assert set(shown) <= set(by_short)
    for s, text in shown.items():
        assert text == str(full[by_short[s]])
    for name, value in config.items():  # an option set away from its default is in the key
        if value != defaults[name]:
            assert short_names()[name] in shown, (name, key)


def test_every_metric_of_a_run_is_declared_and_kinds_are_the_gates():
    row = run_config({"spec": "dflash", "block_size": 4, "window": 32, "num_requests": 3, "input_len": 40,
                      "output_len": 8, "min_len": 4, "pool_tokens": 4096})
    assert row["status"] == "ok" and metrics.undeclared(row) == []
    for name in metrics.row_metrics(row):
        assert metrics.lookup(name).kind in metrics.KINDS


def test_plots_defaults_and_legends_come_from_the_schema():
    assert facets.DEFAULTS == resolved_defaults()
    assert set(facets.SHAPE[1:]) == {o.name for a in algos.ALGORITHMS.values() for o in a.options}
    from harness.view.plots import DRAFT_AXIS

    assert all(axis in {o.name for o in algos.get(name).options} for name, axis in DRAFT_AXIS.items())


# Options whose rules tie them to others (harness/core/prefixes.py): bounds are compared where those allow any value.
TIED = {"prefix_groups": {"shared_prefix": 1, "prompt_vocab": 2**31 - 1}}


@pytest.mark.parametrize("option", [o for o in WORKLOAD if o.type in (int, float)], ids=lambda o: o.name)
def test_workload_bounds_are_the_ones_the_workload_enforces(option):
    """The schema's bounds and WorkloadConfig's checks accept and refuse the same values."""
    low = option.minimum
    values = [low, low - 1, low - 0.5, 1e12]
    if option.maximum is not None:
        values += [option.maximum, option.maximum + 1]
    for value in values:
        if option.type is int and value != int(value):
            continue
        value = option.type(value)
        try:
            option.check(value)
            schema_ok = True
        except ConfigError:
            schema_ok = False
        try:
            WorkloadConfig(**{**TIED.get(option.name, {}), option.name: value})
            workload_ok = True
        except UsageError:
            workload_ok = False
        assert schema_ok == workload_ok, (option.name, value)
