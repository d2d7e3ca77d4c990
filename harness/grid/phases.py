"""The labelled phases of a sweep outside its grid: what it is doing when no config runs.

The CPU kernels of a real-model config are built once per machine (about a minute on
two cores; it used to happen silently inside the last config, the progress standing at
`[56/57] eta 0:02` for minutes): beside the grid while its accounting-only configs run
(a sweep runs one worker on a CPU machine, so the second core would idle), labelled on
the progress line and with a line when done, or before the grid when every config
needs them. After the grid come the plots, the MLflow uploads still queued and the
parent's close, and the comparison and report. On a terminal each phase is a spinner
with its label and elapsed time; in a log (CI) one line as it begins.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from harness.grid.suites import GridConfig

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


def needs_cpu_kernels(configs: Sequence[GridConfig], hardware_profile: str) -> bool:
    """Whether a config this sweep runs (after --filter and its shard) runs the model on
    this machine's CPU, where the compiled kernels serve it (KVBENCH_CPU_KERNELS=0 turns
    them off). A filter that leaves only accounting configs builds nothing."""
    if hardware_profile != "cpu" or os.environ.get("KVBENCH_CPU_KERNELS", "1") == "0":
        return False
    return any(_model(gc.config) not in (None, "none") for gc in configs)


def has_accounting_configs(configs: Sequence[GridConfig]) -> bool:
    """Whether some config this sweep runs goes without a model: work for the grid while
    the kernels build beside it."""
    return any(_model(gc.config) in (None, "none") for gc in configs)


def _model(config: dict[str, Any]) -> Any:
    return config.get("model", "none")


def build_cpu_kernels(console) -> str:
    """Build (or load the cached build of) the engine's CPU kernels now, before any worker
    needs them; the line that says how it went."""
    with phase(console, f"CPU kernels for the real-model configs: building if not cached ({KERNELS_EXPECTED})"):
        return _build_line()


def build_cpu_kernels_beside(console, show: Callable[[str], None]) -> threading.Thread:
    """Start building (or loading) the CPU kernels in a child process, the grid running
    meanwhile: a real-model config waits for it on the builder's lock (build_lock.py).
    ``show`` puts a label beside the progress ('' clears it); the line that says how it
    went, and the builder's warnings, are printed when it ends, by the returned thread;
    join it before the sweep's end."""
    console.print(f"CPU kernels for the real-model configs: building beside the accounting-only configs if not "
                  f"cached ({KERNELS_EXPECTED})", markup=False)
    show("CPU kernels building")
    # A process, not a thread: a Ctrl-C reaches it as it reaches the sweep (a thread's
    # compiler would fail and be retried without OpenMP), and the grid's configs wait for it
    # as for any other builder. It imports this checkout's engine, whatever the sweep's path.
    root = str(Path(importlib.util.find_spec("mini_engine").origin).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, text=True, env=env)

    def wait() -> None:
        said: list[str] = []
        for line in child.stdout:  # the result as soon as the kernels load, not at the child's exit
            if line.startswith(_READY):
                show("")
                console.print(_result(float(line[len(_READY):])), markup=False)
            else:
                said.append(line.rstrip())
        if child.wait() < 0:  # interrupted with the sweep: nothing to say
            show("")
        elif child.returncode != 0:  # the builder's warning (or a crash's last lines): why it did not build
            show("")
            for line in [s for s in said if s][-3:]:
                console.print(f"CPU kernels: {line}", markup=False)
            console.print(_result(None), markup=False)

    thread = threading.Thread(target=wait, name="kvbench-cpu-kernels", daemon=True)
    thread.start()
    return thread


# The child: the seconds the build (or the cached load) took, after torch's import, on a
# line of its own; exit 3 where the kernels cannot be built (its warning says why).
_READY = "kvbench-cpu-kernels-ready "
_CHILD = f"""import sys, time
import torch
from mini_engine.model.cpu_kernels import ops
started = time.monotonic()
if ops() is None:
    sys.exit(3)
print("{_READY}%.1f" % (time.monotonic() - started), flush=True)
"""


def _build_line() -> str:
    import torch  # noqa: F401  torch: loaded only on this path (its import is no part of the build)
    from mini_engine.model.cpu_kernels import ops  # torch: the kernels' module imports it

    started = time.monotonic()
    ready = ops() is not None
    return _result(time.monotonic() - started if ready else None)


def _result(took: float | None) -> str:
    """The line that says how the build went: ``took`` its seconds, None where it failed."""
    if took is None:
        return "CPU kernels: not built (see the warning above); the real-model configs run the slower torch path"
    return f"CPU kernels: built in {took:.0f} s" if took >= 2 else "CPU kernels: ready (cached)"
