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

Hybrid SWA models (swa_chunk_release): 0.5.18 runs SWAChunkCache, which inherits that
cache_finished_req, on SWATokenToKVPoolAllocator. That allocator has no free_segment of
its own (the base class's is a plain free()), so the over-allocation is a unique free
too, and each free is the composite's (composite_free): the full allocator's unique,
then free_swa, which widens the slots to whole full pages, reads their SWA slots
through the full-to-SWA map, drops the ones already freed (0: the window eviction
cleared them), frees the rest on the SWA allocator and clears the map. The window
eviction is a free_swa too. A free group of the composite holds its frees and its
free_swa calls apart and frees each kind as one call at the end (full unique first,
then the SWA side), which the pools' groups reproduce: one unique per pool, and the
composite's own syncs once per kind (FreeList.pay_syncs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mini_engine.memory.pool.allocator import PagedAllocator

if TYPE_CHECKING:
    from mini_engine.memory.pool.swa import SWAPool

EMPTY = np.empty(0, dtype=np.int64)


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


def swa_chunk_release(full: PagedAllocator, swa: SWAPool, host_row: np.ndarray, protected: int,
                      committed: int, extent: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """SWAChunkCache's release: (full pages, SWA pages) of each composite free, in call order.

    cache_finished_req frees [protected, committed); _release_overallocated_kv_indices
    then [ceil_ps(committed), extent), whose free_segment is the composite's plain free.
    """
    ps = full.page_size
    committed = min(committed, extent)
    out = []
    if committed > protected:
        out.append(composite_free(full, swa, host_row[protected:committed]))
    top = -(-committed // ps) * ps
    if extent > top:
        out.append(composite_free(full, swa, host_row[top:extent]))
    return out


def composite_free(full: PagedAllocator, swa: SWAPool, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SWATokenToKVPoolAllocator.free(slots): the full pages, then free_swa's SWA pages."""
    if len(slots) == 0:  # the composite returns before anything (and is never held in a group)
        return EMPTY, EMPTY
    # The full allocator's free: torch.unique(slots // ps) at ps > 1, one sync (counted by it);
    # at ps 1 the token allocator appends the slots, no sync.
    return full.free(slots), free_swa(swa, slots, "free")


def free_swa(swa: SWAPool, slots: np.ndarray, kind: str = "free_swa") -> np.ndarray:
    """SWATokenToKVPoolAllocator.free_swa(slots): the SWA pages freed (or held in a group).

    kind: which of the composite's group lists the call would be held in ("free": a
    composite free's SWA half; "free_swa": the window eviction), each freed as one
    call at the group's end.
    """
    if len(slots) == 0:
        return EMPTY
    ps = swa.page_size
    if ps > 1:
        # _expand_to_full_pages: torch.unique(slots // ps), a sync, then every slot of each page.
        pages = np.unique(np.asarray(slots) // ps)
        slots = (pages[:, None] * ps + np.arange(ps, dtype=np.int64)).reshape(-1)
    mapped = swa.map_host[slots]
    live = mapped > 0  # swa_indices[swa_indices > 0]: boolean-mask indexing, a sync (its nonzero)
    swa.allocator.pay_syncs(kind, 2 if ps > 1 else 1)
    swa.clear_map(slots[live])  # SGLang zeroes the whole pages; the others are 0 already
    if not live.any():
        return EMPTY  # the SWA allocator's free returns on an empty index: no unique
    # The SWA allocator's free: torch.unique at ps > 1 (a sync, counted by it), sorted pages in
    # front; at ps 1 the slots appended in row order.
    return swa.allocator.free(mapped[live])
