"""``kvbench ci``: what the CI workflows call (triage, rerun-args) and what checks them (lint)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

from harness.ci import reference_triage as rt
from harness.ci.recording import client_for
from harness.ci.sglang_ref import requirement
from harness.commands import build_parser
from harness.core.errors import UsageError
from harness.core.urls import check_web_url


def _root(args: argparse.Namespace) -> Path:
    root = Path(args.root)
    if not (root / "ci" / "runners.toml").is_file():
        raise UsageError(f"--root {root} holds no ci/runners.toml (run from the repository root or pass --root)")
    return root


def _registry(args: argparse.Namespace):
    """--root and its runner registry."""
    from harness.ci.runners import load_registry  # pydantic: only this command loads it, not the parser

    root = _root(args)
    return root, load_registry(root / "ci" / "runners.toml")


def cmd_triage(args: argparse.Namespace) -> int:
    from harness.ci import triage  # pydantic: only this command loads it, not the parser
    from harness.judge.baseline import load_baseline  # pydantic: only this command loads it, not the parser

    # The link target of every night's MLflow run in the issue: http(s) only.
    ui_url = check_web_url(args.mlflow_url or "", "--mlflow-url")
    # --runner names the issues; it must be a label of the registry (a typo would fork them).
    runner = _registry(args)[1].get(args.runner) if args.runner else None
    dirs = [Path(d) for d in args.nights] if args.nights else triage.history(Path(args.history))
    # As compare: counters of another hardware profile's baseline are not this machine's.
    profile = runner.profile if runner else triage.profile_of(dirs)
    baseline = load_baseline(args.baseline, expected_profile=profile)
    where = runner.label if runner else str(baseline.get("profile") or Path(args.baseline).stem)
    nights = triage.load_nights(dirs, baseline, ui_url)
    tp = triage.plan(nights, baseline, where, args.min_nights)
    client = client_for(args.github)
    for line in triage.apply(tp, client, where, nights[-1].name):
        print(line)
    if not args.github:
        for t in tp.track:
            print(f"\n--- would file: {t.title}\n{t.body}")
    words = [w for w, _, _ in tp.moved]
    print(f"triage: {len(tp.track)} tracked, {len(tp.blips)} one-night, {len(tp.recovered)} recovered, "
          f"{words.count('improved')} improved, {words.count('changed')} changed over {len(nights)} night(s)")
    return 0


def cmd_reference_triage(args: argparse.Namespace) -> int:
    run_url = check_web_url(args.run_url or "", "--run-url")
    docs = [rt.load(Path(p)) for p in args.reports]
    plan = rt.plan(docs, run_url)
    for line in rt.apply(plan, client_for(args.github)):
        print(line)
    if not args.github:
        for f in plan.file:
            print(f"\n--- would file: {f.title}\n{f.body}")
    print(f"reference-triage: {len(plan.file)} differing, {len(plan.equal)} equal over {len(docs)} report(s)")
    return 0


def cmd_sglang_requirement(args: argparse.Namespace) -> int:
    print(requirement(args.ref))
    return 0


def cmd_rerun_args(args: argparse.Namespace) -> int:
    from harness.ci.rerun import check_sha, rerun_argv  # pydantic: only this command loads it, not the parser

    root, registry = _registry(args)
    tree = Path(args.tree) if args.tree else root
    if args.sha:
        check_sha(args.sha, "--sha")
    argv = rerun_argv(registry, tree, root, args.runner, args.tests, args.suite, args.filter, args.run_id)
    print(json.dumps(argv))
    return 0


def parse_cli(argv: list[str]) -> None:
    """Raise SystemExit unless ``kvbench <argv>`` parses to a runnable subcommand."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        ns = build_parser().parse_args(argv)
    if not getattr(ns, "func", None):
        raise SystemExit(2)


def lint(root: Path) -> list[str]:
    """Problems in the workflows, the runner registry, the permissions and runner marks."""
    # pydantic, yaml: only this command loads it, not the parser
    from harness.ci import specs, testfiles, workflows
    from harness.ci.permissions import load_permissions  # pydantic: only this command loads it, not the parser
    from harness.ci.runners import load_registry  # pydantic: only this command loads it, not the parser

    registry = load_registry(root / "ci" / "runners.toml")
    load_permissions(root / "ci" / "permissions.json", registry.labels)
    problems = [str(p) for p in workflows.check_all(root, registry, parse_cli)]
    suites = root / "suites"
    # The tree may be a pull request's: a suites/ that links elsewhere (to `/`) is not walked.
    if suites.is_symlink() or not suites.is_dir():
        return problems + ["suites/: a symlink or not a directory; runner marks not checked"]
    for path in sorted(p for p in suites.rglob("*.py") if not p.is_symlink()):
        if not specs.FILE_NAME_RE.match(path.name):
            continue
        rel = str(path.relative_to(root))
        try:
            info = testfiles.scan(path)
            marks = [info.module_runner, *info.functions.values(), *info.classes.values()]
            marks += [m for methods in info.methods.values() for m in methods.values()]
            for label in filter(None, marks):
                if label not in registry.runners:
                    problems.append(f"{rel}: runner mark {label!r} is not in ci/runners.toml")
        except UsageError as err:
            problems.append(f"{rel}: {err}")
    return problems


