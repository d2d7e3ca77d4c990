"""The labelled phases of a sweep outside its grid: what it is doing when no config runs.

Before the grid the CPU kernels of a real-model config are built (once per machine:
about a minute on two cores, which used to happen silently inside the last config,
the progress standing at `[56/57] eta 0:02` for minutes); after it come the plots,
the MLflow uploads still queued and the parent's close, and the comparison and report.
On a terminal each phase is a spinner with its label and elapsed time; in a log (CI)
one line as it begins.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Any, Iterator

from harness.grid.suites import Suite

KERNELS_EXPECTED = "once per machine, about a minute on 2 cores"


@contextmanager
def phase(console, label: str) -> Iterator[None]:
    """Show ``label`` while the block runs."""
    if not console.is_terminal:
        console.print(f"{label} ...", markup=False)
        yield
        return
    with console.status(f"{label} ...", spinner="dots"):
        yield


def needs_cpu_kernels(suite: Suite, hardware_profile: str) -> bool:
    """Whether a config of the suite runs the model on this machine's CPU, where the
    compiled kernels serve it (KVBENCH_CPU_KERNELS=0 turns them off)."""
    if hardware_profile != "cpu" or os.environ.get("KVBENCH_CPU_KERNELS", "1") == "0":
        return False
    return any(_model(gc.config) not in (None, "none") for gc in suite.configs)


def _model(config: dict[str, Any]) -> Any:
    return config.get("model", "none")


def build_cpu_kernels(console) -> str:
    """Build (or load the cached build of) the engine's CPU kernels now, before any worker
    needs them; the line that says how it went."""
    started = time.monotonic()
    with phase(console, f"CPU kernels for the real-model configs: building if not cached ({KERNELS_EXPECTED})"):
        from mini_engine.model.cpu_kernels import ops  # torch: optional, loaded only on this path

        ready = ops() is not None
    took = time.monotonic() - started
    if not ready:
        return "CPU kernels: not built (see the warning above); the real-model configs run the slower torch path"
    return f"CPU kernels: built in {took:.0f} s" if took >= 2 else "CPU kernels: ready (cached)"
