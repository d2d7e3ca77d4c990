"""Read a JSON or TOML file the CI layer is configured by (or handed, like an event).

One place (mini_engine.files.read_document) turns a missing, unreadable or malformed
file into a one-line error naming the file, '<what> <path>: <reason>', so the
permissions, the runner registry and the bot's event agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.errors import UsageError, HarnessError
from mini_engine.files import read_document


def read_config(path: str | Path, what: str, *, error: type[HarnessError] = UsageError) -> Any:
    """The parsed content of `path` (TOML if it ends in .toml, JSON otherwise); `what`
    names it in the message, e.g. 'runner registry' or '--event'."""
    path = Path(path)
    return read_document(path, what, error, fmt="toml" if path.suffix == ".toml" else "json")