def cmd_lint(args: argparse.Namespace) -> int:
    problems = lint(_root(args))
    for p in problems:
        print(p)
    print(f"ci lint: {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


def cmd_runners(args: argparse.Namespace) -> int:
    root, registry = _registry(args)
    if not args.files:
        for r in registry.runners.values():
            print(f"{r.label:12} profile={r.profile:8} gpus={r.gpus} runs-on={r.runs_on} suites={','.join(r.suites) or '-'}")
        return 0
    from harness.ci.specs import parse_test_spec  # pydantic: only this command loads it, not the parser

    for token in args.files:
        spec = parse_test_spec(token, root)
        if spec.test:
            print(f"{spec.node_id} {registry.runner_for_test(root, spec.file, spec.test)}")
            continue
        # A whole file: each runner its tests ask for, with those tests when there are several.
        split = registry.runners_for_file(root, spec.file)
        for label, tests in split.items():
            print(f"{spec.file} {label}" if len(split) == 1 else f"{spec.file} {label} {' '.join(tests)}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("ci", help="CI helpers: nightly triage, rerun arguments, workflow lint")
    sub = p.add_subparsers(dest="ci_command", metavar="CI_COMMAND", parser_class=type(p))
    sub.required = True

    t = sub.add_parser("triage", help="open/update issues for regressions seen on consecutive nights")
    nights = t.add_mutually_exclusive_group(required=True)
    nights.add_argument("--nights", nargs="+", metavar="DIR", help="run directories, oldest first")
    nights.add_argument("--history", metavar="DIR", help="a directory of night run directories (sorted by name)")
    t.add_argument("--baseline", required=True, metavar="FILE", help="results/baselines/<profile>.json")
    where = t.add_mutually_exclusive_group()
    where.add_argument("--github", metavar="OWNER/REPO", help="file issues there (token from GITHUB_TOKEN)")
    where.add_argument("--dry-run", action="store_true", help="print what would be filed (the default)")
    t.add_argument("--mlflow-url", default="", metavar="URL", help="MLflow UI base URL for run links")
    t.add_argument("--runner", metavar="LABEL", help="runner label named in issue titles (default: the profile)")
    t.add_argument("--min-nights", type=int, default=2, metavar="N", help="consecutive nights before filing (>= 2)")
    t.add_argument("--root", default=".", help="repository root (ci/runners.toml, for --runner)")
    t.set_defaults(func=cmd_triage)

    rt = sub.add_parser("reference-triage",
                        help="open/update an issue for each config where SGLang's own loop and the mini engine differ")
    rt.add_argument("reports", nargs="+", metavar="REPORT", help="kvbench conform --engine --suite S --report FILE")
    rwhere = rt.add_mutually_exclusive_group()
    rwhere.add_argument("--github", metavar="OWNER/REPO", help="file issues there (token from GITHUB_TOKEN)")
    rwhere.add_argument("--dry-run", action="store_true", help="print what would be filed (the default)")
    rt.add_argument("--run-url", default="", metavar="URL", help="the job's page, linked from each issue")
    rt.set_defaults(func=cmd_reference_triage)

    sr = sub.add_parser("sglang-requirement", help="the pip requirement of an SGLang release or git ref (checked)")
    sr.add_argument("ref", nargs="?", default="", help="a release, a commit, a branch or tag; empty: the newest release")
    sr.set_defaults(func=cmd_sglang_requirement)

    r = sub.add_parser("rerun-args", help="validate rerun-test inputs and print the argv to run, as JSON")
    r.add_argument("--runner", required=True, metavar="LABEL")
    r.add_argument("--tests", default="[]", metavar="JSON", help="JSON list of test ids")
    r.add_argument("--suite", default="", metavar="SUITE")
    r.add_argument("--filter", default="", metavar="EXPR")
    r.add_argument("--run-id", required=True, metavar="ID")
    r.add_argument("--sha", default="", metavar="SHA", help="the commit the run checks out (checked: 40 hex digits)")
    r.add_argument("--tree", metavar="DIR", help="checkout whose suites/ holds the tests (default: --root)")
    r.add_argument("--root", default=".", help="repository root (ci/ and suites/*.toml)")
    r.set_defaults(func=cmd_rerun_args)

    lt = sub.add_parser("lint", help="check workflows, runner registry, permissions and runner marks")
    lt.add_argument("--root", default=".", help="repository root")
    lt.set_defaults(func=cmd_lint)

    rn = sub.add_parser("runners", help="list runner labels, or the runner of each given test spec")
    rn.add_argument("files", nargs="*", metavar="SPEC")
    rn.add_argument("--root", default=".", help="repository root")
    rn.set_defaults(func=cmd_runners)
