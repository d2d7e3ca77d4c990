"""Did the user interrupt the sweep, or did pytest stop the grid for a reason of its own?

pytest returns the same exit status, INTERRUPTED, for a Ctrl-C and for a run it
stopped itself: errors during collection, xdist's "maximum crashed workers reached",
a worker's own KeyboardInterrupt, ``-x``/``--maxfail`` from a user's PYTEST_ADDOPTS.
The sweep used to answer every one of them by raising KeyboardInterrupt, so a grid
pytest stopped looked like a Ctrl-C to whoever ran the sweep: `kvbench` said
"interrupted" (exit 130), and a caller running the sweep in its own process (a test,
under hypothesis) got a KeyboardInterrupt nobody had typed. Only a SIGINT this
process received is an interrupt; anything else is pytest stopping early, reported
with pytest's reason.

A SIGINT stops the sweep as a SIGTERM does: the configs in flight get no row (a
--resume runs them), the run's lock goes with the process. Its workers die on it
(``die_on_sigint``) instead of raising KeyboardInterrupt inside a config, which xdist
reported as a crashed worker and the controller recorded as a failed config that
--resume never reran.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def watch(seen: list[int], on_interrupt: Callable[[], None] = lambda: None) -> Iterator[list[int]]:
    """Append to ``seen`` each SIGINT received inside the block, call ``on_interrupt``,
    then stop the block with KeyboardInterrupt. Also where SIGINT was ignored when the process started (a script's background
    job): the sweep went on ignoring it while its workers stopped, so the run ended
    long after, with the config in flight recorded failed. Signals reach the main
    thread only: elsewhere nothing is watched, and nothing can arrive there."""
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return
    prev = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        seen.append(signum)
        on_interrupt()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, prev)


def die_on_sigint() -> None:
    """A grid worker ends on SIGINT at once, as on SIGTERM: its config in flight gets no
    row and stays for --resume (the controller alone says 'interrupted')."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
