"""kvbench report RUN...: one self-contained HTML page (and a Markdown summary) over runs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# From harness.core.metrics, not harness.view.report: --help lists them, and building the parser
# must not import the report's modules (they need pydantic, which a bare install lacks).
from harness.core.errors import UsageError
from harness.core.metrics import TREND_METRICS, check_metric_option
from harness.core.numbers import NumberError
from harness.core.safe_write import UnsafeTarget, open_regular
from harness.store.results import ResultsError, run_dir_of, run_rows


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write an HTML report (trends, compare table, heatmaps) over runs",
                       description="Runs are ordered by start time (meta.json). The newest is compared with "
                                   "the one before it, or with --baseline.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run ids, run directories or results.jsonl files")
    p.add_argument("--out", default="kvbench-report.html", metavar="FILE", help="HTML file (default %(default)s)")
    p.add_argument("--summary", metavar="FILE",
                   help="also write a Markdown summary there (e.g. \"$GITHUB_STEP_SUMMARY\"; appended)")
    p.add_argument("--baseline", metavar="FILE", help="compare the newest run with this baseline instead")
    p.add_argument("--metric", action="append", metavar="NAME",
                   help=f"trend this metric (repeatable; default {', '.join(TREND_METRICS)})")
    p.add_argument("--config", action="append", metavar="TEXT", help="trend configs whose id or key contains TEXT")
    p.add_argument("--heatmap", default="peak_tokens_held", metavar="NAME",
                   help="heatmap metric (default %(default)s; peak_pages_held for pages)")
    p.add_argument("--mlflow-url", default="", metavar="URL", help="MLflow UI base URL for run links "
                                                                  "(default $MLFLOW_UI_URL or the run's server)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.judge import history  # pydantic: only this command loads it, not the parser
    from harness.judge.baseline import load_baseline  # pydantic: only this command loads it, not the parser
    from harness.view import report  # pydantic: only this command loads it, not the parser

    check_metric_option(args.metric, "--metric")
    check_metric_option([args.heatmap], "--heatmap")
    nights, skipped = [], []
    for r in args.runs:
        try:
            run_rows(r)  # a run that measured nothing is no night of the chart
            nights.append(history.load_night(run_dir_of(r).path))
        except (ResultsError, NumberError) as err:  # empty, crashed or damaged
            skipped.append(str(err))
    if not nights:  # every run is empty or unreadable: that is the error
        raise UsageError(f"report: no run can be charted ({skipped[0]})")
    for why in skipped:  # one crashed night among the kept ones must not cost the nightly its report
        print(f"kvbench: report: skipping {why}", file=sys.stderr)
    if len({n.path for n in nights}) != len(nights):
        raise UsageError("report: a run is given twice")
    suites = {n.suite for n in nights}
    if len(suites) > 1:
        raise UsageError(f"report: the runs are of several suites ({', '.join(sorted(suites))}); give runs of one suite")
    nights.sort(key=lambda n: (n.created, n.name))
    hist = history.build(nights)
    baseline = load_baseline(args.baseline) if args.baseline else None
    html, cmp = report.page(hist, metrics=args.metric or list(TREND_METRICS), configs=args.config,
                            heat_metric=args.heatmap, baseline=baseline, mlflow_url=args.mlflow_url)
    out = Path(args.out)
    try:
        report.write(out, html)
    except OSError as err:
        raise UsageError(f"--out {str(out)!r} cannot be written: {err.strerror or err}") from None
    print(f"report: {out} ({len(nights)} runs, {len(hist.moves)} figures moved"
          + (f"; newest: {cmp.summary()}" if cmp else "") + ")")
    if args.summary:
        try:
            with open(open_regular(args.summary, "--summary", os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a",
                      encoding="utf-8") as fh:
                fh.write(report.summary(hist, cmp, out.name, args.mlflow_url))
        except UnsafeTarget as err:
            raise UsageError(f"{err} (the report {out} was written)") from None
        except OSError as err:
            raise UsageError(f"--summary {args.summary!r} cannot be written: {err.strerror or err} "
                             f"(the report {out} was written)") from None
        print(f"summary: {args.summary}")
    return 0
