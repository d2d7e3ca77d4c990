"""The one way kvbench puts a file on disk: reports, baselines, --json, --trace, results,
meta.json, plots and locks all go through here.

A path kvbench writes is often one a user (or a workflow, or a restored results root)
named, so what is there is not trusted:
- only a regular file or a new path is written; a symlink is never followed (its target
  may be anything, outside the run), a device node, FIFO, socket or directory is refused
  (as root, replacing /dev/full or /dev/null with a regular file breaks the machine);
- a whole file is written beside the target and renamed over it, so a reader, a kill or
  a full disk never leaves half a file, and a hard link to the old file keeps its data
  (the rename gives the name a new inode instead of truncating the shared one);
- appended files (results.jsonl) and locks are opened with O_NOFOLLOW and must be
  regular files.
Every failure is one line naming the file and what is allowed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import IO, Iterator

from harness.core.errors import HarnessError
from mini_engine.files import kind_of  # noqa: F401  (one table of file kinds, for reading and writing)


class UnsafeTarget(HarnessError):
    """A path kvbench would write is not a regular file or a new path, or cannot be written."""



def check_target(path: str | os.PathLike[str], what: str) -> bool:
    """Refuse ``path`` unless it is a regular file or does not exist; True if it exists."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as err:
        raise UnsafeTarget(f"{what} {os.fspath(path)!r} cannot be written ({err.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeTarget(f"{what} {os.fspath(path)!r} is {kind_of(st.st_mode)}; "
                           f"kvbench writes only a regular file or a new path")
    return True


def _fail(path: Path, what: str, err: OSError) -> UnsafeTarget:
    reason = err.strerror or str(err)
    if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        reason += "; nothing was replaced"
    return UnsafeTarget(f"{what} {str(path)!r} cannot be written ({reason})")


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], what: str = "file", *, binary: bool = False,
              mkdir: bool = False) -> Iterator[IO]:
    """A file handle whose contents become ``path`` when the block ends without an
    error (temp file beside it, fsync, rename); on an error the old file stays whole
    and no temp file is left behind."""
    target = Path(path)
    check_target(target, what)
    if mkdir:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise _fail(target, what, err) from None
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # debris of a killed writer of the same pid; never written through
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        raise _fail(target, what, err) from None
    ok = False
    try:
        try:
            fh = os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"}))
        except BaseException:
            os.close(fd)
            raise
        with fh:
            try:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
            except OSError as err:
                raise _fail(target, what, err) from None
        check_target(target, what)  # nothing swapped in while we wrote
        try:
            os.replace(tmp, target)
        except OSError as err:
            raise _fail(target, what, err) from None
        ok = True
    finally:
        if not ok:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def write_text(path: str | os.PathLike[str], text: str, what: str = "file", *, mkdir: bool = False) -> None:
    with replacing(path, what, mkdir=mkdir) as fh:
        fh.write(text)


def write_bytes(path: str | os.PathLike[str], data: bytes, what: str = "file", *, mkdir: bool = False) -> None:
    with replacing(path, what, binary=True, mkdir=mkdir) as fh:
        fh.write(data)


def open_regular(path: str | os.PathLike[str], what: str, flags: int) -> int:
    """os.open of a file kvbench keeps open (an appended results file, a lock): never
    through a symlink, and only a regular file. O_NONBLOCK keeps a FIFO there from
    blocking the open; it is refused right after."""
    check_target(path, what)  # a device node is refused before it is opened at all
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnsafeTarget(f"{what} {os.fspath(path)!r} is a symbolic link; kvbench does not follow one "
                               f"there") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafeTarget(f"{what} {os.fspath(path)!r} is {kind_of(st.st_mode)}; "
                           f"kvbench writes only a regular file or a new path")
    os.set_blocking(fd, True)
    return fd
