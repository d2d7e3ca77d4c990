"""kvbench conform TRACE...: replay allocation traces on SGLang's own allocator."""

from __future__ import annotations

import argparse
import collections
import sys

from harness.commands.run import add_option_flags, options_from_args
from harness.core.errors import UsageError
from harness.core.safe_write import check_target
from mini_engine.errors import TraceError

DESCRIPTION = """\
Replay kvbench allocation traces (kvbench run --trace FILE) on SGLang's own code and
check every call: PagedTokenToKVPoolAllocator (TokenToKVPoolAllocator at page size 1),
one per pool ("full", "swa"), for the slots of every allocation (page membership and
order), every refusal and the free count after each call; every reservation (prepare)
against allocation_sizing: page_aligned_decode_alloc_lens for an aligned record, and
the reserve against get_alloc_reserve_per_decode when the header names the spec
options. An unaligned record is checked against max(cur, committed + reserve): the
pre-35265 DFLASH rule, reproduced (in 0.5.18 it is inline in a method that needs a
GPU batch). The PD SWA tail (swa_prealloc) is SGLang 0.5.23's _swa_tail_len rule,
reproduced (its module needs the disaggregation stack). The prefix tree's calls
(match, insert, lock, unlock, evict) run on the installed SGLang's own RadixCache
(0.5.23, or 0.5.18), in trace order: matched and cached lengths, lock deltas, evicted
pages, evictable and protected sizes after each. The SWA-aware tree's calls run on
the installed release's UnifiedRadixCache (FULL + SWA): matched and cached lengths, lock
deltas, FULL and SWA tokens evicted, both evictable sizes after each. The first divergence of each trace is reported with its call index
and both values.

Needs the SGLang release of each trace's profile importable: 0.5.23, or 0.5.18 for
sglang-pre-35265 traces (a trace of another release is refused: one line, exit 2).
pip install --no-deps sglang==0.5.23 && pip install 'kvbench[conform]' (docs/conform.md).

Exit status: 0 every trace conforms, 1 a divergence, 2 SGLang missing, a trace of
another SGLang release, or a trace that cannot be read (one line).

kvbench conform --engine [--config FILE] [run options]: run one config on the mini
engine and on SGLang's own scheduler loop (the reference engine, docs/reference.md) and
compare every total and every step's running requests, pages used and held, SWA pages
held, hit tokens, retractions and evictable pages; the first differing step is named
with its quantity. Exit 0 equal, 1 a difference, 2 a config the reference does not
support or SGLang missing (one line)."""


OWN = ("engine",)  # conform's --engine compares both engines: not the run option


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "conform", help="replay allocation traces on SGLang's own allocator and sizing code",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="*", metavar="TRACE",
                   help="trace file (JSON lines, kvbench-trace header first)")
    p.add_argument("--engine", action="store_true",
                   help="compare the mini engine with SGLang's own loop on one config (its options: kvbench run's)")
    p.add_argument("--config", metavar="FILE", help="with --engine: TOML file of options (flags override it)")
    p.add_argument("--suite", metavar="NAME",
                   help="with --engine: every config of this suite the reference supports (the others are listed "
                        "with the reason)")
    p.add_argument("--filter", metavar="EXPR",
                   help="with --engine --suite: only the configs this selects (kvbench sweep's --filter: words "
                        "joined by and/or/not, name=value matching an option, e.g. 'workload=pd and ps=16')")
    p.add_argument("--report", metavar="FILE",
                   help="with --engine --suite: also write every comparison as JSON (kvbench ci reference-triage reads it)")
    add_option_flags(p, skip=OWN)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.suite is not None and not args.engine:
        raise UsageError("--suite goes with --engine")
    if args.report is not None and args.suite is None:
        raise UsageError("--report goes with --engine --suite")
    if args.filter is not None and args.suite is None:
        raise UsageError("--filter goes with --engine --suite")
    if args.engine:
        if args.traces:
            raise UsageError("--engine compares a config on both engines; give it no TRACE")
        return _engines(args)
    if not args.traces:
        raise UsageError("give one or more TRACE files, or --engine with a config")
    return _traces(args)


def _engines(args: argparse.Namespace) -> int:
    # numpy (and SGLang, which the reference loads when it runs): only this path needs them
    from harness.reference.compare import compare, compare_suite, describe
    from harness.reference import loader, report  # numpy: the reference's modules, as above

    if args.suite is None:
        c = compare(options_from_args(args, skip=OWN))
        print(describe(c))
        return 0 if c.equal else 1
    from harness.grid.suites import load_suite  # pydantic: only --suite reads a suite file

    options = options_from_args(args, skip=OWN)
    if options:
        raise UsageError("--suite takes its configs from the suite file; give it no --config or option flags")
    if args.report is not None:
        check_target(args.report, "--report")  # before the runs: a bad path is refused at once
    suite = load_suite(args.suite)
    configs = suite.configs
    if args.filter is not None:
        from harness.grid.sweep import check_filter, filter_selects  # pydantic: only --filter needs the sweep

        check_filter(args.filter, suite)  # one that selects nothing is refused before any run
        selects = filter_selects(args.filter)
        configs = [c for c in configs if selects(c.id, c.config)]
    status, findings, skipped = 0, [], collections.Counter()
    for cid, got in compare_suite([(c.id, c.spec) for c in configs]):
        if isinstance(got, str):
            skipped[got] += 1
            continue
        findings.append(report.finding(cid, got))
        print(describe(got), flush=True)
        status = max(status, 0 if got.equal else 1)
    for why, n in skipped.most_common():
        print(f"not run, {n} config{'s' * (n > 1)}: {why}")
    if not findings:
        raise UsageError(f"--suite {args.suite}: the reference engine supports none of its configs")
    print(_summary(findings, sum(skipped.values()), loader.load().version))
    if args.report is not None:
        report.write(args.report, args.suite, loader.load().version, findings, dict(skipped.most_common()))
    return status


def _summary(findings: list[dict], not_run: int, version: str) -> str:
    """The suite's verdict in one last line, so a reader (or a log) need not count lines."""
    equal = sum(1 for f in findings if f["equal"])
    failed = sum(1 for f in findings if f.get("error"))
    differ = len(findings) - equal - failed
    n = len(findings)
    return (f"sglang {version}: {n} config{'s' * (n != 1)} compared, {equal} equal on every total and every step, "
            f"{differ} differ, {failed} failed on SGLang's loop; {not_run} not run")


def _traces(args: argparse.Namespace) -> int:
    # numpy (torch, SGLang): SGLang and torch take seconds to import; other commands never pay it.
    from harness.conform.check import conform, describe, load_sglang

    sg = load_sglang()
    status = 0
    for path in args.traces:
        try:
            rep = conform(path, sg)
        except TraceError as err:
            # One line per bad trace; the traces already checked keep their lines.
            print(f"kvbench: error: {err}", file=sys.stderr)
            status = 2
            continue
        checked = (f"{rep.calls} calls: {rep.allocator_calls} allocator calls, "
                   f"{rep.reservations} reservations, {rep.reserves} reserves"
                   + (f", {rep.tree_calls} tree calls" if rep.tree_calls else "")
                   + (f", {rep.swa_tree_calls} SWA tree calls" if rep.swa_tree_calls else "")
                   + (f"; {rep.row_overflows} cut at the row: K4, SGLang writes past it" if rep.row_overflows else ""))
        if rep.conforms:
            print(f"{path}: conforms to sglang {sg.version} ({checked})")
        else:
            print(f"{path}: diverges from sglang {sg.version} at {describe(rep.first_divergence)}")
            status = max(status, 1)
    return status
