"""A sweep's MLflow uploads off the controller's loop: one thread logs the rows in order.

The controller writes a finished config's row to results.jsonl, then hands it here
and goes back to pytest's reports at once: an upload (a nested run, its params and
metrics, its artifacts) costs the controller a tenth of a second or more a config,
and done in line it held up the progress and, on a loaded machine, the grid. The
row is on disk before it is queued, so nothing is lost whatever happens to the
thread: `close` waits for the queue to drain (the end of a sweep), a Ctrl-C or a
kill leaves the rows not yet uploaded pending, and the end of the sweep, a resume
or `kvbench sync` uploads them (harness/grid/lifecycle.py).
"""

from __future__ import annotations

import queue
import threading
from typing import Any

_STOP = object()


class UploadQueue:
    """Rows to one sweep's MLflow parent, uploaded by one thread in the order given.

    ``upload(row)`` does one row's upload and its bookkeeping (the Logger's
    ``submit``); it never raises (a failure leaves the row pending for sync)."""

    def __init__(self, upload):
        self._upload = upload
        self._rows: queue.Queue = queue.Queue()
        self._drop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kvbench-mlflow-upload", daemon=True)
        self._thread.start()

    def submit(self, row: dict[str, Any]) -> None:
        self._rows.put(row)

    def _run(self) -> None:
        while True:
            row = self._rows.get()
            if row is _STOP or self._drop.is_set():
                return
            try:
                self._upload(row)  # it marks the row logged itself; False leaves it for sync
            except Exception:  # the upload's own failures are caught there; this keeps the thread alive
                pass

    def close(self, drain: bool = True) -> None:
        """Wait until every queued row is uploaded (or, ``drain=False`` after a Ctrl-C,
        until the row in flight is: the rest stay pending for sync). Idempotent."""
        if not drain:
            self._drop.set()
        self._rows.put(_STOP)
        self._thread.join()
