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
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def watch(seen: list[int]) -> Iterator[list[int]]:
    """Append to ``seen`` each SIGINT received inside the block, then act as before it
    (Python's default raises KeyboardInterrupt). Signals reach the main thread only:
    elsewhere nothing is watched, and nothing can arrive there."""
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return
    prev = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        seen.append(signum)
        if callable(prev):
            prev(signum, frame)
        elif prev != signal.SIG_IGN:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, prev)
