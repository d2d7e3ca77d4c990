"""ReqKVState: the three lengths of one request, plus its SWA cursor.

The extent (kv_allocated_len) has one writer, the KVManager's allocation
(_grow), which only ever raises it to max(target, current): K2, it never decreases
while the request lives. The state check K2 re-checks that after every step.
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
    # Who wrote the extent last (prefill | decode | spec | pd) and whether it page-ceiled it:
    # stranded slots are counted per writer kind, K1 holds the aligned writers to 0.
    writer: str = ""
    aligned: bool = False
