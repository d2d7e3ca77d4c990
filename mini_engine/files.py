"""Reading a file a user named (--config, --prompts, --event, a baseline, a reply body, a
checkpoint's config.json, a workflow, a pull request's test file).

A path given as input may be a FIFO, a device or a directory: a plain open() of a FIFO
with no writer blocks for ever, /dev/zero never ends. The file is opened without
blocking and its kind read from the open descriptor (no race with a rename), and
anything but a regular file is refused in one line naming the option.

``read_document`` is the one reader of such a document: every failure (missing, not
a regular file, unreadable, too big, not UTF-8, not valid TOML/JSON) is the caller's
error class in one line of one pattern, ``<what> <path>: <reason>``.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: str | os.PathLike[str], what: str, error: type[Exception],
                 shown: str | os.PathLike[str] | None = None) -> bytes:
    """The bytes of ``path``; ``error`` if it is not a regular file (the message names
    ``shown``, default the path). Other OSErrors (not found, no permission) propagate,
    for the caller's own message."""
    # O_NONBLOCK: opening a FIFO for reading waits for a writer otherwise.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode  # before fdopen, which raises its own error on a directory
        if not stat.S_ISREG(mode):
            raise failure(error, what, path if shown is None else shown, f"{kind_of(mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def failure(error: type[Exception], what: str, path: str | os.PathLike[str], reason: str) -> Exception:
    """The one-line error about a document: ``<what> <path>: <reason>``."""
    return error(f"{what} {os.fspath(path)!r}: {reason}")


FORMATS = ("text", "json", "toml")
_REQUIRED = object()


def read_document(path: str | os.PathLike[str], what: str, error: type[Exception], *, fmt: str = "text",
                  limit: int | None = None, missing: str | None = None, default: Any = _REQUIRED,
                  shown: str | None = None) -> Any:
    """The document at ``path``: its text (fmt "text"), or its parsed JSON or TOML;
    ``default`` when given and the file does not exist (an optional document).
    Every failure is ``error("<what> <path>: <reason>")``: not found (``missing`` added,
    a hint where to get one), not a regular file, unreadable, over ``limit`` bytes,
    not UTF-8 text, not valid JSON/TOML, nested too deeply. ``shown``: the name the
    message gives the document in place of its path (a file of a pull request's checkout,
    named in a reply on it by its own name, not by the runner's directories)."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS} (got {fmt!r})")
    named = path if shown is None else shown
    try:
        if limit is not None and (size := os.stat(path).st_size) > limit:
            raise failure(error, what, named, f"{size} bytes, over the limit of {limit}")
        text = read_regular(path, what, error, named).decode("utf-8")
    except FileNotFoundError:
        if default is not _REQUIRED:
            return default
        raise failure(error, what, named, "not found" + (f" ({missing})" if missing else "")) from None
    except IsADirectoryError:
        raise failure(error, what, named, "a directory, not a regular file") from None
    except UnicodeDecodeError:
        raise failure(error, what, named, "not UTF-8 text") from None
    except OSError as err:
        raise failure(error, what, named, f"cannot be read ({err.strerror or type(err).__name__})") from None
    return text if fmt == "text" else parse_document(text, named, what, error, fmt=fmt)


def parse_document(text: str, path: str | os.PathLike[str], what: str, error: type[Exception], *,
                   fmt: str) -> Any:
    """``text`` (read from ``path``) parsed as ``fmt`` ("json" or "toml"); a failure is
    ``error("<what> <path>: <reason>")``. For a caller that also keeps the text (a digest)."""
    name = fmt.upper()
    try:
        return json.loads(text) if fmt == "json" else tomllib.loads(text)
    except json.JSONDecodeError as err:
        raise failure(error, what, path, f"not valid JSON: {err.msg} (line {err.lineno})") from None
    except RecursionError:
        raise failure(error, what, path, "nested too deeply to read") from None
    except ValueError as err:  # TOMLDecodeError, or an integer of more digits than Python converts
        raise failure(error, what, path, f"not valid {name}: {str(err).splitlines()[0][:200]}") from None
