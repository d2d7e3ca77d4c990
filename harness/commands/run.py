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

from harness.workloads import WORKLOADS
from mini_engine.algos import ROW_HEADROOM_RULES
from mini_engine.config import (AUDIT_MODES, DEVICES, FREE_POLICIES, LAYER_PATTERNS, POLICIES, PREFIX_CACHES,
                                PROFILE_NAMES, SPECS, load_toml)
from mini_engine.errors import ConfigError
from mini_engine.profiles import OVERLAP
from mini_engine.retraction import RULES as RETRACTIONS

# (flag, option, type, choices, help); the choices are the validators' own tuples.
_ENGINE_FLAGS = (
    ("--page-size", "page_size", int, None, "slots per KV page (default 16)"),
    ("--pool-tokens", "pool_tokens", int, None, "KV pool size in tokens (default 262144)"),
    ("--mem-fraction", "mem_fraction", float, None, "device memory share for weights + KV pools"),
    ("--max-running", "max_running", int, None, "most concurrent requests (default 256)"),
    ("--max-context", "max_context", int, None, "longest prompt + output (default 4096)"),
    ("--chunked-prefill", "chunked_prefill", int, None, "prefill tokens per step (default 8192)"),
    ("--spec", "spec", str, SPECS, "speculative algorithm"),
    ("--block-size", "block_size", int, None, "DFLASH draft block (default 16)"),
    ("--draft-window", "draft_window", int, None, "DFLASH compact draft cache window"),
    ("--topk", "topk", int, None, "EAGLE branches per step (default 1)"),
    ("--steps", "steps", int, None, "EAGLE draft steps (default 3)"),
    ("--num-draft-tokens", "num_draft_tokens", int, None, "EAGLE tokens verified per step"),
    ("--window", "window", int, None, "SWA window in positions (default: no SWA)"),
    ("--layer-pattern", "layer_pattern", str, tuple(LAYER_PATTERNS), "local:global layer pattern"),
    ("--profile", "profile", str, PROFILE_NAMES,
     "accounting profile (default sglang-0.5.23; floor-free is a what-if, no shipped version)"),
    ("--align", "align", str, None, "knob: writers that page-ceil their extent: all, none or a comma list "
     "of extend,decode,pd,eagle,dflash"),
    ("--policy", "policy", str, POLICIES, "knob shorthand: aligned = --align all, unaligned = --align none"),
    ("--free", "free_policy", str, FREE_POLICIES, "knob: how release frees pages (segment = SGLang's)"),
    ("--swa-eviction-interval", "swa_eviction_interval", int, None,
     "knob: SGLANG_SWA_EVICTION_INTERVAL, positions past the window before a decode step evicts (128)"),
    ("--prefix-cache", "prefix_cache", str, PREFIX_CACHES,
     "knob: SGLang's SWA eviction threshold of a prefix-sharing (radix) or chunk cache; chunk also "
     "evicts during chunked prefill (kvbench models no prefix tree, only these two rules)"),
    ("--swa-ratio", "swa_ratio", float, None, "knob: SWA pool size as a share of the full pool (0.8)"),
    ("--row-headroom", "row_headroom", str, ROW_HEADROOM_RULES,
     "knob: req_to_token row headroom, SGLang's (DFLASH at ps 1 can overflow: K4) or generous"),
    ("--retraction", "retraction", str, RETRACTIONS,
     "knob: who is retracted on a short pool: SGLang's fewest-outputs-first (its ratio constants) or the newest"),
    ("--overlap", "overlap", str, OVERLAP,
     "knob: SGLang's overlap scheduler (on in 0.5.23 for EAGLE and DFLASH; off = --disable-overlap-schedule; "
     "plain decode steps are not stale; with --prefix-cache chunk it also moves chunked-prefill eviction)"),
    ("--audit", "audit", str, AUDIT_MODES, "invariant checks after each step"),
    ("--seed", "seed", int, None, "seed of the workload and the simulated tokens (default 0)"),
    ("--model", "model", str, None, "'none' (accounting only), a built-in model, or a checkpoint dir"),
    ("--device", "device", str, DEVICES, "where device tensors live"),
    ("--accept-len", "accept_len", int, None, "simulated accepted length, fixed (bonus included)"),
    ("--accept-mean", "accept_mean", float, None, "simulated accepted length, mean of a seeded law"),
    ("--temperature", "temperature", float, None, "sampling temperature of a real model"),
    ("--vocab-size", "vocab_size", int, None, "vocabulary of the simulated tokens"),
    ("--draft-layers", "draft_layers", int, None, "real model: target layers the drafter shares"),
    ("--draft-noise", "draft_noise", float, None, "real model: noise on the drafter's weights"),
)
_WORKLOAD_FLAGS = (
    ("--workload", "workload", str, WORKLOADS, "synthetic workload"),
    ("--num-requests", "num_requests", int, None, "requests (default 256)"),
    ("--input-len", "input_len", int, None, "prompt length (fixed) or its upper bound / median"),
    ("--output-len", "output_len", int, None, "output length (fixed) or its upper bound / median"),
    ("--min-len", "min_len", int, None, "lower bound of the uniform lengths (default 100)"),
    ("--sigma", "sigma", float, None, "shape of the lognormal lengths (default 1.0)"),
    ("--pd-fraction", "pd_fraction", float, None, "share of pd requests that arrive prefilled"),
    ("--arrival-gap", "arrival_gap", int, None, "steps between PD arrivals"),
    ("--prompt-vocab", "prompt_vocab", int, None, "synthetic prompt ids are below this"),
    ("--prompts", "prompts", str, None, "JSON-lines prompts file in place of a synthetic workload"),
)


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="run one engine configuration",
                              description="Run one engine configuration and print its accounting summary.")
    p.add_argument("--config", metavar="FILE", help="TOML file of options (flags override it)")
    eng = p.add_argument_group("engine")
    for flag, dest, typ, choices, help_ in _ENGINE_FLAGS:
        eng.add_argument(flag, dest=dest, type=typ, choices=choices, default=None, help=help_)
    eng.add_argument("--pd-radix", dest="pd_radix", action="store_const", const=True, default=None,
                     help="knob: the decode side's radix cache sets the PD SWA tail")
    wl = p.add_argument_group("workload")
    for flag, dest, typ, choices, help_ in _WORKLOAD_FLAGS:
        wl.add_argument(flag, dest=dest, type=typ, choices=choices, default=None, help=help_)
    out = p.add_argument_group("output")
    out.add_argument("--json", metavar="FILE", help="write the result row as JSON")
    out.add_argument("--outputs", action="store_true", help="with --json: every request's prompt and output ids")
    out.add_argument("--trace", metavar="FILE", help="write the allocation trace (JSON lines)")
    p.set_defaults(func=run)


