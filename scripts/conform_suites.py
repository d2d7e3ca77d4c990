"""Trace every accounting-only config of the named suites and replay them all on SGLang.

`kvbench conform` checks the traces it is given; this gives it one trace per config of
each suite (every profile the suite sweeps), so "every suite config conforms" is one
command. Configs that run a real model are skipped: their allocator calls are the
accounting's, which the same config with `--model none` already covers.

Each profile is one SGLang release (sglang-pre-35265 is 0.5.18, the others 0.5.23:
mini_engine.config.profiles.SGLANG_VERSIONS), and conform refuses a trace on another release.
So the traces are conformed by release: by this interpreter's SGLang, or by the
interpreter `--python VERSION=PATH` names for that release (CI's 0.5.18 venv).

    python scripts/conform_suites.py smoke invariants --out conform-traces \\
        --python 0.5.18=.venv-sglang-0518/bin/python

`--profile NAME` (repeatable) traces only that profile's configs.

Exit status: the worst of the `kvbench conform` runs (0 every trace conforms, 1 a
divergence, 2 SGLang missing, a trace of another release than the interpreter's, or a
trace that cannot be read); 2 with one line on a bad suite, profile, --python or an
unwritable --out.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from harness.core.errors import HarnessError
from mini_engine.errors import KVBenchError
from mini_engine.config.profiles import DEFAULT_PROFILE, SGLANG_VERSIONS

ROOT = Path(__file__).resolve().parent.parent


def accounting_configs(suites: list[str], profiles: list[str] | None = None):
    """(suite, index, config, SGLang version) of every accounting-only config, in order."""
    from harness.grid.suites import load_suite

    for suite in suites:
        for i, gc in enumerate(load_suite(suite).configs):
            if gc.config.get("model", "none") != "none":
                continue
            profile = gc.config.get("profile", DEFAULT_PROFILE)
            if profiles and profile not in profiles:
                continue
            yield suite, i, dict(gc.config), SGLANG_VERSIONS[profile]


def write_traces(suites: list[str], out: Path, profiles: list[str] | None = None) -> dict[str, list[str]]:
    """{SGLang version: trace paths}, one trace per accounting-only config."""
    from harness.run.runner import run_config

    by_version: dict[str, list[str]] = {}
    for suite, i, config, version in accounting_configs(suites, profiles):
        path = out / f"{Path(suite).stem}-{i:04d}.jsonl"
        run_config(config, trace=str(path))
        by_version.setdefault(version, []).append(str(path))
    return by_version


def parse_pythons(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        version, sep, python = item.partition("=")
        if not sep or not python or version not in set(SGLANG_VERSIONS.values()):
            raise ValueError(f"--python {item}: expected VERSION=PATH with VERSION one of "
                             f"{', '.join(sorted(set(SGLANG_VERSIONS.values())))}")
        out[version] = python
    return out


def conform_with(python: str | None, paths: list[str]) -> int:
    """kvbench conform over the paths: in this process, or in the named interpreter."""
    if python is None:
        from harness.cli import main as kvbench

        return kvbench(["conform", *paths])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    try:
        return subprocess.run([python, "-m", "harness.cli", "conform", *paths], env=env).returncode
    except OSError as err:
        print(f"error: --python {python}: {err.strerror or err}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("suites", nargs="+", help="suite names or TOML files (e.g. smoke invariants)")
    p.add_argument("--out", default="conform-traces", help="directory for the traces (default conform-traces)")
    p.add_argument("--profile", action="append", choices=sorted(SGLANG_VERSIONS),
                   help="trace only this profile's configs (repeatable; default every profile)")
    p.add_argument("--python", action="append", default=[], metavar="VERSION=PATH",
                   help="the interpreter with that SGLang release installed, for its profiles' traces")
    args = p.parse_args(argv)
    out = Path(args.out)
    try:
        pythons = parse_pythons(args.python)
        out.mkdir(parents=True, exist_ok=True)
        by_version = write_traces(args.suites, out, args.profile)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"error: --out {args.out}: {err.strerror or err}", file=sys.stderr)
        return 2
    except (KVBenchError, HarnessError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    status = 0
    for version, paths in sorted(by_version.items()):
        print(f"{len(paths)} traces in {out} for SGLang {version}", flush=True)
        status = max(status, conform_with(pythons.get(version), paths))
    return status


if __name__ == "__main__":
    sys.exit(main())
