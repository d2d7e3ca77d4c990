"""Trace every accounting-only config of the named suites and replay them all on SGLang.

`kvbench conform` checks the traces it is given; this gives it one trace per config of
each suite (every profile the suite sweeps), so "every suite config conforms" is one
command. Configs that run a real model are skipped: their allocator calls are the
accounting's, which the same config with `--model none` already covers.

    python scripts/conform_suites.py smoke invariants --out conform-traces

Exit status: that of `kvbench conform` (0 every trace conforms, 1 a divergence, 2
SGLang missing or a trace that cannot be read); 2 with one line on a bad suite or an
unwritable --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.errors import HarnessError
from mini_engine.errors import KVBenchError


def write_traces(suites: list[str], out: Path) -> list[str]:
    from harness.runner import run_config
    from harness.suites import load_suite

    paths = []
    for suite in suites:
        for i, gc in enumerate(load_suite(suite).configs):
            if gc.config.get("model", "none") != "none":
                continue
            path = out / f"{suite}-{i:04d}.jsonl"
            run_config(dict(gc.config), trace=str(path))
            paths.append(str(path))
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("suites", nargs="+", help="suite names or TOML files (e.g. smoke invariants)")
    p.add_argument("--out", default="conform-traces", help="directory for the traces (default conform-traces)")
    args = p.parse_args(argv)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        paths = write_traces(args.suites, out)
    except OSError as err:
        print(f"error: --out {args.out}: {err.strerror or err}", file=sys.stderr)
        return 2
    except (KVBenchError, HarnessError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{len(paths)} traces in {out}", flush=True)
    from harness.cli import main as kvbench

    return kvbench(["conform", *paths])


if __name__ == "__main__":
    sys.exit(main())
