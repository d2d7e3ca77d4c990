"""`kvbench merge`: the shards of one night (`kvbench sweep --shard I/N`) joined into one
run directory, which every reader (compare, history, report, ci triage) then reads as
one night, as if one machine had swept the suite.

A shard's directory usually comes from another machine (a CI artifact), so it is read
as input kvbench did not write here, through the one reader of such directories
(harness/store/run_files.py: no link followed, regular files only, bounded sizes),
and every row passes the results reader's checks. Shards are refused, in one line, when they are not shards,
when one is given twice or missing, when two hold the same config, or when they
differ in what makes them one night: suite (and its file's hash), commit, hardware
profile, filter, repeat, shard count, plan (a shard that saw other nights would have
split the suite differently) or night (its --run-id). Nothing is written until every
shard has been read and checked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError
from harness.core.numbers import check_numbers
from harness.store.results import (
    LOGGED,
    META,
    RESULTS,
    RunDir,
    create_run_dir,
    latest_rows,
    read_jsonl,
    replace_text,
    row_json,
)
from harness.store.run_files import DEFAULT_LIMIT, META_LIMIT, read_run_file

LOG = "pytest.log"
# What must be equal on every shard of one night, and how a refusal names it.
SAME = (("suite", "suite"), ("suite_hash", "suite file"), ("git_commit", "commit"), ("profile", "hardware profile"),
        ("filter", "--filter"), ("repeat", "repeat"), ("count", "shard count"), ("plan", "plan"),
        ("night", "night (--run-id)"))


@dataclass
class ShardRun:
    path: Path
    meta: dict[str, Any]
    rows: list[dict[str, Any]]

    @property
    def shard(self) -> dict[str, Any]:
        return self.meta["shard"]

    @property
    def label(self) -> str:
        return f"{self.shard['index']}/{self.shard['count']}"

    def field(self, name: str) -> Any:
        if name == "profile":
            return (self.meta.get("hardware") or {}).get("profile")
        return self.shard.get(name) if name in ("count", "plan", "night") else self.meta.get(name)


def read_shard(path: Path) -> ShardRun:
    # The shard's own directory is given by the user; a link there would be read elsewhere.
    if path.is_symlink() or not path.is_dir():
        raise UsageError(f"{path}: not a run directory (a directory, not a link, is needed)")
    meta = read_run_file(path, META, "shard meta", UsageError, fmt="json", limit=META_LIMIT, default=None)
    if meta is None:
        raise UsageError(f"{path} is not a run directory of kvbench sweep --shard (no {META})")
    if not isinstance(meta, dict):
        raise UsageError(f"{path / META}: not a JSON object")
    check_numbers(meta, str(path / META))
    shard = meta.get("shard")
    if not (isinstance(shard, dict) and all(type(shard.get(k)) is int for k in ("index", "count"))
            and 1 <= shard["index"] <= shard["count"] and isinstance(shard.get("configs"), list)
            and all(isinstance(c, str) for c in shard["configs"])):
        raise UsageError(f"{path} is not a shard (its {META} has no shard block): kvbench merge joins the run "
                         "directories of kvbench sweep --shard I/N")
    return ShardRun(path, meta, latest_rows(read_jsonl(path / RESULTS), path))


def check_shards(shards: list[ShardRun]) -> None:
    """One night's shards, each once, none missing, no config in two."""
    first = shards[0]
    for other in shards[1:]:
        for name, said in SAME:
            if other.field(name) != first.field(name):
                raise UsageError(f"shards {first.path.name} ({first.label}) and {other.path.name} ({other.label}) "
                                 f"differ in {said} ({first.field(name)!r} vs {other.field(name)!r}): "
                                 "not shards of one night")
    count = first.shard["count"]
    seen: dict[int, ShardRun] = {}
    for s in shards:
        if s.shard["index"] in seen:
            raise UsageError(f"shard {s.label} given twice ({seen[s.shard['index']].path} and {s.path})")
        seen[s.shard["index"]] = s
    missing = [f"{i}/{count}" for i in range(1, count + 1) if i not in seen]
    if missing:
        raise UsageError(f"shard {', '.join(missing)} missing: give all {count} shards of night "
                         f"{first.shard.get('night')}")
    owner: dict[str, str] = {}
    for s in shards:
        share = set(s.shard["configs"])
        for row in s.rows:
            if row.get("test_id") not in share:
                raise UsageError(f"shard {s.label} ({s.path}) holds config {row.get('test_id') or row['key']!r}, "
                                 "which its plan gave to another shard")
            if row["key"] in owner:
                raise UsageError(f"config {row.get('test_id') or row['key']!r} is in shards {owner[row['key']]} "
                                 f"and {s.label}: overlapping shards")
            owner[row["key"]] = s.label


