"""Reading a file a user named (--config, --prompts, --event, a baseline, a reply body).

A path given as input may be a FIFO, a device or a directory: a plain open() of a FIFO
with no writer blocks for ever, /dev/zero never ends. The file is opened without
blocking and its kind read from the open descriptor (no race with a rename), and
anything but a regular file is refused in one line naming the option.
"""

from __future__ import annotations

import os
import stat

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: str | os.PathLike[str], what: str, error: type[Exception]) -> bytes:
    """The bytes of ``path``; ``error`` if it is not a regular file. Other OSErrors
    (not found, no permission) propagate, for the caller's own message."""
    # O_NONBLOCK: opening a FIFO for reading waits for a writer otherwise.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode  # before fdopen, which raises its own error on a directory
        if not stat.S_ISREG(mode):
            raise error(f"{what} {os.fspath(path)!r} is {kind_of(mode)}; give a regular file")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as fh:
        return fh.read()
