"""The one reader of a run directory kvbench did not just write.

A run directory may come from anywhere: a rerun's artifact written by a pull request's
code, a night restored from CI, a copy from another machine. What it holds is input,
and reading it must neither leak nor hang:

- only regular files inside the run directory are read: no symbolic link is followed,
  neither the file nor a folder on the way (``plots/`` a link to ``~``, ``plots/zz.png``
  a link to ``~/.netrc``: its bytes would go to the MLflow store);
- no special file is opened: a FIFO would block for ever, a device (``/dev/zero``)
  would be read without end; each is refused from ``lstat`` before any ``open``;
- sizes are bounded: a file over its limit is refused before it is read, and at most
  the limit is ever read (a file growing meanwhile is refused too).

Every violation is the caller's error class in one line, ``<what> <path>: <reason>``,
as ``mini_engine.files.read_document`` words a document's failures.

How to call it (sync, report, history, the bot's artifact, merge):

    read_run_file(run_dir, "results.jsonl", "results file", MyError, limit=RESULTS_LIMIT)
        -> str, or ``default`` when given and the file does not exist
    read_run_file(run_dir, "meta.json", "run meta", MyError, fmt="json", default={})
        -> the parsed JSON
    read_run_bytes(run_dir, "plots/a.png", "plot", MyError) -> bytes
    run_file_names(run_dir, "plots", ".png", "plots", MyError) -> ["a.png", ...] (a listing
        that refuses a link or special file among the names it would return)
    copy_run_files(run_dir, "plots", ".png", dest, "plot", MyError) -> the copies under dest,
        for a caller that hands paths to a library which opens them itself (MLflow's
        log_artifact follows links): the checked bytes, never the run's own path

``name`` is a relative path inside ``run_dir`` ("meta.json", "plots/a.png"), never
absolute and never through "..". The run directory itself is the caller's choice (the
user named it, or it is a run id under the results root) and is opened as given.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from mini_engine.files import failure, kind_of, parse_document

MB = 1 << 20
RESULTS_LIMIT = 1024 * MB  # ~250k rows of a few KB: past any sweep kvbench writes
META_LIMIT = 4 * MB  # meta.json: the suite, hardware and MLflow ids, a few KB
PLOT_LIMIT = 64 * MB  # one PNG figure
DEFAULT_LIMIT = 64 * MB
_REQUIRED = object()
_WHY = "kvbench reads only regular files inside a run directory"


def _parts(name: str | os.PathLike[str]) -> tuple[str, ...]:
    parts = PurePosixPath(os.fspath(name)).parts
    if not parts or parts[0] == "/" or ".." in parts:
        raise ValueError(f"a run file is a relative path inside the run directory (got {os.fspath(name)!r})")
    return parts


def _open_dir(run_dir: Path, folders: tuple[str, ...], what: str, error: type[Exception], shown: Path) -> int:
    """A descriptor of run_dir/folders..., each folder a real directory, not a link."""
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for folder in folders:
            mode = os.stat(folder, dir_fd=fd, follow_symlinks=False).st_mode
            if not stat.S_ISDIR(mode):
                raise failure(error, what, shown, f"{folder} is {kind_of(mode)}, not a folder; {_WHY}")
            nxt = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_at(dir_fd: int, leaf: str, what: str, error: type[Exception], shown: Path, limit: int) -> bytes:
    mode = os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False).st_mode
    if not stat.S_ISREG(mode):  # refused before an open: a device node is never opened
        raise failure(error, what, shown, f"{kind_of(mode)}, not a regular file; {_WHY}")
    # O_NOFOLLOW and O_NONBLOCK: a link or FIFO swapped in since the lstat neither leads
    # out nor blocks; the kind is read again from the open descriptor.
    fd = os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise failure(error, what, shown, f"{kind_of(st.st_mode)}, not a regular file; {_WHY}")
        if st.st_size > limit:
            raise failure(error, what, shown, f"{st.st_size} bytes, over the limit of {limit}")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise failure(error, what, shown, f"over the limit of {limit} bytes")
    return data


def read_run_bytes(run_dir: str | os.PathLike[str], name: str | os.PathLike[str], what: str,
                   error: type[Exception], *, limit: int = DEFAULT_LIMIT, default: Any = _REQUIRED) -> Any:
    """The bytes of ``run_dir/name`` under the rule above; ``default`` when given and the
    file (or a folder on its way) does not exist. Any failure: ``error`` in one line."""
    parts = _parts(name)
    run_dir = Path(run_dir)
    shown = run_dir.joinpath(*parts)
    try:
        dir_fd = _open_dir(run_dir, parts[:-1], what, error, shown)
        try:
            return _read_at(dir_fd, parts[-1], what, error, shown, limit)
        finally:
            os.close(dir_fd)
    except FileNotFoundError:
        if default is not _REQUIRED:
            return default
        raise failure(error, what, shown, "not found") from None
    except OSError as err:  # ELOOP: a link swapped in; EACCES, EIO, ENOTDIR
        raise failure(error, what, shown, f"cannot be read ({err.strerror or type(err).__name__}); {_WHY}") from None


def read_run_file(run_dir: str | os.PathLike[str], name: str | os.PathLike[str], what: str,
                  error: type[Exception], *, fmt: str = "text", limit: int = DEFAULT_LIMIT,
                  default: Any = _REQUIRED) -> Any:
    """``read_run_bytes`` as UTF-8 text (fmt "text") or parsed ("json", "toml")."""
    data = read_run_bytes(run_dir, name, what, error, limit=limit, default=_REQUIRED if default is _REQUIRED else None)
    if data is None:
        return default
    shown = Path(run_dir).joinpath(*_parts(name))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise failure(error, what, shown, "not UTF-8 text") from None
    return text if fmt == "text" else parse_document(text, shown, what, error, fmt=fmt)


def run_file_names(run_dir: str | os.PathLike[str], folder: str, suffix: str, what: str,
                   error: type[Exception]) -> list[str]:
    """The names ending in ``suffix`` in ``run_dir/folder``, sorted ([] when the folder
    does not exist); a link or special file among them, or the folder not a real
    directory, is ``error`` in one line (a run never writes one there)."""
    run_dir = Path(run_dir)
    shown = run_dir / folder
    try:
        fd = _open_dir(run_dir, _parts(folder), what, error, shown)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise failure(error, what, shown, f"cannot be read ({err.strerror or type(err).__name__}); {_WHY}") from None
    try:
        names = sorted(n for n in os.listdir(fd) if n.endswith(suffix))
        for n in names:
            mode = os.stat(n, dir_fd=fd, follow_symlinks=False).st_mode
            if not stat.S_ISREG(mode):
                raise failure(error, what, shown / n, f"{kind_of(mode)}, not a regular file; {_WHY}")
        return names
    finally:
        os.close(fd)


def copy_run_files(run_dir: str | os.PathLike[str], folder: str, suffix: str, dest: str | os.PathLike[str],
                   what: str, error: type[Exception], *, limit: int = PLOT_LIMIT) -> list[Path]:
    """Copies of the files ``run_file_names`` lists, each read under the rule, written
    into ``dest`` (a directory of the caller's, e.g. a TemporaryDirectory) by name."""
    out = []
    for n in run_file_names(run_dir, folder, suffix, what, error):
        data = read_run_bytes(run_dir, f"{folder}/{n}", what, error, limit=limit)
        path = Path(dest) / n
        path.write_bytes(data)
        out.append(path)
    return out
