"""Allocation trace (DESIGN.md section 5): JSON lines, header first.

The writer records every allocator call of both pools, the manager's planning
records and (version 2) the prefix tree's calls (tree_calls.py); reader.py reads a file
back and memory/replay/run.py re-runs it on fresh allocators and a fresh tree.
"""

from __future__ import annotations

import json
import os
from typing import IO

from mini_engine.errors import TraceError

FORMAT = "kvbench-trace"
VERSION = 2  # 2: the prefix tree's records (a version 1 trace has none and still replays)


class TraceWriter:
    def __init__(self, path_or_file: str | os.PathLike | IO[str], header: dict):
        if isinstance(path_or_file, (str, os.PathLike)):
            try:
                self._fh: IO[str] = open(path_or_file, "w", encoding="utf-8")
            except OSError as err:
                raise TraceError(f"cannot write trace file {os.fspath(path_or_file)}: {err.strerror}") from None
            self._owns = True
        else:
            self._fh = path_or_file
            self._owns = False
        head = {"format": FORMAT, "version": VERSION, "page_size": None, "num_pages": None,
                "swa_num_pages": None, "config": {}}
        head.update(header)
        self.write(head)

    @classmethod
    def for_memory(cls, path_or_file, mem, config: dict | None = None) -> TraceWriter:
        """A writer whose header describes the pools of a MemoryConfig."""
        return cls(path_or_file, {
            "page_size": mem.page_size, "num_pages": mem.num_pages,
            "swa_num_pages": mem.swa_num_pages,
            "row_width": mem.row_width,  # a reservation cut here is K4 (conform: SGLang writes past the row)
            # The accounting rules the trace was recorded under, so it replays on its own terms.
            "profile": mem.validate().rules.knobs(),
            "config": dict(config or {}, policy=mem.policy, free_policy=mem.free_policy,
                           window=mem.window),
        })

    def write(self, record: dict) -> None:
        self._fh.write(json.dumps(record, separators=(",", ":")))
        self._fh.write("\n")

    def close(self) -> None:
        if self._fh.closed:
            return
        if self._owns:
            self._fh.close()
        else:
            self._fh.flush()  # the caller's file stays open

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

