"""SGLang regressions: a difference between SGLang's own loop and the mini engine's
profile becomes a tracking issue (``kvbench ci reference-triage``).

The nightly SGLang-regression job (ci/workflows/nightly-sglang.yml) installs the newest
SGLang release, or a given ref, and runs ``kvbench conform --engine --suite S --report
FILE``. Each config of a report that is not equal opens, or updates, the one issue of
that config and release: the config, the first step and the quantity that differ with
both values, and every total that differs. An issue whose config is equal again on that
release gets one note that it recovered. Unlike the nightly triage (triage.py) one night
files: the comparison is exact, there is no noise to wait out.

Keys, ids and figures come from the report, which the job wrote from a checkout a pull
request may shape: in an issue body they appear only as escaped code spans.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.ci.github_client import Client
from harness.ci.text import code, plain
from harness.ci.issues import note_once, open_or_update, short_key
from harness.core.errors import UsageError

LABEL = "kvbench-sglang-regression"
MARKER = "<!-- kvbench-reference-triage -->"
# harness.reference.report.FORMAT: the ci install (no engine) cannot import that module;
# test_ci_reference_triage holds the two equal.
FORMAT = "kvbench-reference-report"
MAX_KEY_IN_TITLE = 170
MAX_REPORT_BYTES = 16 << 20


@dataclass
class Filing:
    title: str
    body: str


@dataclass
class Plan:
    file: list[Filing] = field(default_factory=list)
    equal: list[str] = field(default_factory=list)  # the titles of the configs now equal


def load(path: Path) -> dict[str, Any]:
    """A report of conform --engine --suite, checked for the fields triage reads."""
    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            raise UsageError(f"--report {path}: larger than {MAX_REPORT_BYTES >> 20} MiB; not a conform report")
        doc = json.loads(path.read_text())
    except OSError as err:
        raise UsageError(f"--report {path}: cannot be read ({err.strerror or err})") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise UsageError(f"--report {path}: not JSON ({err})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise UsageError(f"--report {path}: not a report of kvbench conform --engine --suite --report")
    configs = doc.get("configs")
    if not isinstance(configs, list) or not all(
            isinstance(c, dict) and isinstance(c.get("key"), str) and isinstance(c.get("equal"), bool)
            for c in configs):
        raise UsageError(f"--report {path}: 'configs' must be a list of objects with a key and equal")
    if any(not isinstance(c.get("totals") or [], list) for c in configs):
        raise UsageError(f"--report {path}: a config's 'totals' must be a list")
    if not isinstance(doc.get("sglang_version"), str) or not isinstance(doc.get("suite"), str):
        raise UsageError(f"--report {path}: 'sglang_version' and 'suite' must be strings")
    return doc


def title_for(key: str, version: str) -> str:
    return plain(f"kvbench reference: {short_key(key, MAX_KEY_IN_TITLE)} differs on SGLang {version}", 250)


def _body(doc: dict[str, Any], c: dict[str, Any], run_url: str) -> str:
    suite, version = doc["suite"], doc["sglang_version"]
    lines = [MARKER, f"On SGLang {code(version, 60)}, SGLang's own scheduler loop (the reference engine, "
             f"docs/reference.md) and the mini engine's profile differ on config {code(c['key'], 400)} "
             f"of suite {code(suite, 60)} (id {code(c.get('id', ''), 300)}).", ""]
    if c.get("error"):
        lines.append(f"**SGLang's loop failed:** {code(c['error'], 400)}")
    first = c.get("first_step")
    if isinstance(first, dict):
        lines.append(f"**First differing step:** {code(first.get('step'))}, quantity {code(first.get('quantity'))}: "
                     f"mini {code(first.get('mini'))}, sglang {code(first.get('sglang'))}.")
    steps = c.get("steps")
    if isinstance(steps, dict) and steps.get("mini") != steps.get("sglang"):
        lines.append(f"**Steps:** mini {code(steps.get('mini'))}, sglang {code(steps.get('sglang'))}.")
    totals = [t for t in c.get("totals") or [] if isinstance(t, dict)]
    if totals:
        lines += ["", "| total | mini | sglang |", "|---|---|---|"]
        lines += [f"| {code(t.get('metric'), 80)} | {code(t.get('mini'), 40)} | {code(t.get('sglang'), 40)} |"
                  for t in totals]
    lines += ["", "Reproduce with that release installed:", "",
              code(f"kvbench conform --engine --suite {suite}", 200)]
    if run_url:
        lines += ["", f"The job: {run_url}"]
    lines += ["", "_Opened and updated by `kvbench ci reference-triage`; it notes here when the config is "
                  "equal again on a release._"]
    return "\n".join(lines) + "\n"


def plan(docs: list[dict[str, Any]], run_url: str = "") -> Plan:
    out = Plan()
    for doc in docs:
        for c in doc["configs"]:
            title = title_for(c["key"], doc["sglang_version"])
            if c["equal"]:
                out.equal.append(title)
            else:
                out.file.append(Filing(title, _body(doc, c, run_url)))
    return out


def apply(p: Plan, client: Client) -> list[str]:
    """Open or update the issues; returns one line per action for the log."""
    log = [open_or_update(client, f.title, f.body, LABEL) for f in p.file]
    for title in p.equal:
        line = note_once(client, title, LABEL, "\n**Equal again** on the latest run.\n",
                         mark="**Equal again**", tail=300, what="equal again")
        if line:
            log.append(line)
    return log
