"""``kvbench run``: one engine configuration, a summary table, optional JSON and trace.

Options come from ``--config FILE`` (TOML) and are overridden by flags. Exit 0
when the run is clean, 1 when it violated an invariant, exhausted the pool or
crashed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from harness.core.errors import UsageError
from harness.core.kv_units import derive
from harness.core.options import options as schema_options
from harness.core.run_spec import RunSpec
from harness.core.safe_write import check_target, write_text
from harness.core.workload_options import APPLIES
from harness.judge.expect import leak_verdict
from harness.run.bounds import check_spec
from harness.run.capacity import GPU_MEM, for_run
from harness.run.runner import load_config_file, run_config


def add_option_flags(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """One flag per option of the schema (harness/core/options.py): the engine's, then the workload's
    (``skip``: options the command spells its own way)."""
    engine, workload = p.add_argument_group("engine"), p.add_argument_group("workload")
    for o in schema_options():
        if o.name in skip:
            continue
        where = workload if o.group == "workload" else engine
        help_ = o.help + ("" if o.default is None else f" (default {o.default})")
        if o.type is bool:
            where.add_argument(o.cli, dest=o.name, action="store_const", const=True, default=None, help=help_)
        else:
            where.add_argument(o.cli, dest=o.name, type=o.type, choices=o.allowed, default=None, help=help_)


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="run one engine configuration",
                              description="Run one engine configuration and print its accounting summary.")
    p.add_argument("--config", metavar="FILE", help="TOML file of options (flags override it)")
    add_option_flags(p)
    out = p.add_argument_group("output")
    out.add_argument("--json", metavar="FILE", help="write the result row as JSON")
    out.add_argument("--outputs", action="store_true", help="with --json: every request's prompt and output ids")
    out.add_argument("--trace", metavar="FILE", help="write the allocation trace (JSON lines)")
    out.add_argument("--capacity", nargs="?", const="", metavar="SHAPE",
                     help="also print how many requests of this run's length fit on an RTX 5090, H100 and H200 per "
                          "page size, from the engine's sizing (SHAPE: the model shape, default the run's --model)")
    out.add_argument(GPU_MEM.cli, type=float, metavar="GIB",
                     help=f"{GPU_MEM.help} ({GPU_MEM.minimum:g} to {GPU_MEM.maximum:g})")
    p.set_defaults(func=run)


def options_from_args(args: argparse.Namespace, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The config: --config's options, the flags over them (``skip``: as add_option_flags)."""
    options: dict[str, Any] = load_config_file(args.config) if args.config else {}
    for o in schema_options():
        if o.name in skip:
            continue
        value = getattr(args, o.name)
        if value is not None:
            options[o.name] = value
    return options


def _check_writable(path: str, what: str) -> None:
    """Fail before the run on a path that could not take its result: not a regular
    file or a new path (safe_write), or in a directory that cannot be written."""

    check_target(path, what)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError(f"{what} file {path!r} cannot be written (its directory {directory!r} "
                         f"is missing or not writable)")


def _check_applies(args: argparse.Namespace, options: dict[str, Any]) -> None:
    """A flag that shapes only one kind of workload (harness/core/workload_options.APPLIES),
    given for another, is refused: it was ignored without a word."""
    effective = options.get("workload", "uniform")
    for name, kinds in APPLIES.items():
        if getattr(args, name, None) is not None and effective not in kinds:
            raise UsageError(f"--{name.replace('_', '-')} applies to --workload {' or '.join(kinds)} only "
                             f"(got --workload {effective})")
    if getattr(args, "temperature", None) is not None and options.get("model", "none") == "none":
        raise UsageError("--temperature applies to a real model only (--model), not the simulated tokens of model none")


def run(args: argparse.Namespace) -> int:
    if args.outputs and not args.json:
        raise UsageError("--outputs needs --json FILE to write them to")
    if args.json and args.trace and os.path.realpath(args.json) == os.path.realpath(args.trace):
        raise UsageError(f"--json and --trace name the same file {args.json!r}; give each its own")
    options = options_from_args(args)
    _check_applies(args, options)
    spec = RunSpec.parse(options)  # the one parse: every step below takes the spec
    check_spec(spec)  # lengths against the memory there is, before a prompt is drawn
    if args.gpu_mem is not None and args.capacity is None:
        raise UsageError("--gpu-mem goes with --capacity")
    capacity = None
    if args.capacity is not None:  # bad input is found before the run
        capacity = for_run(spec, args.capacity, args.gpu_mem)
    # Found before the run, so a long run never ends with nowhere to put its results.
    for path, what in ((args.json, "--json"), (args.trace, "--trace")):
        if path:
            _check_writable(path, what)
    # Bad input found in the run leaves no result files: each appears whole at its end.
    row = leak_verdict(_run_on(args, spec))
    if args.json:
        write_text(args.json, json.dumps(row, indent=1) + "\n", "--json")
    print_summary(row, shape_bytes(row, args.capacity) if capacity is not None else None)
    if capacity is not None:
        print_capacity(*capacity)
    return 0 if row["status"] == "ok" else 1


def _run_on(args: argparse.Namespace, spec: RunSpec) -> dict[str, Any]:
    if spec.runs_on == "mini":
        return run_config(spec, trace=args.trace, outputs=args.outputs)
    if args.trace or args.outputs or args.capacity is not None:
        raise UsageError("--engine sglang writes no --trace, --outputs or --capacity (the mini engine's)")
    # numpy (and SGLang, which the reference loads when it runs): only this engine needs them
    from harness.reference.run import run_reference

    return run_reference(spec)


