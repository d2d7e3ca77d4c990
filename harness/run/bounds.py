"""Numeric bounds a config or a sweep must fit before any work starts.

Each option is validated on its own by the engine; these are the limits of their
combination on this machine: the host memory a config's arrays need (a huge
``input_len`` with a raised ``max_context`` was OOM-killed mid-sweep instead of
refused) and how many workers a sweep may fork.
"""

from __future__ import annotations

import os
from typing import Any

from harness.core.errors import HarnessError
from harness.core.run_spec import RunSpec

HEADROOM = 0.8  # of the memory available now: the rest is the interpreter, torch, the OS
PY_INT_BYTES = 36  # a prompt token as a Python int in a list (object + pointer)


class BoundsError(HarnessError):
    """A number outside what this machine can run."""


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation now (MemAvailable), None if unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def host_bytes(engine: Any, workload: dict[str, Any]) -> dict[str, int]:
    """What a config allocates on the host before its first step, by part (an upper bound)."""
    width = engine.max_context + engine.page_size + 64  # row_width plus the largest draft reserve
    parts = {"req_to_token (max_running x max_context)": engine.max_running * width * 8 * 2}  # host + a CPU mirror
    if workload.get("prompts") is None:
        tail = 8 if workload.get("workload") == "lognormal" else 1
        turns = workload.get("turns", 1)  # a session's turns each hold the whole conversation so far
        own = turns * workload["input_len"] + (turns - 1) * workload["output_len"]  # the last turn's prompt
        longest = workload.get("shared_prefix", 0) + own * tail
        parts["prompts (num_requests x turns x input_len)"] = workload["num_requests"] * turns * longest * PY_INT_BYTES
    pages = (engine.pool_tokens or 0) // max(engine.page_size, 1)
    parts["page pool (pool_tokens / page_size)"] = pages * 8 * 6  # free list, ledger, SWA map and its mirror
    return parts


def check_memory(engine: Any, workload: dict[str, Any], *, available: int | None = None) -> None:
    """Refuse a config whose host arrays cannot fit in the memory available now."""
    have = available if available is not None else available_memory()
    if have is None:
        return
    parts = host_bytes(engine, workload)
    need = sum(parts.values())
    if need <= HEADROOM * have:
        return
    biggest = max(parts, key=parts.__getitem__)
    raise BoundsError(f"this config does not fit in host memory: it needs about {_gib(need)}, most of it {biggest}, "
                      f"and {_gib(have)} is available (allowed: up to {_gib(HEADROOM * have)}); "
                      f"lower max_context, max_running, input_len or num_requests")


def check_spec(spec: RunSpec) -> None:
    """check_memory for a parsed config (kvbench run, a suite's configs), before anything is allocated."""

    check_memory(spec.engine, spec.workload.to_dict())


def max_jobs(gpus: int) -> int:
    """Most workers a sweep may start: one per core (or per GPU where there are more)."""
    return max(os.cpu_count() or 1, gpus, 1)


def check_jobs(jobs: int | None, gpus: int) -> None:
    if jobs is None:
        return
    top = max_jobs(gpus)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= top:
        what = f"{os.cpu_count() or 1} cores" + (f", {gpus} GPUs" if gpus else "")
        raise BoundsError(f"-j must be an integer from 1 to {top} on this machine ({what}) (got {jobs})")


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**28 else f"{n / 2**20:.0f} MiB"
