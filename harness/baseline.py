"""Baselines: per hardware profile, what each config measured when it was last blessed.

    {"profile", "created", "git_commit", "configs": {key: {"counters": {...},
     "timings": {metric: {"median", "spread", "samples" (when repeated)}}, "status", "test_id", "suite"}}}

Counters are exact (a change is a regression); timings and memory keep their
samples so compare can run a noise test. Baselines are written from real runs
only (`kvbench baseline RUN`), never by hand.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from harness.metric_kinds import kind
from mini_engine.errors import KVBenchError

FORMAT_KEYS = ("profile", "created", "git_commit", "configs")


class BaselineError(KVBenchError):
    """A baseline file is missing, malformed, or of another hardware profile."""


def default_path(profile: str, root: Path) -> Path:
    return root / "baselines" / f"{profile}.json"


def counters_of(row: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in (row.get("metrics") or {}).items():
        if kind(name) == "counter" and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    for vid, count in (row.get("violations") or {}).items():
        if isinstance(count, (int, float)) and not isinstance(count, bool):
            out[f"violations.{vid}"] = count
    return out


def timings_of(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    samples = row.get("samples") or {}
    for name, value in (row.get("metrics") or {}).items():
        if kind(name) not in ("timing", "memory") or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        s = [float(x) for x in samples.get(name, [value])]
        out[name] = {"median": float(value), "spread": (max(s) - min(s)) if s else 0.0}
        if len(s) > 1:  # one sample is the median itself
            out[name]["samples"] = s
    return out


def entry(row: dict[str, Any]) -> dict[str, Any]:
    return {"counters": counters_of(row), "timings": timings_of(row), "status": row.get("status"),
            "test_id": row.get("test_id"), "suite": row.get("suite")}


def build(rows: list[dict[str, Any]], profile: str, git_commit: str,
          existing: dict[str, Any] | None = None) -> tuple[dict[str, Any], int, int, list[str]]:
    """(baseline, added, updated, skipped keys). A crashed config is not blessed."""
    base = existing or {"profile": profile, "configs": {}}
    configs = dict(base.get("configs") or {})
    added = updated = 0
    skipped = []
    for row in rows:
        if row.get("status") == "failed":
            skipped.append(row["key"])
            continue
        if row["key"] in configs:
            updated += 1
        else:
            added += 1
        configs[row["key"]] = entry(row)
    out = {"profile": profile, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "git_commit": git_commit, "configs": dict(sorted(configs.items()))}
    return out, added, updated, skipped


def load_baseline(path: str | os.PathLike[str], expected_profile: str | None = None) -> dict[str, Any]:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise BaselineError(f"baseline {str(p)!r} not found (create it with kvbench baseline RUN)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BaselineError(f"baseline {str(p)!r} is not valid JSON: {err}") from None
    if not isinstance(data, dict) or any(k not in data for k in FORMAT_KEYS):
        raise BaselineError(f"baseline {str(p)!r} must be an object with {', '.join(FORMAT_KEYS)}")
    if not isinstance(data["configs"], dict) or not all(
            isinstance(v, dict) and isinstance(v.get("counters"), dict) and isinstance(v.get("timings"), dict)
            for v in data["configs"].values()):
        raise BaselineError(f"baseline {str(p)!r}: every config needs a counters and a timings table")
    if expected_profile is not None and data["profile"] != expected_profile:
        raise BaselineError(
            f"baseline {str(p)!r} is for profile {data['profile']!r}, but the run is on {expected_profile!r}; "
            f"pass --baseline with a {expected_profile} baseline")
    return data


def write_baseline(path: Path, baseline: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(_dumps(baseline))
    os.replace(tmp, path)


def _dumps(baseline: dict[str, Any]) -> str:
    """JSON with one config per line: a change to one config is a one-line diff."""
    head = {k: v for k, v in baseline.items() if k != "configs"}
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}," for k, v in sorted(head.items())]
    configs = sorted((baseline.get("configs") or {}).items())
    lines.append(' "configs": {')
    lines += [f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}{',' if i < len(configs) - 1 else ''}"
              for i, (k, v) in enumerate(configs)]
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"
