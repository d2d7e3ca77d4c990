"""A sweep's progress as pytest's reports arrive: the live bar (or a line per config in
a log) and the ETA, weighed by each config's modelled cost."""

from __future__ import annotations

import time

from harness.judge.expect import PASSING


class Display:
    """The sweep's progress, told by the grid controller as pytest reports arrive: a live
    bar on a terminal, a line per finished config in a log (CI), where a live display
    would print nothing."""

    def __init__(self, console, weights: dict[str, float] | None = None):
        # rich: optional, loaded only on this path
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console, self.live = console, console.is_terminal
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("eta {task.fields[eta]}"), TextColumn("{task.fields[counts]}"))
        # pytest's output goes to pytest.log meanwhile: the bar must not take sys.stdout over.
        self.progress = Progress(*columns, console=console, transient=False, disable=not self.live,
                                 redirect_stdout=False, redirect_stderr=False)
        self.task = self.progress.add_task("collecting", total=None, counts="", eta="-")
        self.total: int | None = None
        self.done = 0
        self.running: list[str] = []
        self.counts = {"violated": 0, "unexpected": 0, "failed": 0}
        # The ETA weighs what is left by each config's modelled cost (harness/grid/cost.py: a
        # real-model config costs dozens of accounting ones) and runs its clock from the first
        # config's start: the workers' start-up (imports, collection) is no config's pace, and
        # counted in made the first ETA of a 3-minute sweep 1:17:01.
        self.weights = weights or {}
        self.ids: list[str] = []
        self.finished: set[str] = set()
        self.first_start: float | None = None
        self.beside = ""  # a phase running beside the grid (the CPU kernels' build)

    def aside(self, label: str) -> None:
        """Show ``label`` after the running configs ('' clears it); any thread may call it."""
        self.beside = label
        self._update()

    def start(self) -> None:
        self.progress.start()

    def collected(self, ids: list[str]) -> None:
        # Only this attempt's configs count: a resumed run's earlier rows are deselected.
        self.total = len(ids)
        self.ids = list(ids)
        self._update()

    def started(self, cid: str) -> None:
        if self.first_start is None:
            self.first_start = time.monotonic()
        self.running.append(cid)
        self._update()

    def stopped(self, cid: str) -> None:
        if cid in self.running:
            self.running.remove(cid)
            self._update()

    def row(self, row: dict) -> None:
        cid = row.get("test_id") or row.get("key")
        if cid in self.running:  # a crashed worker's config never stops
            self.running.remove(cid)
        self.done += 1
        self.finished.add(cid)
        if any(v for v in (row.get("violations") or {}).values() if isinstance(v, (int, float))):
            self.counts["violated"] += 1
        if row.get("verdict") == "failed":
            self.counts["failed"] += 1
        elif row.get("verdict") not in PASSING:
            self.counts["unexpected"] += 1
        if not self.live:
            self.console.print(f"[{self.done}/{self.total or '?'}] {cid}: status {row.get('status')}, "
                               f"verdict {row.get('verdict')}, eta {self._eta()}", markup=False)
        self._update()

    def _eta(self) -> str:
        if self.first_start is None:
            return "-"
        cost = lambda ids: sum(self.weights.get(i, 1.0) for i in ids)  # noqa: E731
        done = cost(self.finished)
        left = cost(i for i in self.ids if i not in self.finished) if self.ids else None
        return eta(done, left, time.monotonic() - self.first_start)

    def _summary(self) -> str:
        c = self.counts
        return f"with violations {c['violated']} · unexpected {c['unexpected']} · failed {c['failed']}"

    def _update(self) -> None:
        current = (", ".join(sorted(self.running)[:2]) or ("starting" if self.total is None else ""))[:70]
        if self.beside:
            current = f"{current} ({self.beside})" if current else self.beside
        self.progress.update(self.task, total=self.total, completed=self.done, description=current,
                             counts=self._summary(), eta=self._eta())

    def stop(self) -> None:
        self._update()
        self.progress.stop()
        if not self.live:
            self.console.print(f"{self.done} configs run, {self._summary()}")


def eta(done: float, left: float | None, elapsed: float) -> str:
    """Time left at the pace so far: ``done`` and ``left`` in the same unit of work
    ('-' until some work is done)."""
    if left is None or not done:
        return "-"
    left = max(0.0, elapsed / done * left)
    minutes, seconds = divmod(int(round(left)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
