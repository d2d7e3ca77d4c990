"""Where kvbench's MLflow store lives, and the checks before a client reaches it.

The local default is a sqlite file under the results root (artifacts beside it); a
``--mlflow-uri`` or ``$MLFLOW_TRACKING_URI`` overrides it. MLflow's own defaults retry an
unreachable server or an unopenable sqlite file for minutes, so the client environment
is made to fail fast and a local store is checked up front: a sweep keeps its rows on
disk and ``kvbench sync`` uploads them later.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from harness.core.causes import one_line
from harness.core.errors import HarnessError, UsageError
from harness.core.safe_write import kind_of
from harness.store.locks import sqlite_path


class MlflowUnavailable(HarnessError):
    """The tracking server or store cannot be reached."""


def quiet_client_env() -> None:
    # MLflow's defaults retry an unreachable server for minutes; a sweep must not
    # stall on that: fail fast, keep the row on disk, sync later.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    # Its INFO lines (creating the sqlite schema, ...) would sit above the progress bar.
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")


def default_uri(root: Path) -> str:
    return f"sqlite:///{(root / 'mlflow.db').resolve()}"


def artifact_location(root: Path) -> str:
    return (root / "mlartifacts").resolve().as_uri()


# What MLflow 3.17.2 can track to (its file store refuses new data): a server, or a
# database it opens itself. Anything else fails only after a sweep, so it is refused first.
SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql")
ALLOWED_URI = ("http(s)://HOST:PORT (a tracking server), sqlite:///PATH, or a database URL "
               "(postgresql://, mysql://, mssql://)")


def tracking_uri(cli_uri: str | None, root: Path) -> str:
    """The store a command logs to: the option, else the environment, else the local
    store; a URI MLflow cannot track to is one line naming where it came from."""
    if cli_uri:
        return check_uri(cli_uri, "--mlflow-uri")
    env = os.environ.get("MLFLOW_TRACKING_URI")
    return check_uri(env, "MLFLOW_TRACKING_URI") if env else default_uri(root)


def check_uri(uri: str, source: str) -> str:
    scheme, sep, rest = uri.partition(":")
    base = scheme.split("+", 1)[0].lower()  # postgresql+psycopg: a driver named
    if not (sep and base in SCHEMES and rest.startswith("//") and len(rest) > 2):
        raise UsageError(f"{source} must be {ALLOWED_URI} (got {uri[:80]!r})")
    return uri


def check_local_store(uri: str) -> None:
    """A sqlite store that cannot be opened fails here at once: MLflow retries opening
    it for about two minutes (a sync took 107 s, a 4-config sweep 4 minutes) before
    saying so. What can be known up front: the file is a regular file or absent, and its
    directory exists and can be written (sqlite writes a journal beside the file)."""

    db = sqlite_path(uri)
    if db is None:
        return
    why = None
    try:
        mode = os.lstat(db).st_mode
        if not stat.S_ISREG(mode):
            why = f"{db} is {kind_of(mode)}, not a database file"
    except FileNotFoundError:
        pass
    except OSError as err:
        why = f"{db}: {err.strerror}"
    if why is None and not db.parent.is_dir():
        why = f"its directory {db.parent} does not exist"
    elif why is None and not os.access(db.parent, os.W_OK | os.X_OK):
        why = f"its directory {db.parent} cannot be written"
    if why:
        raise MlflowUnavailable(f"MLflow store at {uri} cannot be opened: {why}")


def unreachable(uri: str, err: BaseException) -> MlflowUnavailable:
    # one_line keeps the cause a long library message ends with
    return MlflowUnavailable(f"MLflow at {uri} cannot be reached: {one_line(err)}")
