"""OS locks that make a run directory and a local MLflow store single-owner.

A lock is ``fcntl.flock`` on a small file that also says who holds it (pid, host,
what it is doing, since when). The kernel drops a flock when its process dies, so a
lock can never outlive its owner; the file's text can, and is then only a note that
the previous owner was killed (the taker says so in one line).

A run directory is owned by one sweep at a time (a second one refuses at once: two
writers of one results.jsonl double rows). A fresh sqlite store is created and
migrated by one process at a time (MLflow's migrations are not safe to run twice at
once: two fresh sweeps left the store half-migrated for good); a second one waits.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote, urlparse

from harness.core.errors import HarnessError
from harness.core.safe_write import open_regular


STORE_WAIT_S = 300.0  # creating and migrating a store takes seconds; more means a stuck owner


class LockBusy(HarnessError):
    """Another live process holds the lock."""


class Lock:
    """An exclusive flock on ``path``; release() (or process death) frees it."""

    def __init__(self, path: Path, what: str):
        self.path = path
        self.what = what
        self.fd: int | None = None

    def acquire(self, *, wait_s: float = 0.0, note: Callable[[str], None] = lambda m: None,
                purpose: str = "") -> "Lock":

        try:  # never through a symlink: truncating the note would empty its target
            fd = open_regular(self.path, f"the lock of {self.what}", os.O_RDWR | os.O_CREAT)
        except OSError as err:
            raise LockBusy(f"cannot open the lock of {self.what} ({self.path}: {err.strerror})") from None
        deadline = time.monotonic() + wait_s
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                owner = _describe(_read_owner(fd))
                if time.monotonic() >= deadline:
                    os.close(fd)
                    waited = f" after waiting {wait_s:.0f} s" if wait_s else ""
                    raise LockBusy(f"{self.what} is in use by {owner}{waited}; "
                                   f"wait for it to finish or stop it") from None
                if not told:
                    note(f"kvbench: waiting for {self.what}, in use by {owner}")
                    told = True
                time.sleep(0.2)
        stale = _read_owner(fd)
        if stale and not _is_me(stale):
            # The lock was free, so its writer is gone: killed before it could clear it.
            note(f"kvbench: taking over the lock of {self.what} left by {_describe(stale)}, which is no longer running")
        try:
            _write_owner(fd, purpose)
        except OSError:
            pass  # the note is informative; the flock itself is what excludes
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)  # a clean exit leaves no stale note behind
        except OSError:
            pass
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def run_lock(run_path: Path) -> Lock:
    return Lock(run_path / "lock", f"run {run_path.name}")


def hold_run(run_path: Path, purpose: str, note: Callable[[str], None]) -> Lock:
    """Own a run directory until release() or exit; refuse at once if another sweep does."""
    return run_lock(run_path).acquire(note=note, purpose=purpose)


def sqlite_path(uri: str | None) -> Path | None:
    """The database file of a sqlite tracking URI, None for anything else."""
    if not uri or not uri.startswith("sqlite:"):
        return None
    path = unquote(urlparse(uri).path)
    if uri.startswith("sqlite:////"):
        path = "/" + path.lstrip("/")
    elif uri.startswith("sqlite:///"):
        path = path[1:]
    return Path(path) if path and path != ":memory:" else None


def store_lock(uri: str | None, note: Callable[[str], None] = lambda m: None) -> Lock | None:
    """Hold the lock of a local sqlite store while it is created, migrated or its
    experiment and parent run are made; None for a server (it serialises itself)."""
    db = sqlite_path(uri)
    if db is None or not db.parent.is_dir() or db.is_symlink() or (db.exists() and not db.is_file()):
        return None  # no store can be made there: opening it fails fast (mlflow_store.check_local_store)
    return Lock(db.with_name(db.name + ".lock"), f"the MLflow store {db}").acquire(
        wait_s=STORE_WAIT_S, note=note, purpose="creating the MLflow store and parent run")


def _read_owner(fd: int) -> dict[str, Any] | None:
    try:
        raw = os.pread(fd, 4096, 0)
        owner = json.loads(raw.decode()) if raw.strip() else None
    except (OSError, ValueError, RecursionError):  # a damaged note is no owner, not a failure
        return None
    return owner if isinstance(owner, dict) else None


def _write_owner(fd: int, purpose: str) -> None:
    text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "doing": purpose})
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode() + b"\n", 0)


def _is_me(owner: dict[str, Any]) -> bool:
    return owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname()


def _describe(owner: dict[str, Any] | None) -> str:
    if not owner:
        return "another process"
    since = owner.get("since")
    when = time.strftime(" since %H:%M:%S", time.localtime(since)) if isinstance(since, (int, float)) else ""
    doing = f" ({str(owner['doing'])[:80]})" if owner.get("doing") else ""
    return f"pid {owner.get('pid')} on {str(owner.get('host'))[:64]}{doing}{when}"
