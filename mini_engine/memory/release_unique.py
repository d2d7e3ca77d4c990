"""SGLang 0.5.18's release of a finished request's pages: the free rule "unique-row".

Before PR 35265's release rework, release_kv_cache freed the committed row [0,
committed) through ChunkCache.cache_finished_req, which calls allocator.free(): a
torch.unique over the row's slots (page ids in sorted order, and a device sync, since
its output shape depends on the data). Only the over-allocation [ceil_ps(committed),
extent) went through free_segment (page representatives by stride, no sync), in
_release_overallocated_kv_indices. Under a free group both are held to its end, where
the base allocator frees the unique pages first and the paged allocator then puts the
segments' pages in front of them (FreeList.free_group_end keeps that order), so the
free list's page order differs from 0.5.23's segment release after the first release.

Full-attention pools only: SGLang 0.5.18's SWAChunkCache frees the full and the SWA
copy of each slot in one call, and skips the positions its window eviction already
freed. That path is not modelled here; with a SWA pool the release keeps the segment
rule's pieces (Release.release).
"""

from __future__ import annotations

import numpy as np

from mini_engine.memory.allocator import PagedAllocator


def unique_row_pieces(full: PagedAllocator, host_row: np.ndarray, committed: int, extent: int,
                      ps: int) -> list[np.ndarray]:
    """Free the row as 0.5.18 does and return the pages each call released, in call order."""
    committed = min(committed, extent)
    out = []
    if committed:
        out.append(full.free(host_row[:committed]))  # cache_finished_req: a unique, a sync
    top, end = -(-committed // ps) * ps, -(-extent // ps) * ps
    if end > top:
        out.append(full.free_segment(host_row, top, end))  # the over-allocation, by stride
    return out
