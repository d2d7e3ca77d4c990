"""Rewrite the test ids a baseline file stores to the schema's spelling; nothing else changes.

Test ids once spelt some options differently from the result keys (``win:`` for
``window=``, ``pat:`` for ``layers=``, ...). The schema (harness/core/options.py) now
gives each option one short id, so a suite's test ids changed while the result keys,
which key a baseline, did not. This recomputes each entry's ``test_id`` from its
suite (the id the suite now gives the config with that key) and leaves keys,
counters and timings as they were; it refuses to write if any of them would change.

    python scripts/migrate_test_ids.py results/baselines/*.json
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from harness.core.options import ID_ALIASES, short_names
from harness.judge.baseline import write_baseline


def suite_ids(name: str) -> dict[str, str]:
    """result key -> test id for every config of a suite."""
    from harness.grid.suites import load_suite

    return {gc.spec.key: gc.id for gc in load_suite(name, validate=False).configs}


def renamed(test_id: str) -> str:
    """The old spellings replaced part by part (for an entry no current suite holds)."""
    short = short_names()
    parts = test_id.split("-")
    out = []
    for part in parts:
        name, sep, rest = part.partition(":")
        if sep and name in ID_ALIASES:
            part = f"{short[ID_ALIASES[name]]}:{rest}"
        out.append(part)
    return "-".join(out)


def migrate(data: dict) -> tuple[dict, int]:
    new = copy.deepcopy(data)
    cache: dict[str, dict[str, str]] = {}
    changed = 0
    for key, entry in new["configs"].items():
        old = entry.get("test_id")
        if not old:
            continue
        suite = entry.get("suite")
        if suite and suite not in cache:
            try:
                cache[suite] = suite_ids(suite)
            except Exception:  # a suite this checkout does not have: rename the parts
                cache[suite] = {}
        now = cache.get(suite, {}).get(key) or renamed(old)
        if now != old:
            entry["test_id"] = now
            changed += 1
    for key, entry in data["configs"].items():  # nothing but the test ids may move
        after = {k: v for k, v in new["configs"][key].items() if k != "test_id"}
        if after != {k: v for k, v in entry.items() if k != "test_id"}:
            raise SystemExit(f"refusing to write: entry {key!r} changed beyond its test_id")
    return new, changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--check", action="store_true", help="exit 1 if a file would change; write nothing")
    args = p.parse_args(argv)
    stale = 0
    for path in args.files:
        data = json.loads(path.read_text())
        new, changed = migrate(data)
        print(f"{path}: {changed} test ids rewritten, {len(data['configs'])} entries, keys and counters unchanged")
        stale += changed
        if changed and not args.check:
            write_baseline(path, new)  # the writer kvbench baseline uses: the same layout
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
