"""The intra-op thread count of a CPU forward, chosen per phase and batch size from measurement.

A small model's matmuls take microseconds, and one thread often beats several (each
handoff costs microseconds); at batch 64 the compiled decode layers give each thread
its own rows through every layer and a second core pays (1.7x). Which one wins depends on the machine
and its load, so it is measured rather than fixed: the first forwards of each (phase,
batch size bucket) alternate between the most threads the process started with and
one, TRIALS of each, and more threads are kept for the rest of the run only when
their median beats one thread's by MARGIN (or after EARLY samples, when every one at more
threads but the first beats every one-thread sample by MARGIN). On a loaded machine a parallel region
waits for a descheduled thread (milliseconds), so several threads lose there, and a
noisy win must not hand every later step that risk. Nor are trials run while fewer
cores are idle than threads would run (sampled once, when the backend is built): there
a trial at several threads alone cost more than a whole run's gain (measured: a
64-request plain run 1.8x slower).

Results do not depend on the choice: the compiled kernels give each row to one
thread and cut only between chunks of 16 rows or more, and MKL's products at these
shapes are bitwise equal at one and two threads and for any such chunk (suites/unit
tests). KVBENCH_THREADS=n fixes the count instead (n = 1: the old fixed
choice).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Callable, TypeVar

import torch

from mini_engine.errors import ConfigError

# Read before any backend lowers it: the most threads this process may use.
STARTUP_THREADS = torch.get_num_threads()
TRIALS = 5
EARLY = 3  # samples at more threads (and one fewer at one) before an early choice
MARGIN = 0.85  # more threads must take at most this fraction of one thread's time
_clock = time.perf_counter  # the trials' clock (tests script it)
R = TypeVar("R")


class ThreadChoice:
    def __init__(self, most: int | None = None):
        fixed = os.environ.get("KVBENCH_THREADS")
        if fixed and not (fixed.isdigit() and int(fixed) >= 1):
            raise ConfigError(f"KVBENCH_THREADS must be a positive integer (got {fixed!r})")
        self.fixed = int(fixed) if fixed else None
        self.most = max(1, STARTUP_THREADS if most is None else most)
        if most is None and _busy(self.most):
            self.most = 1
        self.samples: dict[object, dict[int, list[float]]] = {}
        self.chosen: dict[object, int] = {}
        _use(self.fixed or 1)

    def run(self, key: object, fn: Callable[[], R]) -> R:
        """fn() at the thread count chosen for key (measuring while it is not chosen yet)."""
        if self.fixed or self.most == 1:
            _use(self.fixed or 1)
            return fn()
        n = self.chosen.get(key)
        if n is not None:
            _use(n)
            return fn()
        # Alternate, so both see the same moments, starting with more threads: a phase that
        # runs once per run (a whole batch's prefill) then gets the cores the machine has
        # idle (_busy), and there the split pays most (a 2048-row product: 2.1x at two).
        s = self.samples.setdefault(key, {self.most: [], 1: []})
        n = min(s, key=lambda t: len(s[t]))
        _use(n)
        t0 = _clock()
        out = fn()
        s[n].append(_clock() - t0)
        more, one = s[self.most], s[1]
        if all(len(v) >= TRIALS for v in s.values()):
            faster = statistics.median(more) <= MARGIN * statistics.median(one)
            self.chosen[key] = self.most if faster else 1
        elif len(more) >= EARLY and len(one) >= EARLY - 1 and max(more[1:]) <= MARGIN * min(one):
            # Decisive early: every sample at more threads but the first (it wakes the
            # workers) beats every one-thread sample by the margin. A one-thread trial at
            # batch 64 costs half a step more; this spares three of them.
            self.chosen[key] = self.most
        return out


def bucket(rows: int) -> int:
    """Batch sizes within a factor of two share a choice."""
    return max(1, rows).bit_length()


def _use(n: int) -> None:
    if torch.get_num_threads() != n:  # set_num_threads reconfigures OpenMP and MKL: only on a change
        torch.set_num_threads(n)


def _busy(threads: int) -> bool:
    """Whether fewer than `threads` cores are idle now: /proc/stat's idle time over
    IDLE_SAMPLE_S, while this process sleeps (its own core counts as idle). The last
    minute's load average (where /proc/stat is not there) lags by a minute: right after
    another job it kept a quiet machine at one thread."""
    idle = _idle_cores(IDLE_SAMPLE_S)
    if idle is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # not on every platform
            return False
        # This process's own work is one of the runnable threads the average counts.
        return max(load - 1, 0) + threads > (os.cpu_count() or 1) + 0.5
    return idle < threads - 0.5


# Long enough for /proc/stat's 10 ms ticks to resolve half a core on a two-core machine.
IDLE_SAMPLE_S = 0.05


def _idle_cores(window: float) -> float | None:
    """Cores idle on average over `window` seconds, among the CPUs this process may run on
    (its affinity: a container pinned to 2 of 64 CPUs reads those 2), from /proc/stat's
    per-CPU idle + iowait ticks; None where it cannot be read."""
    try:
        allowed = {f"cpu{c}" for c in os.sched_getaffinity(0)}
    except (AttributeError, OSError):  # not on every platform
        allowed = None

    def sample() -> tuple[int, int]:
        total = idle = 0
        with open("/proc/stat") as f:
            for line in f:
                name, *fields = line.split()
                if not (name.startswith("cpu") and name != "cpu"):
                    continue
                if allowed is not None and name not in allowed:
                    continue
                ticks = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
                total += sum(ticks)
                idle += ticks[3] + ticks[4]
        return total, idle
    try:
        total0, idle0 = sample()
        time.sleep(window)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    cpus = len(allowed) if allowed else (os.cpu_count() or 1)
    return (idle1 - idle0) / (total1 - total0) * cpus