def options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = load_toml(args.config) if args.config else {}
    for _, dest, *_ in _ENGINE_FLAGS + _WORKLOAD_FLAGS + (("--pd-radix", "pd_radix"),):
        value = getattr(args, dest)
        if value is not None:
            options[dest] = value
    return options


def _check_writable(path: str, what: str) -> bool:
    """Fail early on an unwritable path; True if the file did not exist before."""
    fresh = not os.path.exists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as err:
        raise ConfigError(f"{what} file {path!r} cannot be written ({err.strerror})") from None
    return fresh


def run(args: argparse.Namespace) -> int:
    from harness.bounds import check_options
    from harness.expect import leak_verdict
    from harness.runner import run_config

    if args.outputs and not args.json:
        raise ConfigError("--outputs needs --json FILE to write them to")
    if args.json and args.trace and os.path.realpath(args.json) == os.path.realpath(args.trace):
        raise ConfigError(f"--json and --trace name the same file {args.json!r}; give each its own")
    options = options_from_args(args)
    check_options(options)  # lengths against the memory there is, before a prompt is drawn
    # Found before the run, so a long run never ends with nowhere to put its results.
    created = [p for p, what in ((args.json, "--json"), (args.trace, "--trace"))
               if p and _check_writable(p, what)]
    try:
        row = leak_verdict(run_config(options, trace=args.trace, outputs=args.outputs))
    except ConfigError:
        for path in created:  # bad input: leave no empty result files behind
            os.remove(path)
        raise
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(row, fh, indent=1)
            fh.write("\n")
    print_summary(row)
    return 0 if row["status"] == "ok" else 1


def print_summary(row: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    m = row["metrics"]
    table = Table(show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = (
        ("status", row["status"]),
        ("requests finished", _pair(m, "finished_requests", "requests")),
        ("steps (prefill / decode)", f"{m.get('steps', '-')} ({m.get('prefill_steps', '-')} / {m.get('decode_steps', '-')})"),
        ("output tokens", m.get("output_tokens")),
        ("output tokens/s", _num(m.get("output_tokens_per_s"))),
        ("steps/s", _num(m.get("steps_per_s"))),
        ("requests/s", _num(m.get("requests_per_s"))),
        ("tau (bonus incl.)", _num(m.get("tau"), 3)),
        ("acceptance rate", _num(m.get("acceptance_rate"), 3)),
        ("host plan us / decode step", _num(m.get("plan_us_per_decode_step"), 1)),
        ("syncs / step", _num(m.get("syncs_per_step"), 3)),
        ("peak pages held", m.get("peak_pages_held")),
        ("peak reserved-unwritten slots", m.get("peak_reserved_slots")),
        ("stranded slots (peak / sum)", f"{m.get('peak_stranded_slots', '-')} / {m.get('stranded_slots_sum', '-')}"),
        ("leaked pages (measured / predicted)", f"{m.get('leaked_pages', '-')} / {m.get('predicted_leaked_pages', '-')}"),
        ("leaked SWA pages (measured / predicted)",
         f"{m.get('leaked_swa_pages', '-')} / {m.get('predicted_leaked_swa_pages', '-')}"),
        ("stranded slots peak by writer (prefill / decode / spec / pd)",
         " / ".join(str(m.get(f"peak_stranded_slots_{k}", "-")) for k in ("prefill", "decode", "spec", "pd"))),
        ("peak SWA pages held", m.get("peak_swa_pages_held")),
        ("row overflow slots (K4)", m.get("row_overflow_slots")),
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
