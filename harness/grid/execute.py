"""One grid config: run it and judge it (in a pytest worker), record it (in the controller).

`measure` is the worker's half: it touches no file, its row travels to the
controller on the test report. `record` is the controller's half, the single
writer: the row goes to results.jsonl before MLflow is tried, so a kill after the
append loses nothing (sync uploads it later), and a kill before it leaves the
config undone (resume reruns it).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from typing import Any

from harness.core.causes import one_line
from harness.core.errors import HarnessError
from harness.core.run_spec import RunSpec
from harness.grid.suites import GridConfig, Suite
from harness.judge.expect import expectation, judge, leak_verdict
from harness.judge.repeats import merge_repeats
from harness.run.hardware import MemoryProbe
from harness.run.runner import run_config
from harness.store.results import RunDir, append_row
from harness.view.mlflow_log import Logger
from harness.view.mlflow_queue import UploadQueue


class ResultWriteError(HarnessError):
    """A finished config's row could not be written: an error of the sweep (disk full,
    read-only), not of the config. The grid stops; --resume runs the config again."""


@dataclass
class GridSession:
    suite: Suite
    run_dir: RunDir
    logger: Logger | None = None
    worker: str = "main"
    # The controller's uploads go through one background thread (mlflow_queue.py); without
    # it (tests, one-process callers) a row is uploaded in line.
    background: bool = False
    uploads: UploadQueue | None = None

    def measure(self, gc: GridConfig) -> dict[str, Any]:
        """Run and judge one config: its row, written nowhere yet."""
        started = time.time()
        # A warmup run first: the first run of a config pays first touches (pool
        # arrays, caches) that are no property of the config; its counters still
        # join the determinism check, its timings are dropped.
        try:
            spec = gc.spec  # parsed once (at the suite's load, or here) for the warmup, every repeat, the rules
        except Exception as err:  # a config that does not parse is a failed row, as a crash is
            spec, warmup = None, failed_row(gc.config, err, None)
        else:
            warmup = run_once(gc.config, spec)
        runs = [warmup] if warmup.get("status") == "failed" else [run_once(gc.config, spec)
                                                                   for _ in range(self.suite.repeat)]
        row = merge_repeats(runs, warmup)
        # Rules match on effective values: a config that leaves a knob out is judged by its profile's value.
        exp = expectation(spec.resolved() if spec is not None else dict(gc.config), self.suite.rules)
        verdict, reasons = judge(row, exp)
        if row.get("nondeterministic") and verdict != "failed":
            verdict = "unexpected"
            reasons.append("counters differ between repeats: " + ", ".join(row["nondeterministic"]))
        row.update(test_id=gc.id, suite=self.suite.name, run_id=self.run_dir.run_id, worker=self.worker,
                   expected=exp.to_dict(), verdict=verdict, reasons=reasons, started_at=started,
                   finished_at=time.time())
        return row

    def record(self, row: dict[str, Any]) -> None:
        """Write a finished config's row, then log it to MLflow (the controller's half)."""
        try:
            append_row(self.run_dir.results, row)  # whole line or nothing (append_line)
        except OSError as err:
            raise ResultWriteError(f"{self.run_dir.results}: {err.strerror or err}") from None
        if self.logger is None:
            return
        if not self.background:
            self.upload(row)
            return
        if self.uploads is None:
            self.uploads = UploadQueue(self.upload)
        self.uploads.submit(row)  # on disk already: a row the thread never uploads stays pending for sync

    def upload(self, row: dict[str, Any]) -> bool:
        """Log a written row to MLflow and note it logged; False leaves it pending for sync."""
        if not self.logger.log(row, row.get("test_id") or row["key"]):
            return False
        try:
            self.run_dir.mark_logged(row["key"])
        except OSError:
            pass  # sync finds the child run by its tags and does not log it twice
        return True

    def finish_uploads(self, drain: bool = True) -> None:
        """Wait for the background uploads (all of them, or after a Ctrl-C the one in flight)."""
        if self.uploads is not None:
            self.uploads.close(drain)

    def run(self, gc: GridConfig) -> dict[str, Any]:
        """Both halves in one process (tests, benchmarks, bisect-like callers)."""
        row = self.measure(gc)
        self.record(row)
        return row


def run_config_on(spec: RunSpec) -> dict[str, Any]:
    """The config's row on its engine: the mini engine, or SGLang's own loop (engine=sglang)."""
    if spec.runs_on == "sglang":
        from harness.reference.run import run_reference  # numpy and SGLang: only the reference loads them

        return run_reference(spec)  # SGLang's import: once a process (loader.load is cached)
    return run_config(spec)


def run_once(config: dict[str, Any], spec: RunSpec | None = None) -> dict[str, Any]:
    """One run of ``config`` (``spec``: it parsed already; None: parsed here); anything it
    raises is a failed row, so a sweep records it and goes on."""
    try:
        spec = spec if spec is not None else RunSpec.parse(config)
        with MemoryProbe() as probe:
            row = run_config_on(spec)
        mem = probe.figures()
    except Exception as err:  # the runner records crashes itself; this is the backstop
        return failed_row(config, err, spec)
    metrics = row.setdefault("metrics", {})
    for name, value in mem.items():
        metrics.setdefault(name, value)
    return leak_verdict(row)


def failed_row(config: dict[str, Any], err: Exception, spec: RunSpec | None) -> dict[str, Any]:
    """The row of a run that raised (called inside its ``except``); keyed by the options
    when they parsed (``spec``), else by the config as given."""
    return {"key": spec.key if spec is not None else repr(sorted(config.items())), "config": dict(config),
            "metrics": {}, "series": {}, "violations": {}, "violation_samples": [], "status": "failed",
            "error": one_line(err), "traceback": traceback.format_exc(limit=8)}
