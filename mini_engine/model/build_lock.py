"""Who is building the CPU kernels: a lock the kernel's own process holds, so a lock
left by a dead one is known as such at once.

torch's builder (cpp_extension) marks a build with a `lock` file in the build
directory and every other process sleeps on that file, with no timeout and nothing
on screen. A builder killed mid-build leaves the file behind, and every later model
run slept on it (for ever, or until a ten-minute age rule removed it). A file says
nothing about whether its writer lives; an flock does (the kernel drops it with the
process). So each kvbench builder holds an flock on ``kvbench-builder.lock`` beside
torch's file for the whole build: while it holds it, no other kvbench process is
building, and a torch `lock` file there was left by a dead one.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)

# A build takes about a minute (several on a loaded two-core machine); past this, a
# live builder is not waited for: the run goes on without the kernels, saying so.
WAIT_S = 600.0
POLL_S = 0.5


class BuildBusy(Exception):
    """Another process was still building the kernels after WAIT_S."""


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


@contextmanager
def building(build_dir: Path, wait_s: float | None = None) -> Iterator[None]:
    """Hold the builder's lock of ``build_dir`` for the block: wait for a live builder
    (one labelled line, at most ``wait_s``, else BuildBusy), then remove a torch lock
    file no live builder holds (one line naming it)."""
    wait_s = WAIT_S if wait_s is None else wait_s
    build_dir.mkdir(parents=True, exist_ok=True)
    ours = build_dir / "kvbench-builder.lock"
    fd = os.open(ours, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not _try_lock(fd):
            log.warning("waiting for another process building the CPU kernels (it holds %s; at most %.0f s)",
                        ours, wait_s)
            deadline = time.monotonic() + wait_s
            while not _try_lock(fd):
                if time.monotonic() >= deadline:
                    raise BuildBusy(f"another process was still building the CPU kernels after {wait_s:.0f} s "
                                    f"(it holds {ours})")
                time.sleep(POLL_S)
        torch_lock = build_dir / "lock"
        if torch_lock.exists():
            log.warning("removing a kernel build lock no live builder holds (a build was killed): %s", torch_lock)
            torch_lock.unlink(missing_ok=True)
        yield
    finally:
        os.close(fd)  # drops the flock
