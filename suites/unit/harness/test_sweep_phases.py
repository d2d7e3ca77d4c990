"""The phases of a sweep outside its grid are labelled: the CPU kernels are built before
any config runs (they compiled inside the last config, `[56/57] eta 0:02` for minutes)."""

from __future__ import annotations

import io

from rich.console import Console

from harness.grid import phases
from harness.grid.suites import load_suite


def test_the_smoke_suite_needs_the_kernels_on_a_cpu_only(monkeypatch):
    smoke = load_suite("smoke", validate=False).configs
    monkeypatch.delenv("KVBENCH_CPU_KERNELS", raising=False)
    assert phases.needs_cpu_kernels(smoke, "cpu")  # its real-model config
    assert not phases.needs_cpu_kernels(smoke, "h100")  # the GPU runs the model there
    monkeypatch.setenv("KVBENCH_CPU_KERNELS", "0")
    assert not phases.needs_cpu_kernels(smoke, "cpu")
    monkeypatch.delenv("KVBENCH_CPU_KERNELS")
    accounting = [gc for gc in smoke if gc.config.get("model", "none") == "none"]
    assert not phases.needs_cpu_kernels(accounting, "cpu")


def test_a_sweep_builds_the_kernels_only_when_a_config_it_runs_needs_them(monkeypatch):
    """--filter and a shard choose what runs: a night of accounting configs only, or the
    shard without the real-model config, starts no build (it waited for one at its end)."""
    from harness.grid.sweep import _to_run

    monkeypatch.delenv("KVBENCH_CPU_KERNELS", raising=False)
    smoke = load_suite("smoke", validate=False)
    real = [gc.id for gc in smoke.configs if gc.config.get("model", "none") != "none"]
    assert real and phases.needs_cpu_kernels(_to_run(smoke, None, None), "cpu")
    assert not phases.needs_cpu_kernels(_to_run(smoke, "spec=eagle", None), "cpu")
    others = [gc.id for gc in smoke.configs if gc.id not in real]
    assert not phases.needs_cpu_kernels(_to_run(smoke, None, others), "cpu")
    assert _to_run(smoke, None, real[:1])[0].id == real[0]


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


def _beside(monkeypatch, child: str) -> tuple[str, list[str]]:
    """Run build_cpu_kernels_beside with ``child`` as the builder process; its console
    output and the labels it put beside the progress."""
    out = io.StringIO()
    shown: list[str] = []
    monkeypatch.setattr(phases, "_CHILD", child)
    phases.build_cpu_kernels_beside(Console(file=out, width=200), shown.append).join(timeout=60)
    return out.getvalue(), shown


def test_the_kernels_built_beside_the_grid_are_labelled_and_say_how_it_went(monkeypatch):
    text, shown = _beside(monkeypatch, f"print('{phases._READY}41.0')")
    assert "building beside the accounting-only configs" in text.splitlines()[0]
    assert text.splitlines()[-1] == "CPU kernels: built in 41 s"
    assert shown == ["CPU kernels building", ""]  # the progress label is cleared when it ends
    text, _ = _beside(monkeypatch, f"print('{phases._READY}0.3')")
    assert text.splitlines()[-1] == "CPU kernels: ready (cached)"


def test_a_failed_build_beside_the_grid_says_why_and_an_interrupted_one_says_nothing(monkeypatch):
    text, _ = _beside(monkeypatch, "import sys; sys.stderr.write('no compiler here\\n'); sys.exit(3)")
    assert text.splitlines()[-2:] == ["CPU kernels: no compiler here", phases._result(None)]
    text, shown = _beside(monkeypatch, "import os, signal; os.kill(os.getpid(), signal.SIGINT)")
    assert len(text.splitlines()) == 1 and shown[-1] == ""  # only the line that it began


def test_the_builder_process_imports_this_checkout(monkeypatch, tmp_path):
    import mini_engine

    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # a path without the engine
    child = "import mini_engine, sys; sys.stderr.write(mini_engine.__file__); sys.exit(3)"
    text, _ = _beside(monkeypatch, child)
    assert f"CPU kernels: {mini_engine.__file__}" in text


def test_the_progress_shows_a_phase_running_beside_the_grid():
    from harness.grid.progress import Display

    display = Display(Console(file=io.StringIO(), width=200))
    display.collected(["a", "b"])
    display.started("a")
    display.aside("CPU kernels building")
    assert display.progress.tasks[0].description == "a (CPU kernels building)"
    display.aside("")
    assert display.progress.tasks[0].description == "a"
