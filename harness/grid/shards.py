"""`kvbench sweep SUITE --shard I/N`: one suite split over N machines, one night.

Shards are numbered from 1 (``1/4`` .. ``4/4``, as pytest-split's ``--group`` and
GitLab's ``CI_NODE_INDEX`` count; SGLang's ``--auto-partition-id`` counts from 0, and
``0/4`` is refused in one line rather than read either way).

The split is longest-processing-time first (LPT, as SGLang's CI partitions its
suites): configs sorted by expected seconds, the longest first, each onto the shard
with the least expected time so far (the lowest index on a tie). Expected seconds
are the last night's measured duration of each config (finished_at - started_at of
its row, in the newest earlier run of the suite on this hardware profile), and the
cost model (harness.grid.cost) for a config no night measured, scaled by how the
measured ones compare with their model. Every shard of a night computes the same
plan from the same nights; its digest goes into meta.json, and `kvbench merge`
refuses shards planned differently (a shard that saw other nights), which would
otherwise overlap or miss configs.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from harness.core.errors import UsageError
from harness.core.options import resolved_defaults
from harness.grid.cost import model_seconds
from harness.grid.filter import compile_filter
from harness.grid.suites import Suite
from harness.store.results import RESULTS, RunDir, load_rows

MAX_SHARDS = 1000
_SHARD_RE = re.compile(r"([0-9]{1,4})/([0-9]{1,4})\Z")


@dataclass(frozen=True)
class Shard:
    index: int  # 1..count
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    m = _SHARD_RE.match(text.strip())
    index, count = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    if not m or not 1 <= count <= MAX_SHARDS or not 1 <= index <= count:
        raise UsageError(f"--shard takes I/N, shard I of N counted from 1 (1/4 .. 4/4), N from 1 to {MAX_SHARDS} "
                         f"(got {text!r})")
    return Shard(index, count)


@dataclass(frozen=True)
class Plan:
    """The split of a suite's configs over the shards of one night."""
    shards: list[list[str]]  # per shard (index 0 is shard 1/N): its config test ids, in suite order
    expected: dict[str, float]  # test id -> expected seconds
    source: str  # where the expected seconds came from (for the sweep's first line)

    def loads(self) -> list[float]:
        return [sum(self.expected[i] for i in ids) for ids in self.shards]

    @property
    def digest(self) -> str:
        """Which config went to which shard: equal on every shard of one night."""
        text = "\n".join(",".join(ids) for ids in self.shards)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def partition(expected: dict[str, float], count: int, order: list[str]) -> list[list[str]]:
    """LPT: the longest config first onto the least-loaded shard. Deterministic: ties in
    time go by ``order`` (the suite's), ties in load to the lowest shard; each shard's
    ids come back in ``order``."""
    pos = {cid: i for i, cid in enumerate(order)}
    loads = [0.0] * count
    members: list[list[str]] = [[] for _ in range(count)]
    for cid in sorted(order, key=lambda c: (-expected[c], pos[c])):
        k = min(range(count), key=lambda j: (loads[j], j))
        loads[k] += expected[cid]
        members[k].append(cid)
    return [sorted(ids, key=pos.__getitem__) for ids in members]


def plan(suite: Suite, count: int, nights: list[Path], profile: str, filter_expr: str | None = None) -> Plan:
    """The split of the configs ``filter_expr`` selects (all when None) over ``count`` shards."""
    keep = compile_filter(filter_expr) if filter_expr else None
    configs = [gc for gc in suite.configs if keep is None or keep(gc.id, gc.config)]
    measured = measured_seconds(suite.name, profile, nights)
    defaults = resolved_defaults()
    modelled, seconds = {}, {}
    for gc in configs:
        modelled[gc.id] = model_seconds(gc.config, suite.repeat, defaults)
        key = gc.spec.key
        if key in measured:
            seconds[gc.id] = measured[key]
    # The model in the night's units: scaled by measured over modelled where both exist.
    both = [cid for cid in seconds if modelled[cid] > 0]
    scale = (sum(seconds[c] for c in both) / sum(modelled[c] for c in both)) if both else 1.0
    expected = {gc.id: seconds.get(gc.id, modelled[gc.id] * scale) for gc in configs}
    n = len(seconds)
    source = ("the cost model (no earlier night of this suite on this hardware profile)" if not n else
              f"the last night's durations ({n} of {len(configs)} configs"
              + (", the cost model for the rest)" if n < len(configs) else ")"))
    return Plan(partition(expected, count, [gc.id for gc in configs]), expected, source)


def measured_seconds(suite: str, profile: str, roots: list[Path]) -> dict[str, float]:
    """Config key -> seconds its row took, from the newest run under ``roots`` (run
    directories, or results roots with runs/) of ``suite`` on ``profile`` that measured
    it. A shard not yet merged and a directory that is not a readable run are skipped."""
    runs = []
    for root in roots:
        root = Path(root)
        if root.is_dir() and not any((p / RESULTS).is_file() for p in root.iterdir()) and (root / "runs").is_dir():
            root = root / "runs"
        for p in sorted(root.iterdir()) if root.is_dir() else ():
            if p.is_symlink() or not (p / RESULTS).is_file():
                continue
            try:
                meta = RunDir(p).meta()
            except Exception:  # a foreign or torn directory is no night to plan by
                continue
            created = meta.get("created")
            if (meta.get("suite") == suite and (meta.get("hardware") or {}).get("profile") == profile
                    and not meta.get("shard") and isinstance(created, (int, float))):
                runs.append((created, p.name, p))
    out: dict[str, float] = {}
    for _, _, p in sorted(runs, reverse=True):  # newest first: the first duration of a key is its latest
        try:
            rows = load_rows(p)
        except Exception:
            continue
        for row in rows:
            took = _took(row)
            if took is not None:
                out.setdefault(row["key"], took)
    return out


def _took(row: dict[str, Any]) -> float | None:
    start, end = row.get("started_at"), row.get("finished_at")
    if row.get("status") == "failed" or not all(isinstance(t, (int, float)) and not isinstance(t, bool)
                                                for t in (start, end)):
        return None  # a config that died says nothing of how long it takes
    return float(end - start) if end >= start else None


def selection(meta: dict[str, Any]) -> Callable[..., bool] | None:
    """Which configs a run set out to measure, from its meta.json: its --filter, or for a
    shard its share (planned from what the filter selects); None for the whole suite.
    Compare counts only these as missing."""
    shard = meta.get("shard")
    if isinstance(shard, dict) and isinstance(shard.get("configs"), list):
        ids = {c for c in shard["configs"] if isinstance(c, str)}
        return lambda test_id, config=None: test_id in ids
    expr = meta.get("filter")
    return compile_filter(expr) if expr else None


def shard_meta(suite: Suite, shard: Shard, nights: list[Path], profile: str, filter_expr: str | None,
               run_id: str) -> dict[str, Any]:
    """The shard block of a shard's meta.json: which shard of which plan, its configs."""
    p = plan(suite, shard.count, nights, profile, filter_expr)
    ids = p.shards[shard.index - 1]
    return {"index": shard.index, "count": shard.count, "plan": p.digest, "night": run_id, "configs": ids,
            "expected_s": round(sum(p.expected[i] for i in ids), 3), "source": p.source}
