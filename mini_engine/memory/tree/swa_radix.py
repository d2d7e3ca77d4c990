"""SGLang's SWA-aware radix tree (hybrid full + sliding-window models), as host data.

Which class SGLang 0.5.23 builds (``mem_cache/registry.py``): a model with full and
SWA layers and the radix cache on gets ``UnifiedRadixCache`` with the FULL and SWA
components (``create_unified_radix_cache``; the SWA rules live in
``unified_cache/components/swa.py``, the tree walk in ``unified_tree_core.py``). A
model with SWA layers only gets ``PureSWARadixCache`` (a plain radix tree over the
SWA pool, no tombstones). The PD decode side forces ``--disable-radix-cache`` unless
``--disaggregation-decode-enable-radix-cache``, so it runs the same class disabled.

What the FULL + SWA tree does, and what this module reproduces:

* A node holds FULL slots (its key's KV in the full pool) and SWA slots (the same
  positions in the SWA pool, read through the full -> SWA map), each with its own
  lock count. A **tombstone** is a node whose SWA slots are gone (value ``None``)
  while its FULL slots stay: an internal node the SWA eviction reached, or a part
  of an insert older than the request's SWA cursor (``swa_evicted_seqlen``).
* **match**: walk as the full tree does (page-aligned, a match ending inside a node
  splits it), but the match may only *end* on a node where the SWA window is whole:
  a validator restarts a count at every tombstone (and refuses the tombstone), adds
  each live node's length, and accepts a node once the count since the last
  tombstone reaches ``window`` (before any tombstone the count is unbounded, so a
  tree without tombstones matches as the full one). The match is the path to the
  deepest accepted node; the nodes up to ``window + page`` tokens above it become
  the most recently used in the SWA LRU, and the path's access times are refreshed.
* **insert** (key, slots, the request's SWA cursor ``evicted``, ``prev_prefix_len``):
  walking existing nodes, the incoming slots of ``[prev_prefix_len, ...)`` are
  duplicates to free, except where an existing node is a tombstone at or past the
  cursor: there the node is split at the cursor and *recovered* with the incoming
  slots (the node's old FULL slots freed, the incoming ones kept with their SWA
  pages; if the node's FULL is locked, its FULL is kept, the incoming SWA pages are
  moved under it and the incoming FULL slots freed). A duplicate below the cursor
  frees its FULL slots only (its SWA pages went with the cursor). A new leaf is split
  at the cursor (the older part a tombstone) and, when longer than a window rounded
  up to pages, split again so its newest window is a node of its own (a lock then
  pins one window of SWA, not a long prefill); its live parts get their SWA slots.
* **locks** (swa_locks.py): FULL locks the whole path to the root; SWA only the
  trailing nodes covering ``window`` tokens, up to a uuid-stamped boundary.
* **evict(full tokens, swa tokens)** (swa_evict.py): FULL LRU leaves first, then the
  SWA LRU (a leaf deleted whole, an internal node tombstoned).
* While a request runs, SGLang frees its SWA slots behind the window (the cursor,
  memory/extents/swa_cursor.py); the tree side needs only the cursor at insert time
  (the tombstone boundary), and the request's cursor never drops below its matched
  prefix (``cache_protected_len``: the tree's slots are not the request's to free).

Recency is SGLang's clock: a float counter read twice per node created, once per
node an insert walks, once per match (the path gets that time, less 1e-5 per level
up); SWA recency is SGLang's doubly linked LRU, kept here as a list (index 0 = MRU).
``release`` picks whose tree core where 0.5.18's and 0.5.23's differ: a split's place in
that list (``_split``) and the SWA lock's walk over tombstones (swa_locks.py).

A match also leaves the FULL hit it walked (``full_hit``, SGLang's full_kv_hit_length),
from which swa_prefix.py takes 0.5.23's branching point (``swa_branching_seqlen``; the
shorter insert it picks is the checkpoint's, mini_engine/scheduler/prefix_match.py).

Not reproduced: HiCache (host values), session refs, Mamba.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from mini_engine.errors import check_choice
from mini_engine.memory.rules import RELEASES
from mini_engine.memory.tree import swa_evict, swa_locks


class SWANode:
    __slots__ = ("key", "full", "swa", "full_lock", "swa_lock", "uuid", "last_access", "children", "parent", "id")

    def __init__(self, key: np.ndarray, parent: SWANode | None, clock: float, nid: int):
        self.key = key
        self.full: np.ndarray | None = None  # FULL slots
        self.swa: np.ndarray | None = None  # SWA slots; None = tombstone
        self.full_lock = 0
        self.swa_lock = 0
        self.uuid: int | None = None  # the SWA lock boundary stamp
        self.last_access = clock
        self.children: dict[bytes, SWANode] = {}
        self.parent = parent
        self.id = nid

    @property
    def lock_ref(self) -> int:
        """The FULL lock count (K13 reads it as the full tree's)."""
        return self.full_lock


class SWARadixCache:
    """FULL + SWA prefix tree. swa_map: full slot -> SWA slot (the pool's map, shared);
    free_full(slots) / free_swa(full slots) return slots to the pools (free_swa reads
    and clears the map)."""

    def __init__(self, page_size: int, window: int, swa_map: np.ndarray,
                 free_full: Callable[[np.ndarray], None], free_swa: Callable[[np.ndarray], None],
                 release: str = "0.5.23"):
        if page_size < 1 or window < 1:
            raise ValueError(f"page_size and window must be >= 1 (got {page_size}, {window})")
        self.ps, self.window = page_size, window
        # Whose tree core (a ConfigError, one line, for a release it does not know): 0.5.18's
        # moves both halves of a split to the SWA LRU's most recent end (_split) and its SWA
        # lock passes over tombstones, counting live SWA tokens (swa_locks.py); 0.5.23's not.
        self.release = check_choice("release", release, RELEASES)
        self.live_window = self.split_to_front = release == "0.5.18"
        self.swa_map, self.free_full, self.free_swa = swa_map, free_full, free_swa
        self._clock = 0.0
        self._ids = 0
        self.uuids = 0  # the last SWA lock boundary stamp handed out (swa_locks.py)
        self.root = self._new_node(np.empty(0, np.int64), None)
        self.root.full = np.empty(0, np.int64)
        self.full_evictable = self.full_protected = 0
        self.swa_evictable = self.swa_protected = 0
        self.leaves: set[SWANode] = set()  # SGLang's evictable_device_leaves
        self.lru: list[SWANode] = []  # nodes holding SWA slots, most recent first
        self.tombstoned_tokens = 0  # SWA tokens freed by tombstoning (figures)
        self.locked_evictions: list[int] = []  # ids of locked nodes an eviction reached (K14: none)

    # -- clock, nodes ----------------------------------------------------------------
    def _tick(self) -> float:
        t = self._clock
        self._clock += 1.0
        return t

    def _new_node(self, key: np.ndarray, parent: SWANode | None) -> SWANode:
        self._ids += 1
        node = SWANode(key, parent, self._tick(), self._ids)
        self._tick()  # SGLang's creation_time
        return node

    def child_key(self, key: np.ndarray, at: int = 0) -> bytes:
        return key[at:at + self.ps].tobytes()

    def _common(self, a: np.ndarray, b: np.ndarray) -> int:
        n = min(len(a), len(b))
        diff = np.flatnonzero(a[:n] != b[:n])
        same = int(diff[0]) if len(diff) else n
        return same // self.ps * self.ps

    def _is_leaf(self, node: SWANode) -> bool:
        return (node is not self.root and node.full is not None and node.full_lock == 0 and node.swa_lock == 0
                and not any(c.full is not None for c in node.children.values()))

    def update_leaf(self, node: SWANode) -> None:
        if self._is_leaf(node):
            self.leaves.add(node)
        else:
            self.leaves.discard(node)

    # -- the SWA LRU -----------------------------------------------------------------
    def _lru_add(self, node: SWANode, at: int = 0) -> None:
        self.lru.insert(at, node)

    def lru_remove(self, node: SWANode) -> None:
        self.lru.remove(node)

    def _window_mru(self, node: SWANode) -> None:
        """The nodes up to window + page tokens above node (itself first) become the most recent."""
        at, acc = 0, 0
        while node is not self.root and acc < self.window + self.ps:
            if node.swa is not None:
                self.lru_remove(node)
                self._lru_add(node, at)
                at += 1
            acc += len(node.key)
            node = node.parent

    def _set_swa(self, node: SWANode, swa: np.ndarray) -> None:
        node.swa = swa
        self._lru_add(node)
        if node.swa_lock > 0:
            self.swa_protected += len(swa)
        else:
            self.swa_evictable += len(swa)

    # -- split ---------------------------------------------------------------------
    def _split(self, child: SWANode, n: int) -> SWANode:
        """child becomes [n:] under a new node holding [:n] (locks copied, the uuid moves up)."""
        upper = self._new_node(child.key[:n], child.parent)
        upper.children = {self.child_key(child.key, n): child}
        upper.full_lock, upper.swa_lock = child.full_lock, child.swa_lock
        upper.full = child.full[:n].copy()
        child.full = child.full[n:].copy()
        if child.swa is not None:
            upper.swa = child.swa[:n].copy()
            child.swa = child.swa[n:].copy()
        upper.uuid, child.uuid = child.uuid, None
        child.key = child.key[n:]
        upper.parent.children[self.child_key(upper.key)] = upper
        child.parent = upper
        if upper.swa is not None and self.split_to_front:
            # 0.5.18's _split_node takes child out of every LRU and puts the new node, then
            # child, at the most recent end: [child, upper, ...].
            self.lru_remove(child)
            self._lru_add(upper)
            self._lru_add(child)
        elif upper.swa is not None:  # 0.5.23: right after child, which keeps its place
            self._lru_add(upper, self.lru.index(child) + 1)
        child.last_access = self._tick()
        self.update_leaf(upper)
        self.update_leaf(child)
        return upper

    # -- match ---------------------------------------------------------------------
    def match_prefix(self, tokens) -> tuple[np.ndarray, SWANode]:
        """(FULL slots of the longest usable prefix, the node it ends on)."""
        key = np.asarray(tokens, dtype=np.int64).reshape(-1)
        key = key[: len(key) // self.ps * self.ps]
        self.full_hit = 0
        if len(key) == 0:
            return np.empty(0, np.int64), self.root
        node, at, values = self.root, 0, []
        best, best_len = self.root, 0
        run = float("inf")  # SWA tokens since the last tombstone
        while at < len(key):
            child = node.children.get(self.child_key(key, at))
            if child is None:
                break
            n = self._common(child.key, key[at:])
            inside = n < len(child.key)
            if inside:
                child = self._split(child, n)
            values.append(child.full)
            node = child
            at += n
            if child.swa is None:  # a tombstone: the window starts again after it
                run = 0
            else:
                run += len(child.key)
                if run >= self.window:
                    best, best_len = child, len(values)
            if inside:
                break
        self._window_mru(best)
        t = self._tick()
        x = best
        while x is not None:
            x.last_access = t
            t -= 0.00001
            x = x.parent
        self.full_hit = at  # the FULL hit, SWA-valid or not (SGLang's full_kv_hit_length)
        slots = np.concatenate(values[:best_len]) if best_len else np.empty(0, np.int64)
        return slots, best

    # -- insert --------------------------------------------------------------------
    def insert(self, tokens, slots, evicted: int = 0, prev_prefix_len: int = 0) -> tuple[int, SWANode]:
        """Insert the page-aligned key with its FULL slots; returns (length already cached,
        the node the insert ended on). evicted: the request's SWA cursor (page-aligned):
        positions below it have no SWA slots. The duplicates past prev_prefix_len are freed here."""
        key = np.asarray(tokens, dtype=np.int64).reshape(-1)
        key = key[: len(key) // self.ps * self.ps]
        value = np.asarray(slots, dtype=np.int64).reshape(-1)[: len(key)]
        if len(value) != len(key):
            raise ValueError(f"insert needs a slot per token of the page-aligned key ({len(value)} < {len(key)})")
        if evicted % self.ps:
            raise ValueError(f"the SWA cursor must be page-aligned (got {evicted})")
        self.root.last_access = self._tick()
        if len(key) == 0:
            return 0, self.root
        node, total = self.root, 0
        while total < len(key):
            child = node.children.get(self.child_key(key, total))
            if child is None:
                break
            child.last_access = self._tick()
            n = self._common(child.key, key[total:])
            if n < len(child.key):
                child = self._split(child, n)
            self._overlap(child, total, n, value[total:total + n], evicted, prev_prefix_len)
            node = child
            total += n
        target = node
        if total < len(key):
            target = self._new_node(key[total:].copy(), node)
            target.full = value[total:].copy()
            node.children[self.child_key(target.key)] = target
            self.full_evictable += len(target.key)
            self.update_leaf(target)
            self.update_leaf(node)
            self._populate(target, total, evicted)
        if target is not self.root:
            self._window_mru(target)
        return total, target

    def _overlap(self, node: SWANode, start: int, n: int, incoming: np.ndarray, evicted: int, prev: int) -> None:
        """An insert walks over node ([start, start + n) of its key): recover a tombstone at
        or past the cursor with the incoming slots, free the other incoming duplicates."""
        consumed = n
        if prev < start + n and node.swa is None and max(start, evicted) < start + n:
            live = max(start, evicted)
            if live > start:  # only the part at or past the cursor comes back
                self._split(node, live - start)
            fresh = incoming[live - start:]
            if node.full_lock > 0:  # keep the locked FULL: move the incoming SWA pages under it
                swa = self.swa_map[fresh].copy()
                self.swa_map[fresh] = 0
                self.swa_map[node.full] = swa
                self.free_full(fresh)
            else:
                self.free_full(node.full)
                node.full = fresh.copy()
                swa = self.swa_map[node.full].copy()
            self._set_swa(node, swa)
            consumed = live - start
        dup_start = max(0, prev - start)
        if dup_start < consumed:
            dup = incoming[dup_start:consumed]
            gone = min(max(evicted - (start + dup_start), 0), len(dup))  # SWA already freed by the cursor
            if gone:
                self.free_full(dup[:gone])
            if gone < len(dup):
                self.free_swa(dup[gone:])
                self.free_full(dup[gone:])

    def _populate(self, leaf: SWANode, start: int, evicted: int) -> None:
        """A new leaf [start, end): a tombstone below the cursor, SWA slots from it on, its
        newest window a node of its own."""
        end = start + len(leaf.key)
        live = max(start, evicted)
        if live >= end:
            return
        if live > start:
            self._split(leaf, live - start)
        parent = None
        tail = (self.window + self.ps - 1) // self.ps * self.ps
        if leaf.swa_lock == 0 and len(leaf.key) > tail:
            parent = self._split(leaf, len(leaf.key) - tail)
        if parent is not None:  # the older window first, so the tail is the more recent
            self._set_swa(parent, self.swa_map[parent.full].copy())
        self._set_swa(leaf, self.swa_map[leaf.full].copy())

    # -- locks (swa_locks.py) and eviction (swa_evict.py) ------------------------------
    def inc_lock_ref(self, node: SWANode) -> tuple[int, swa_locks.Receipt]:
        return swa_locks.inc_lock_ref(self, node)

    def lock_pins(self, node: SWANode) -> int:
        """The SWA tokens inc_lock_ref(node) would move from evictable to protected, read only."""
        return swa_locks.pins(self, node)

    def dec_lock_ref(self, node: SWANode, receipt: swa_locks.Receipt, skip_swa: bool = False) -> int:
        return swa_locks.dec_lock_ref(self, node, receipt, skip_swa)

    def dec_swa_lock_only(self, node: SWANode, receipt: swa_locks.Receipt) -> None:
        swa_locks.dec_swa_lock_only(self, node, receipt)

    def evict(self, full_tokens: int, swa_tokens: int = 0) -> tuple[int, int]:
        return swa_evict.evict(self, full_tokens, swa_tokens)

    # -- queries -------------------------------------------------------------------
    def nodes(self):
        stack = list(self.root.children.values())
        while stack:
            n = stack.pop()
            yield n
            stack.extend(n.children.values())

    def path_slots(self, node: SWANode) -> np.ndarray:
        parts = []
        while node is not self.root:
            parts.append(node.full)
            node = node.parent
        return np.concatenate(parts[::-1]) if parts else np.empty(0, np.int64)

    def total_size(self) -> int:
        return self.full_evictable + self.full_protected

    # The full tree's names, for what reads either tree (K12, K13, the manager's figures).
    _child_key = child_key

    @property
    def protected_size(self) -> int:
        return self.full_protected

    @property
    def evictable_size(self) -> int:
        return self.full_evictable

    @property
    def protected_pages(self) -> int:
        return self.full_protected // self.ps

    def swa_size(self) -> int:
        return self.swa_evictable + self.swa_protected
