"""Regression verdicts: a run's rows against a baseline of the same hardware profile.

Each figure's gate and direction are declared with it (harness/core/metrics.py:
``Metric.gate``, ``better``). Deterministic counters (pages, slots,
leaks, violations, syncs, steps, tokens, retractions) are compared exactly and
judged by their direction (harness/core/direction.py): worse is a regression (a
violation id the baseline never saw included), better an improvement, and a move of
a figure without a direction is "changed". The gate stays exact: any counter that
moved fails it, an improvement too (the baseline is then blessed again). Timings and memory
gate only on evidence: at least 10%
worse AND a one-sided Mann-Whitney U over the repeated samples below alpha (as
asv does), so one noisy run on a shared machine never fails a check.

The reference is a baseline file or any other run (``reference_of_run``): a run is
a baseline nobody blessed. Across hardware or accounting profiles the counters are
still compared exactly, but timings measured on different machines (or doing
different work) say nothing about each other: they are shown as "not comparable".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from harness.core.direction import counter_verdict, gates, status_verdict
from harness.core.markdown import code
from harness.core.metrics import lookup
from harness.core.numbers import is_number, vanished
from harness.judge.baseline import counters_of, entry
from harness.judge.rollup import rollup_lines

VERDICTS = ("ok", "regression", "improvement", "changed", "new", "missing", "not comparable")
THRESHOLD = 0.10
ALPHA = 0.05


@dataclass
class Finding:
    key: str
    metric: str
    baseline: float | None
    now: float | None
    change: str
    verdict: str


@dataclass
class CompareReport:
    findings: list[Finding] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # key -> test id, for shorter tables
    labels: tuple[str, str] = ("baseline", "now")  # the reference and the judged run, as column heads
    configs: dict[str, dict] = field(default_factory=dict)  # key -> config ({} for the reference's others), for the roll-up by axis

    @property
    def regressions(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict == "regression"]

    @property
    def regressed(self) -> bool:
        """The gate (exit 1): any counter that moved, whichever way, a timing that regressed,
        or a figure that vanished (or turned into a string, true, null) from a config that
        ran: lost evidence, not an unchanged figure."""
        return bool(self.gating)

    @property
    def gating(self) -> list[Finding]:
        return [f for f in self.findings
                if gates(f.verdict, f.metric) or (f.verdict == "missing" and f.metric != "*")]
    @property
    def judged(self) -> bool:
        """Whether the reference had anything to say: some config of the run is in it, or a
        config of it is missing from the run. With neither, every config is "new" and a
        clean verdict would rest on nothing (a reference of another suite)."""
        return any(not (f.metric == "*" and f.verdict == "new") for f in self.findings)

    @property
    def direction(self) -> str:
        """The run in one word: regressed, changed, improved or clean (the MLflow tag)."""
        verdicts = {f.verdict for f in self.findings}
        for verdict, word in (("regression", "regressed"), ("changed", "changed"), ("improvement", "improved")):
            if verdict in verdicts:
                return word
        return "clean"

    @property
    def missing_configs(self) -> list[str]:
        """Configs of the reference the judged run did not measure at all."""
        return [f.key for f in self.findings if f.metric == "*" and f.verdict == "missing"]

    def counts(self) -> dict[str, int]:
        c = dict.fromkeys(VERDICTS, 0)
        for f in self.findings:
            c[f.verdict] += 1
        return c

    def summary(self) -> str:
        c = self.counts()
        keys = len({f.key for f in self.findings})
        text = (f"{keys} configs compared: {c['regression']} regressions, {c['improvement']} improvements, "
                f"{c['changed']} changed, {c['new']} new, {c['missing']} missing, {c['ok']} unchanged figures")
        if c["not comparable"]:
            text += f", {c['not comparable']} timings not comparable"
        return text

    def table(self, fmt: str = "text", all: bool = False) -> str:
        shown = self.findings if all else [f for f in self.findings if f.verdict != "ok"]
        head = ("config", "metric", *self.labels, "change", "verdict")
        cells = [(self.names.get(f.key, f.key), f.metric, _num(f.baseline), _num(f.now), f.change, f.verdict)
                 for f in shown]
        if fmt == "markdown":
            lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            # Names, statuses and anything not a number come from result files: code spans (harness.core.markdown).
            lines += ["| " + " | ".join([code(row[0]), code(row[1]), *(_md_num(v) for v in (f.baseline, f.now)),
                                         code(row[4]), row[5]]) + " |" for f, row in zip(shown, cells)]
        elif fmt == "text":
            widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(head)]
            lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip()]
            lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
        else:
            raise ValueError(f"fmt must be 'text' or 'markdown' (got {fmt!r})")
        if not cells:
            lines = ["no changes"]

        # what moved, by metric and the axes that explain it
        rolled = rollup_lines(self.findings, self.configs, fmt)
        return "\n".join(lines + ([""] + rolled if rolled else []) + ["", self.summary()])


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:g}" if isinstance(v, (int, float)) else str(v)


def _md_num(v: object) -> str:
    return _num(v) if v is None or isinstance(v, (int, float)) else code(v)


def _counter_change(b: float, n: float) -> str:
    d = n - b
    return f"{d:+g}" if not b else f"{d:+g} ({100 * d / abs(b):+.1f}%)"


def compare_rows(rows: list[dict[str, Any]], baseline: dict[str, Any], *, threshold: float = THRESHOLD,
                 alpha: float = ALPHA, selected: Callable[[str], bool] | None = None,
                 timings_note: str | None = None) -> CompareReport:
    """``selected``: the run's --filter over test ids; a config it left out is not missing.
    ``timings_note``: timings are not judged (the runs are of different profiles); each is
    shown with this note and the verdict "not comparable"."""
    report = CompareReport()
    base_configs = baseline.get("configs") or {}
    seen = set()
    for row in rows:
        key = row["key"]
        seen.add(key)
        if row.get("test_id"):
            report.names[key] = row["test_id"]
        if isinstance(row.get("config"), dict):
            report.configs[key] = row["config"]
        base = base_configs.get(key)
        if base is None:
            report.findings.append(Finding(key, "*", None, None, "not in the baseline", "new"))
            continue
        report.findings.extend(_status(key, base, row))
        found = _counters(key, base.get("counters") or {}, counters_of(row))
        found += _timings(key, base.get("timings") or {}, row, threshold, alpha, timings_note)
        for f in found:
            if f.verdict == "missing":
                f.change = vanished(row, f.metric)
        report.findings.extend(found)
    # A baseline holds several suites; only configs of the suites this run swept can be missing.
    suites = {row.get("suite") for row in rows}
    if None in suites:  # a row that names no suite: which configs it lacks is unknown, so every one counts
        suites |= {base.get("suite") for base in base_configs.values()}
    for key, base in base_configs.items():
        if key not in seen and base.get("suite") in suites:
            report.configs.setdefault(key, {})  # the roll-up's axes span the suite, not only what this run measured
        if key not in seen and base.get("suite") in suites and (selected is None or selected(base.get("test_id") or "")):
            report.names.setdefault(key, base.get("test_id") or key)
            report.findings.append(Finding(key, "*", None, None, "not in this run", "missing"))
    return report


def _status(key: str, base: dict[str, Any], row: dict[str, Any]) -> list[Finding]:
    b, n = base.get("status"), row.get("status")
    if b is None or b == n:
        return []
    return [Finding(key, "status", None, None, f"{b} -> {n}", status_verdict(str(b), str(n)))]


def _counters(key: str, base: dict[str, float], now: dict[str, float]) -> list[Finding]:
    out = []
    for name in sorted(set(base) | set(now)):
        b, n = base.get(name), now.get(name)
        if name.startswith("violations."):
            b, n = b or 0, n or 0  # an id absent from a row was counted 0 times
        if b is None:
            out.append(Finding(key, name, None, n, "not in the baseline", "new"))
        elif n is None:
            out.append(Finding(key, name, b, None, "not measured now", "missing"))
        elif b == n:
            out.append(Finding(key, name, b, n, "=", "ok"))
        else:
            change = _counter_change(b, n)
            if name.startswith("violations.") and not b:
                change = f"new violation ({change})"
            out.append(Finding(key, name, b, n, change, counter_verdict(name, b, n)))
    return out


def _timings(key: str, base: dict[str, dict[str, Any]], row: dict[str, Any], threshold: float,
             alpha: float, note: str | None = None) -> list[Finding]:
    out = []
    metrics = row.get("metrics") or {}
    samples = row.get("samples") or {}
    for name, b in sorted(base.items()):
        n = metrics.get(name)
        if lookup(name).gate != "noise":
            continue
        if not is_number(n):
            out.append(Finding(key, name, float(b.get("median", 0.0)), None, "", "missing"))
            continue
        higher_is_better = lookup(name).higher_is_better
        bm = float(b.get("median", 0.0))
        if note is not None:
            out.append(Finding(key, name, bm, float(n), note, "not comparable"))
            continue
        if bm == 0:
            out.append(Finding(key, name, bm, n, "baseline is 0", "ok"))
            continue
        rel = (n - bm) / abs(bm)
        worse = -rel if higher_is_better else rel
        b_samples = [float(x) for x in b.get("samples") or [bm]]
        n_samples = [float(x) for x in samples.get(name, [n])]
        change = f"{100 * rel:+.1f}%"
        verdict = "ok"
        if abs(worse) >= threshold:
            p = _mwu(n_samples, b_samples, worse_means_larger=(worse > 0) != higher_is_better)
            change += f" (p={p:.3f}, n={len(n_samples)}/{len(b_samples)})" if p is not None else " (too few samples)"
            if p is not None and p < alpha:
                verdict = "regression" if worse > 0 else "improvement"
        out.append(Finding(key, name, bm, float(n), change, verdict))
    return out


def _mwu(now: list[float], base: list[float], *, worse_means_larger: bool) -> float | None:
    """One-sided p-value that ``now`` is shifted past ``base`` in the observed direction."""
    if len(now) < 2 or len(base) < 2:
        return None
    from scipy.stats import mannwhitneyu  # scipy: optional, loaded only on this path

    alt = "greater" if worse_means_larger else "less"
    return float(mannwhitneyu(now, base, alternative=alt).pvalue)


def reference_of_run(rows: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """A run as the reference of a comparison: a baseline of every row, failed ones
    included (a failed config that now runs is news, not a gap)."""
    return {"profile": (meta.get("hardware") or {}).get("profile"), "git_commit": meta.get("git_commit"),
            "created": meta.get("created"), "accounting": sorted(accounting_profiles(rows)),
            "configs": {row["key"]: entry(row) for row in rows}}


def accounting_profiles(rows: list[dict[str, Any]]) -> set[str]:
    """The accounting profiles (sglang-0.5.23, host-aligned, ...) a run's configs used."""
    return {str((row.get("config") or {}).get("profile")) for row in rows
            if (row.get("config") or {}).get("profile") is not None}


def without_profile(key: str) -> str:
    """A config key with its accounting profile dropped, to pair configs across profiles."""
    return ",".join(p for p in key.split(",") if not p.startswith("profile="))


def across(rows: list[dict[str, Any]], reference: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows and reference re-keyed without the accounting profile, so that the same
    workload under two profiles pairs up."""
    rows = [{**row, "key": without_profile(row["key"])} for row in rows]
    configs = {without_profile(k): v for k, v in (reference.get("configs") or {}).items()}
    return rows, {**reference, "configs": configs}
