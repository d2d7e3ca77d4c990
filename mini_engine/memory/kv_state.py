"""ReqKVState: the three lengths of one request, plus its SWA cursor.

The extent (kv_allocated_len) has one writer, set_extent, which enforces K2: it
never decreases while the request lives. Everything that moves it goes through the
KVManager, which reports a refused write to the auditor.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ReqKVState:
    rid: object
    row: int
    committed: int = 0  # kv_committed_len: KV is final (verified)
    allocated: int = 0  # kv_allocated_len: row slots [0, allocated) written and owned
    protected: int = 0  # cache_protected_len: prefix owned by a prefix cache
    swa_evicted: int = 0  # swa_evicted_seqlen: SWA KV below it is freed
    released: bool = False
    # The last reservation, so K4 can be re-checked after the fact.
    reserve_base: int = 0
    reserve: int = 0
    # Who wrote the extent last (prefill | decode | spec | pd) and whether it page-ceiled it:
    # stranded slots are counted per writer kind, K1 holds the aligned writers to 0.
    writer: str = ""
    aligned: bool = False

    def set_extent(self, new: int) -> int:
        """The one writer of the extent. Returns the old extent; refuses to go back (K2)."""
        old = self.allocated
        if new < old:
            raise ExtentDecrease(self.rid, old, new)
        self.allocated = new
        return old


class ExtentDecrease(Exception):
    """Internal signal of a K2 breach; the manager turns it into a Violation."""

    def __init__(self, rid: object, old: int, new: int):
        self.rid, self.old, self.new = rid, old, new
        super().__init__(f"extent of request {rid} would decrease from {old} to {new}")