def print_capacity(title: str, heads: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console  # rich: only this command loads it, not the parser
    from rich.table import Table  # rich: only this command loads it, not the parser

    table = Table(title=title, show_header=True, header_style="bold", title_justify="left")
    for i, h in enumerate(heads):
        table.add_column(h, justify="left" if i == 0 else "right")
    for r in rows:
        table.add_row(*r)
    Console(highlight=False).print(table)


def shape_bytes(row: dict[str, Any], shape: str) -> tuple[str, int] | None:
    """(shape, peak KV bytes held) in the shape --capacity names, for a run that loaded no
    model (model none counts token slots only): the bytes are known once a shape is."""
    m, cfg = row.get("metrics") or {}, row.get("config") or {}
    if not shape or m.get("peak_kv_bytes_held") is not None:
        return None
    held = derive({**cfg, "model": shape}, m, row.get("series")).get("peak_kv_bytes_held")
    return (shape, held) if held is not None else None


def print_summary(row: dict[str, Any], shaped: tuple[str, int] | None = None) -> None:
    from rich.console import Console  # rich: only this command loads it, not the parser
    from rich.table import Table  # rich: only this command loads it, not the parser

    m = row["metrics"]
    table = Table(show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = (
        ("status", row["status"]),
        ("requests finished", _pair(m, "finished_requests", "requests")
         + (f" ({m['aborted_requests']} aborted by SGLang)" if m.get("aborted_requests") else "")),
        ("steps (prefill / decode)", f"{m.get('steps', '-')} ({m.get('prefill_steps', '-')} / {m.get('decode_steps', '-')})"),
        ("output tokens", m.get("output_tokens")),
        ("output tokens/s", _num(m.get("output_tokens_per_s"))),
        ("steps/s", _num(m.get("steps_per_s"))),
        ("requests/s", _num(m.get("requests_per_s"))),
        ("tau (bonus incl.)", _num(m.get("tau"), 3)),
        ("acceptance rate", _num(m.get("acceptance_rate"), 3)),
        ("host plan us / decode step", _num(m.get("plan_us_per_decode_step"), 1)),
        ("host result us / decode step", _num(m.get("result_us_per_decode_step"), 1)),
        ("syncs / step", _num(m.get("syncs_per_step"), 3)),
        ("peak held: token slots (pages)", f"{m.get('peak_tokens_held', '-')} ({m.get('peak_pages_held', '-')})"),
        ("peak used, prefix tree incl.: token slots (pages)",
         f"{m.get('peak_tokens_used', '-')} ({m.get('peak_pages_used', '-')})"),
        ("prefix tree after drain: token slots (evictable) / hit rate",
         f"{m.get('tree_tokens', '-')} ({m.get('tree_evictable_tokens', '-')}) / {_num(m.get('prefix_hit_rate'), 3)}"),
        ("peak KV held, both pools", _mib(m.get("peak_kv_bytes_held")) if shaped is None
         else f"{_mib(shaped[1])} (in {shaped[0]}'s shape, from --capacity)"),
        ("peak reserved-unwritten slots", m.get("peak_reserved_slots")),
        ("stranded slots (peak / sum)", f"{m.get('peak_stranded_slots', '-')} / {m.get('stranded_slots_sum', '-')}"),
        ("leaked token slots (measured / predicted)",
         f"{m.get('leaked_tokens', '-')} / {m.get('predicted_leaked_tokens', '-')}"),
        ("leaked SWA pages (measured / predicted)",
         f"{m.get('leaked_swa_pages', '-')} / {m.get('predicted_leaked_swa_pages', '-')}"),
        ("stranded slots peak by writer (prefill / decode / spec / pd)",
         " / ".join(str(m.get(f"peak_stranded_slots_{k}", "-")) for k in ("prefill", "decode", "spec", "pd"))),
        ("peak SWA pages held", m.get("peak_swa_pages_held")),
        ("row overflow slots (K4)", m.get("row_overflow_slots")),
        ("another row's positions overwritten", m.get("row_overwritten_slots")),
        ("peak running requests", m.get("peak_running")),
        ("retractions (SWA-driven)", f"{m.get('retractions', '-')} ({m.get('swa_retractions', '-')})"),
        ("RSS peak MiB", _num(m["rss_peak_bytes"] / 2**20, 1) if "rss_peak_bytes" in m else "-"),
        ("violations", ", ".join(f"{k}: {v}" for k, v in sorted(row["violations"].items())) or "0"),
    )
    for name, value in rows:
        table.add_row(name, "-" if value is None else str(value))
    console = Console()
    console.print(row["key"], markup=False, highlight=False, soft_wrap=True)
    console.print(table)
    if row.get("error"):
        console.print(f"error: {row['error']}", markup=False, highlight=False)


def _pair(m: dict, a: str, b: str) -> str:
    return f"{m.get(a, '-')} / {m.get(b, '-')}"


def _num(v: Any, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _mib(v: Any) -> str:
    """KV bytes in MiB; '-' where the model shape is unknown (model none loads no model)."""
    return "- (no model shape)" if v is None else f"{v / 2**20:,.2f} MiB"
