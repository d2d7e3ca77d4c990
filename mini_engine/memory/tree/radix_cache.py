"""SGLang's radix prefix cache, page-granular, as host data (numpy only).

Which tree SGLang 0.5.23 builds (``mem_cache/kv_cache_builder.py: build_kv_cache`` ->
``mem_cache/registry.py: create_tree_cache`` -> ``default_radix_cache_factory``):

(a) full attention: ``UnifiedRadixCache`` (mem_cache/unified_radix_cache.py) with the
    FULL component only (``create_unified_radix_cache``); its tree core is the Rust one
    by default (``unified_cache/tree_core_registry.py``,
    ``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND``), the Python ``UnifiedTreeCore`` its
    fallback. ``--disable-radix-cache`` builds the same class with ``disable=True``: it
    matches and inserts nothing (kvbench's ``prefix_cache = "chunk"``).
(b) hybrid SWA: ``UnifiedRadixCache`` with the FULL and SWA components (SWA tombstones
    and the SWA eviction threshold live in ``unified_cache/components/swa.py``); a model
    with no full-attention layer at all gets ``PureSWARadixCache`` instead.
(c) the PD decode side: ``arg_groups/pd_disaggregation_hook.py`` forces
    ``disable_radix_cache=True`` there unless ``--disaggregation-decode-enable-radix-cache``
    (kvbench's ``pd_radix``), so the decode side runs (a)/(b) with ``disable=True`` by
    default, and the tree of (a)/(b) with the flag.

The single-component ``RadixCache`` of mem_cache/radix_cache.py is no longer on that
default chain, but it is the same tree for the FULL pool: page-granular token keys,
a match splits the node it ends inside, LRU eviction of unlocked leaves (the FULL
component's ``_evict_device_start`` heaps the evictable leaves by the same LRU
priority; suites/unit/conform/test_radix_cache_vs_sglang.py drives this tree against
both). Where they differ is who frees an insert's duplicates: UnifiedRadixCache frees
them itself, one free per node the insert walked (``overlap`` below lists those nodes'
spans); RadixCache leaves the range to its caller (memory/tree/prefix.py does either, by
release). This module reproduces that tree (SGLang's ``RadixCache``):

* ``match_prefix(tokens)``: the longest cached prefix, whole pages only
  (``RadixKey.page_aligned``), its slots and the node it ends on; a match ending inside
  a node splits it;
* ``insert(tokens, slots)``: the page-aligned key; returns how much of it was already in
  the tree (the caller frees its own slots for that part: SGLang's ``_insert_cache``);
* ``inc_lock_ref`` / ``dec_lock_ref``: a reference on every node from the root down;
  locked tokens are ``protected_size``, the rest ``evictable_size``;
* ``evict(num_tokens)``: least recently used unlocked leaves first, whole leaves, until
  ``num_tokens`` are freed or none is left; a parent left childless and unlocked joins.

Recency is a logical clock: SGLang reads ``time.monotonic()`` once per match or insert
(every node on the path gets that time) and once for each node it creates (a split's
upper half, a new leaf); this clock ticks at the same points, so the LRU order is
SGLang's wherever its clock strictly increases.

The engine drives it through memory/tree/prefix.py (PrefixCache): admission matches and
locks, a prefill result and a release insert and move the lock, an allocation that
would fail evicts first, and pool conservation (K8) counts ``total_size()`` as held by
the tree.
"""

from __future__ import annotations

import heapq
from typing import Callable

import numpy as np


class RadixNode:
    __slots__ = ("key", "value", "children", "parent", "lock_ref", "last_access", "id")

    def __init__(self, key: np.ndarray, value: np.ndarray, parent: RadixNode | None, clock: int, nid: int):
        self.key = key  # token ids, a whole number of pages
        self.value = value  # their KV slots
        self.children: dict[bytes, RadixNode] = {}
        self.parent = parent
        self.lock_ref = 0
        self.last_access = clock
        self.id = nid


