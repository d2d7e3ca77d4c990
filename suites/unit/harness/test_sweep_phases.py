"""The phases of a sweep outside its grid are labelled: the CPU kernels are built before
any config runs (they compiled inside the last config, `[56/57] eta 0:02` for minutes)."""

from __future__ import annotations

import io

from rich.console import Console

from harness.grid import phases
from harness.grid.suites import load_suite


def test_the_smoke_suite_needs_the_kernels_on_a_cpu_only(monkeypatch):
    smoke = load_suite("smoke", validate=False)
    monkeypatch.delenv("KVBENCH_CPU_KERNELS", raising=False)
    assert phases.needs_cpu_kernels(smoke, "cpu")  # its real-model config
    assert not phases.needs_cpu_kernels(smoke, "h100")  # the GPU runs the model there
    monkeypatch.setenv("KVBENCH_CPU_KERNELS", "0")
    assert not phases.needs_cpu_kernels(smoke, "cpu")
    monkeypatch.delenv("KVBENCH_CPU_KERNELS")
    accounting = load_suite("smoke", validate=False)
    accounting.configs = [gc for gc in accounting.configs if gc.config.get("model", "none") == "none"]
    assert not phases.needs_cpu_kernels(accounting, "cpu")


def test_the_kernel_phase_is_labelled_before_it_runs_and_says_how_it_went(monkeypatch):
    from mini_engine.model import cpu_kernels

    out = io.StringIO()
    console = Console(file=out, width=200)  # a log, not a terminal: one line as the phase begins
    calls = []
    monkeypatch.setattr(cpu_kernels, "ops", lambda: calls.append(out.getvalue()) or object())
    assert phases.build_cpu_kernels(console) == "CPU kernels: ready (cached)"
    assert calls and "CPU kernels for the real-model configs: building if not cached" in calls[0]
    monkeypatch.setattr(cpu_kernels, "ops", lambda: None)
    assert "not built" in phases.build_cpu_kernels(console)
