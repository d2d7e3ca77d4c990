"""The tree records of a trace (trace/tree_calls.py) run again on kvbench's own RadixCache.

``kvbench replay`` hands every tree record to TreeReplay.check, in trace order between
the allocator calls, and gets back each field whose recorded value the fresh tree does
not give. The tree frees nothing into the replay's allocator: an eviction's frees are
their own ``free_pages`` records, replayed as allocator calls; the tree's evicted pages
are compared with the record instead.
"""

from __future__ import annotations

import numpy as np

from mini_engine.memory.replay.held_prefix import HeldPrefix
from mini_engine.memory.trace.tree_calls import TokenStore, evicted_pages, insert_slots, tree_key
from mini_engine.memory.tree.radix_cache import RadixCache, RadixNode


class TreeReplay:
    def __init__(self, page_size: int):
        self.ps = page_size
        self.tree: RadixCache | None = None
        self.bigram = False
        self.tokens = TokenStore()
        self.nodes: dict[int, RadixNode] = {}  # the recorded node id -> this tree's node
        self._freed: list[np.ndarray] = []
        self.held = HeldPrefix()  # what each insert's prev_prefix_len must be

    def check(self, rec: dict) -> list[tuple[str, object, object]]:
        """(field, recorded, got) of each mismatch; ValueError when the record cannot be run
        (a call before the tree record, tokens the trace never gave, an unknown node)."""
        op = rec["op"]
        if op == "tree":
            self.tree = RadixCache(self.ps, free=self._freed.append)
            self.bigram, self.nodes = rec["bigram"], {}
            self.held.reset()
            return []
        if op == "tokens":
            self.tokens.add(rec)
            return []
        tree = self.tree
        if tree is None:
            raise ValueError("a tree call before the trace's tree record")
        if op not in ("match", "insert"):
            self.held.other(op)
        if op == "match":
            slots, node = tree.match_prefix(tree_key(self.tokens.raw(rec), self.bigram))
            got = {"matched": len(slots), "node": node.id}
            self.nodes[rec["node"]] = node
            self.held.matched(rec.get("rid"), len(slots))
        elif op == "insert":
            cached = tree.insert(tree_key(self.tokens.raw(rec), self.bigram), insert_slots(rec, self.ps))
            got = {"cached": cached, "node": tree.last_node.id}
            self.nodes[rec["node"]] = tree.last_node
            want = self.held.inserted(rec["rid"], len(insert_slots(rec, self.ps)),
                                      len(tree.path_slots(tree.last_node)))
        elif op == "lock":
            got = {"delta": tree.inc_lock_ref(self._node(rec))}
        elif op == "unlock":
            try:
                got = {"delta": tree.dec_lock_ref(self._node(rec))}
            except ValueError as err:  # a lock count that would go negative: the call fails here
                return [("result", "success", f"error: {err}")]
        else:  # evict
            self._freed.clear()
            evicted = tree.evict(rec["num_tokens"])
            got = {"evicted": evicted, "pages": evicted_pages(np.concatenate(self._freed) if self._freed else [],
                                                               self.ps)}
        got.update(evictable=tree.evictable_size, protected=tree.protected_size)
        found = [(k, rec[k], v) for k, v in got.items() if rec[k] != v]
        if op == "insert" and want is not None and "prev_prefix_len" in rec and rec["prev_prefix_len"] != want:
            # SGLang's prev_prefix_len is the request's locked prefix (held_prefix.py).
            found.append(("prev_prefix_len", rec["prev_prefix_len"], want))
        return found

    def _node(self, rec: dict) -> RadixNode:
        node = self.nodes.get(rec["node"])
        if node is None:
            raise ValueError(f"node {rec['node']} is not one an earlier match or insert ended on")
        return node
