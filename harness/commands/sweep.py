"""kvbench sweep SUITE|FILE: run a suite grid through pytest, log to MLflow, summarise."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.core.engine_option import ENGINES
from harness.core.errors import UsageError
from harness.run import hardware
from harness.store.results import results_root
from harness.view.mlflow_store import tracking_uri


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run a suite grid (one pytest test per config)",
                       description="Run every config of a suite (a name under suites/ or a TOML file) "
                                   "through the grid pytest module; results go to results/runs/<run-id>/.")
    p.add_argument("suite", help="suite name (smoke, invariants, nightly-gpu) or a TOML file")
    p.add_argument("-j", "--jobs", type=int, default=None,
                   help="pytest-xdist workers (default: one per visible GPU, else 1)")
    p.add_argument("--resume", metavar="RUN", help="finish an interrupted run (its id, or its directory under the "
                                                   "results root): skip configs already in its results")
    p.add_argument("--filter", metavar="EXPR", help="select configs: words joined by and/or/not as in pytest -k; "
                                                    "name=value or name:value matches an option exactly "
                                                    "(e.g. 'dflash and ps=16'), other words match test ids as -k does")
    p.add_argument("--mlflow-uri", metavar="URI", help="tracking server (default $MLFLOW_TRACKING_URI or results/mlflow.db)")
    p.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    p.add_argument("--oversubscribe", action="store_true", help="allow more workers than visible GPUs (they share GPUs)")
    p.add_argument("--run-id", metavar="ID", help="name of the run directory (default <suite>-<utc time>)")
    p.add_argument("--list", action="store_true",
                   help="print the suite's config ids (test ids, for --filter, bisect --config, pytest) and exit")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 when the run regressed against the profile's baseline or the previous run; "
                        "exit 2 when it cannot judge (a damaged baseline or previous run, or neither exists)")
    p.add_argument("--nights", metavar="DIR", help="where the previous runs of the suite are "
                                                   "(default the results root's runs/)")
    p.add_argument("--shard", metavar="I/N", help="run shard I of N (counted from 1: 1/4 .. 4/4) of the suite, split "
                                                  "by the last night's durations; every shard of a night takes the "
                                                  "same --run-id, kvbench merge joins them")
    p.add_argument("--engine", choices=ENGINES,
                   help="run every config on this engine (sglang: SGLang's own scheduler loop, docs/reference.md; "
                        "the configs it cannot run are left out, counted by reason); default each config's own")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.grid.sweep import SweepOptions, run_sweep  # pydantic: only this command loads it, not the parser

    # Contradictions and empty values found before anything runs: each picked a reading silently.
    if args.no_mlflow and args.mlflow_uri:
        raise UsageError("--no-mlflow and --mlflow-uri contradict each other; give one of them")
    if args.run_id is not None and not args.run_id.strip():
        raise UsageError("--run-id must be 1-128 characters of letters, digits, '.', '_' or '-' (got an empty "
                         "value); leave it out for a generated id")

    if args.shard is not None:
        # before anything runs: one line, exit 2
        from harness.grid.shards import parse_shard  # pydantic: only this command loads it, not the parser

        parse_shard(args.shard)
    if args.list:
        return list_configs(args.suite, args.filter, args.shard, args.nights)
    if not args.no_mlflow:  # a store MLflow cannot open is refused before a config runs, not after
        tracking_uri(args.mlflow_uri, Path("."))
    if args.nights and not Path(args.nights).is_dir():
        raise UsageError(f"--nights {args.nights!r} is not a directory (the earlier runs of the suite)")

    return run_sweep(SweepOptions(suite=args.suite, jobs=args.jobs, resume=args.resume, filter=args.filter,
                                  mlflow_uri=args.mlflow_uri, no_mlflow=args.no_mlflow, run_id=args.run_id,
                                  oversubscribe=args.oversubscribe, fail_on_regression=args.fail_on_regression,
                                  nights=args.nights, shard=args.shard, engine=args.engine))


def list_configs(suite_name: str, expr: str | None, shard: str | None = None, nights: str | None = None) -> int:
    """One config id a line (those --filter selects, when given; a shard's share with
    --shard), then how many; for a shard, every shard's expected seconds."""

    from harness.grid.suites import load_suite  # pydantic: only this command loads it, not the parser
    from harness.grid.sweep import filter_selects  # pydantic: only this command loads it, not the parser

    suite = load_suite(suite_name)  # every config validated as the sweep validates it: a list is no promise otherwise
    if shard is not None:
        return _list_shard(suite, expr, shard, nights)
    keep = filter_selects(expr) if expr else None
    ids = [c.id for c in suite.configs if keep is None or keep(c.id, c.config)]
    print("\n".join(ids))
    print(f"{len(ids)} of {len(suite.configs)} configs of suite {suite.name}", file=sys.stderr)
    return 0


def _list_shard(suite, expr: str | None, text: str, nights: str | None) -> int:
    from harness.grid.shards import parse_shard, plan  # pydantic: only this command loads it, not the parser

    shard = parse_shard(text)
    profile = hardware.detect().profile
    p = plan(suite, shard.count, [Path(nights)] if nights else [results_root() / "runs"], profile, expr)
    ids = p.shards[shard.index - 1]
    print("\n".join(ids))
    loads = p.loads()
    mean = sum(loads) / len(loads)
    spread = max(abs(x - mean) for x in loads) / mean * 100 if mean else 0.0
    print(f"{len(ids)} of {len(suite.configs)} configs of suite {suite.name} in shard {shard} (plan {p.digest}, "
          f"profile {profile}, by {p.source}); expected seconds per shard: "
          f"{', '.join(f'{x:.1f}' for x in loads)} (at most {spread:.1f}% from their mean)", file=sys.stderr)
    return 0