class RadixCache:
    """A page-granular prefix tree of token ids -> KV slots.

    free: called with the slots of each evicted leaf (SGLang's ``free_segment`` of the
    leaf's value: whole pages, since every key is page-aligned).
    """

    def __init__(self, page_size: int, free: Callable[[np.ndarray], None] | None = None):
        if page_size < 1:
            raise ValueError(f"page_size must be an integer >= 1 (got {page_size})")
        self.ps = page_size
        self.free = free
        self._clock = 0
        self._ids = 0
        self.root = self._node(np.empty(0, np.int64), np.empty(0, np.int64), None)
        self.root.lock_ref = 1  # never evicted
        self.evictable_size = 0  # tokens in unlocked nodes
        self.protected_size = 0  # tokens in locked nodes
        self._leaves: set[RadixNode] = set()  # unlocked nodes without children
        self.evicted_leaves = 0
        self.evicted_tokens = 0
        self.last_node = self.root  # the node the last insert ended on
        # [start, end) of the last insert's key in each node it walked into, from the root down: the
        # part already cached, node by node (0.5.23's tree frees a request's duplicates per node).
        self.overlap: list[tuple[int, int]] = []

    # -- helpers ---------------------------------------------------------------

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _node(self, key: np.ndarray, value: np.ndarray, parent: RadixNode | None) -> RadixNode:
        self._ids += 1
        return RadixNode(key, value, parent, self._tick(), self._ids)

    def overlap_past(self, prev: int) -> list[tuple[int, int]]:
        """The last insert's already-cached spans past position prev, node by node: the
        row's duplicates 0.5.23's insert frees itself (prev: its prev_prefix_len)."""
        return [(max(s, prev), e) for s, e in self.overlap if e > max(s, prev)]

    def _child_key(self, key: np.ndarray, at: int = 0) -> bytes:
        return key[at:at + self.ps].tobytes()

    def _aligned(self, tokens) -> np.ndarray:
        key = np.asarray(tokens, dtype=np.int64).reshape(-1)
        return key[: len(key) // self.ps * self.ps]

    def _common(self, a: np.ndarray, b: np.ndarray) -> int:
        """Length of the common prefix of a and b, floored to a page."""
        n = min(len(a), len(b))
        diff = np.flatnonzero(a[:n] != b[:n])
        same = int(diff[0]) if len(diff) else n
        return same // self.ps * self.ps

    def _update_leaf(self, node: RadixNode) -> None:
        if node.lock_ref == 0 and not node.children and node is not self.root:
            self._leaves.add(node)
        else:
            self._leaves.discard(node)

    def _split(self, child: RadixNode, split_len: int) -> RadixNode:
        """child becomes [split_len:] under a new node holding [:split_len] (same locks)."""
        upper = self._node(child.key[:split_len], child.value[:split_len].copy(), child.parent)
        upper.lock_ref = child.lock_ref
        child.key = child.key[split_len:]
        child.value = child.value[split_len:].copy()
        upper.children[self._child_key(child.key)] = child
        upper.parent.children[self._child_key(upper.key)] = upper
        child.parent = upper
        return upper

    # -- the public calls --------------------------------------------------------

    def match_prefix(self, tokens) -> tuple[np.ndarray, RadixNode]:
        """(slots of the longest cached page-aligned prefix, the node it ends on)."""
        key = self._aligned(tokens)
        if len(key) == 0:
            return np.empty(0, np.int64), self.root
        now = self._tick()
        node = self.root
        node.last_access = now
        values = []
        at = 0
        while at < len(key):
            child = node.children.get(self._child_key(key, at))
            if child is None:
                break
            child.last_access = now
            n = self._common(child.key, key[at:])
            if n < len(child.key):
                node = self._split(child, n)
                values.append(node.value)
                break
            values.append(child.value)
            node = child
            at += n
        slots = np.concatenate(values) if values else np.empty(0, np.int64)
        return slots, node

    def insert(self, tokens, slots) -> int:
        """Insert the page-aligned part of tokens with its slots; returns the length already cached.

        The caller owns the slots of that cached part (its own copies are duplicates to free).
        """
        key = self._aligned(tokens)
        value = np.asarray(slots, dtype=np.int64).reshape(-1)[: len(key)]
        if len(value) != len(key):
            raise ValueError(f"insert needs a slot per token of the page-aligned key ({len(value)} < {len(key)})")
        now = self._tick()
        node = self.root
        node.last_access = now
        self.last_node = node
        self.overlap = []
        if len(key) == 0:
            return 0
        at = 0
        while at < len(key):
            child = node.children.get(self._child_key(key, at))
            if child is None:
                break
            node = child
            node.last_access = now
            n = self._common(node.key, key[at:])
            self.overlap.append((at, at + n))
            at += n
            if n < len(node.key):
                node = self._split(node, n)
        if at < len(key):
            leaf = self._node(key[at:].copy(), value[at:].copy(), node)
            node.children[self._child_key(leaf.key)] = leaf
            self.evictable_size += len(leaf.key)
            self._update_leaf(node)
            self._update_leaf(leaf)
            node = leaf
        self.last_node = node  # where the insert ended (SGLang's InsertResult.last_device_node)
        return at

    def inc_lock_ref(self, node: RadixNode) -> int:
        """Lock node and its ancestors; returns the change of evictable_size."""
        delta = 0
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_size -= len(node.key)
                self.protected_size += len(node.key)
                delta -= len(node.key)
            node.lock_ref += 1
            self._update_leaf(node)
            node = node.parent
        return delta

    def dec_lock_ref(self, node: RadixNode) -> int:
        """Release one lock of node and its ancestors; returns the change of evictable_size."""
        delta = 0
        while node is not self.root:
            if node.lock_ref <= 0:
                raise ValueError(f"dec_lock_ref on an unlocked node (id {node.id})")
            if node.lock_ref == 1:
                self.evictable_size += len(node.key)
                self.protected_size -= len(node.key)
                delta += len(node.key)
            node.lock_ref -= 1
            self._update_leaf(node)
            node = node.parent
        return delta

    def evict(self, num_tokens: int) -> int:
        """Evict least recently used unlocked leaves until num_tokens are freed; returns tokens freed."""
        heap = [(n.last_access, n.id, n) for n in self._leaves]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, x = heapq.heappop(heap)
            if self.free is not None:
                self.free(x.value)
            freed += len(x.value)
            self._delete_leaf(x)
            parent = x.parent
            if not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, parent.id, parent))
        self.evicted_tokens += freed
        return freed

    def _delete_leaf(self, node: RadixNode) -> None:
        del node.parent.children[self._child_key(node.key)]
        self.evictable_size -= len(node.key)
        self._leaves.discard(node)
        self._update_leaf(node.parent)
        self.evicted_leaves += 1

    # -- queries -----------------------------------------------------------------

    def path_slots(self, node: RadixNode) -> np.ndarray:
        """The slots from the root down to node (SGLang's path_device_indices): no clock tick."""
        parts = []
        while node is not self.root:
            parts.append(node.value)
            node = node.parent
        return np.concatenate(parts[::-1]) if parts else np.empty(0, np.int64)

    def total_size(self) -> int:
        """Tokens held by the tree (locked or not)."""
        return self.evictable_size + self.protected_size

    @property
    def pages(self) -> int:
        return self.total_size() // self.ps

    @property
    def evictable_pages(self) -> int:
        return self.evictable_size // self.ps

    @property
    def protected_pages(self) -> int:
        return self.protected_size // self.ps

    def all_slots(self) -> np.ndarray:
        """Every slot the tree holds (audits: a slot in the tree is neither free nor a request's)."""
        out, stack = [], list(self.root.children.values())
        while stack:
            n = stack.pop()
            out.append(n.value)
            stack.extend(n.children.values())
        return np.concatenate(out) if out else np.empty(0, np.int64)