def merged_meta(shards: list[ShardRun], run_id: str) -> dict[str, Any]:
    """The night's meta.json: the shards' common fields, the earliest start, the longest
    wall time (shards run side by side), and what each shard was."""
    first = shards[0]
    meta = {k: v for k, v in first.meta.items() if k not in ("shard", "wall_s", "planned")}
    created = [s.meta["created"] for s in shards if isinstance(s.meta.get("created"), (int, float))]
    walls = [s.meta["wall_s"] for s in shards if isinstance(s.meta.get("wall_s"), (int, float))]
    meta.update(created=min(created) if created else None, wall_s=max(walls) if walls else 0.0,
                jobs=sum(s.meta.get("jobs") or 0 for s in shards),
                planned=sum(len(s.shard["configs"]) for s in shards))
    for name in ("mlflow_uri", "mlflow_parent", "mlflow_experiment"):  # one store and parent, else sync anew
        values = {json.dumps(s.meta.get(name)) for s in shards}
        meta[name] = first.meta.get(name) if len(values) == 1 else None
    meta["merged"] = {
        "night": first.shard.get("night"), "count": first.shard["count"], "plan": first.shard.get("plan"),
        "shards": [{"index": s.shard["index"], "run_dir": s.path.name, "configs": len(s.shard["configs"]),
                    "rows": len(s.rows), "expected_s": s.shard.get("expected_s"), "wall_s": s.meta.get("wall_s"),
                    "created": s.meta.get("created"), "gpu_name": (s.meta.get("hardware") or {}).get("gpu_name")}
                   for s in shards],
    }
    return meta


def merge(paths: list[Path], run_id: str, root: Path) -> tuple[RunDir, list[str]]:
    """Join the shards at ``paths`` into the new run ``run_id`` under ``root``; the run and
    notes (shards that did not measure their whole share)."""
    shards = sorted((read_shard(Path(p)) for p in paths), key=lambda s: s.shard["index"])
    check_shards(shards)
    notes = [f"shard {s.label} measured {len(s.rows)} of its {len(s.shard['configs'])} configs: the others "
             "count as missing" for s in shards if len(s.rows) < len(s.shard["configs"])]
    logs = [(s, read_run_file(s.path, LOG, "shard log", UsageError, limit=DEFAULT_LIMIT, default="")) for s in shards]
    if (root / "runs" / run_id).exists() or (root / "runs" / run_id).is_symlink():
        raise UsageError(f"run {run_id!r} already exists in {root / 'runs'}: merge writes a new run, give another --run-id")
    run_dir = create_run_dir(run_id, root=root)
    rows = [{**row, "run_id": run_id} for s in shards for row in s.rows]
    replace_text(run_dir.results, "".join(row_json(r) + "\n" for r in rows))
    replace_text(run_dir.path / LOG, "".join(f"==== shard {s.label}: {s.path.name} ====\n{text or ''}\n"
                                             for s, text in logs))
    meta = merged_meta(shards, run_id)
    if meta.get("mlflow_uri"):  # the same store for every shard: what each logged is logged for the night
        logged = [read_run_file(s.path, LOGGED, "upload log", UsageError, default="") for s in shards]
        replace_text(run_dir.logged, "".join(line + "\n" for text in logged for line in text.splitlines() if line))
    run_dir.write_meta(meta)  # last: a directory without it is no run (the reader's sign it did not finish)
    return run_dir, notes
