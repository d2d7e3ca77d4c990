"""One line per skip reason in pytest's ``-ra`` summary.

pytest folds skips by (file, line, reason). A skip raised by a shared fixture (SGLang
missing for the conformance tests) is reported at each test's own line, so one cause
printed 24 identical hints, one per test. Before the short summary is written (pytest
writes it after the other ``pytest_terminal_summary`` hooks), every reason seen at more
than one place is moved to one place: the folder all its tests share, with the count.
"""

from __future__ import annotations

import os
from pathlib import Path


def fold_skips(reports: list, root: Path) -> None:
    """Move each skip whose reason is seen at more than one place to one place (in place)."""
    skips = [r for r in reports if isinstance(r.longrepr, tuple) and len(r.longrepr) == 3]
    places: dict[str, set[tuple[str, object]]] = {}
    for rep in skips:
        path, line, reason = rep.longrepr
        places.setdefault(reason, set()).add((str(root / path), line))  # root / an absolute path is that path
    for rep in skips:
        where = places[rep.longrepr[2]]
        if len(where) > 1:
            rep.longrepr = (os.path.commonpath(sorted(p for p, _ in where)), None, rep.longrepr[2])


def pytest_terminal_summary(terminalreporter) -> None:
    fold_skips(terminalreporter.stats.get("skipped", []), terminalreporter.config.rootpath)
