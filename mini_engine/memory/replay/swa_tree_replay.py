"""The SWA-aware tree's records of a trace (trace/tree_calls.py, ``swa_tree_trace``) run again on
kvbench's own SWARadixCache.

``kvbench replay`` hands every ``swa_`` record to SWATreeReplay.check, in trace order,
and gets back each field whose recorded value the fresh tree does not give. Like the
full tree's replay (tree_replay.py), the tree frees nothing into the replay's
allocators: the engine's frees are their own allocator records. The full -> SWA map the
tree reads is this replay's own, set from each insert's recorded SWA slots (as the
request's allocations had set the pool's) and cleared where the tree frees SWA slots.
An EAGLE run's ``swa_tree`` record says ``bigram``: the keys are rebuilt as its bigrams.
"""

from __future__ import annotations

import numpy as np

from mini_engine.memory.trace.tree_calls import TokenStore, insert_slots, tree_key
from mini_engine.memory.tree.swa_locks import Receipt
from mini_engine.memory.tree.swa_radix import SWANode, SWARadixCache


class SWATreeReplay:
    def __init__(self, head: dict, tokens: TokenStore):
        self.head, self.ps = head, head["page_size"]
        self.tokens = tokens  # the full tree replay's: one store of the trace's tokens records
        self.tree: SWARadixCache | None = None
        self.bigram = False
        self.map = np.zeros(0, np.int64)
        self.nodes: dict[int, SWANode] = {}  # the recorded node id -> this tree's node
        self.receipts: dict[object, Receipt] = {}  # request -> the tree's receipt of its lock

    def check(self, rec: dict) -> list[tuple[str, object, object]]:
        """(field, recorded, got) of each mismatch; ValueError when the record cannot be run."""
        op = rec["op"]
        if op == "swa_tree":
            if not self.head.get("swa_num_pages"):
                raise ValueError("an swa_tree record in a trace whose header has no SWA pool")
            self.map = np.zeros((self.head["num_pages"] + 1) * self.ps, np.int64)
            release = (self.head.get("profile") or {}).get("release", "0.5.23")  # absent: older traces, 0.5.23's
            self.tree = SWARadixCache(self.ps, rec["window"], self.map, lambda slots: None, self._clear,
                                      release=release)  # a release it does not know: ValueError, one line
            self.nodes, self.receipts, self.bigram = {}, {}, rec.get("bigram", False)
            return []
        tree = self.tree
        if tree is None:
            raise ValueError("an SWA tree call before the trace's swa_tree record")
        if op == "swa_match":
            slots, node = tree.match_prefix(tree_key(self.tokens.raw(rec), self.bigram))
            self.nodes[rec["node"]] = node
            got = {"matched": len(slots), "node": node.id}
            if "full_hit" in rec:  # newer traces: the FULL hit behind the branching point
                got["full_hit"] = tree.full_hit // self.ps * self.ps
        elif op == "swa_insert":
            full, swa = insert_slots(rec, self.ps), insert_slots(rec, self.ps, "swa_")
            key = tree_key(self.tokens.raw(rec), self.bigram)  # a slot per key position
            if len(full) != len(key) or len(swa) != len(key) or (len(full) and full.max() >= len(self.map)):
                raise ValueError(f"swa_insert of a {len(key)}-long key with {len(full)} FULL slots, {len(swa)} SWA "
                                 f"slots (FULL slots below {len(self.map)})")
            self.map[full] = swa
            cached, node = tree.insert(key, full,
                                       evicted=rec["swa_evicted_seqlen"], prev_prefix_len=rec["prev_prefix_len"])
            self.nodes[rec["node"]] = node
            got = {"cached": cached, "node": node.id}
        elif op == "swa_lock":
            delta, self.receipts[rec["rid"]] = tree.inc_lock_ref(self._node(rec))
            got = {"delta": -delta}  # recorded as SGLang's: the change of the FULL evictable size
        elif op == "swa_unlock":
            if rec["rid"] not in self.receipts:
                raise ValueError(f"swa_unlock of request {rec['rid']!r}, which holds no lock")
            try:
                got = {"delta": tree.dec_lock_ref(self._node(rec), self.receipts.pop(rec["rid"]),
                                                  skip_swa=rec.get("skip_swa", False))}
            except ValueError as err:  # a lock count that would go negative: the call fails here
                return [("result", "success", f"error: {err}")]
        elif op == "swa_release_swa":
            if rec["rid"] not in self.receipts:
                raise ValueError(f"swa_release_swa of request {rec['rid']!r}, which holds no lock")
            try:
                tree.dec_swa_lock_only(self._node(rec), self.receipts[rec["rid"]])
            except ValueError as err:
                return [("result", "success", f"error: {err}")]
            got = {}
        else:  # swa_evict
            freed, swa_freed = tree.evict(rec["num_tokens"], rec["swa_num_tokens"])
            got = {"evicted": freed, "swa_evicted": swa_freed}
        got.update(full_evictable=tree.full_evictable, swa_evictable=tree.swa_evictable)
        return [(k, rec[k], v) for k, v in got.items() if rec[k] != v]

    def _clear(self, full_slots: np.ndarray) -> None:
        self.map[np.asarray(full_slots, dtype=np.int64)] = 0  # the pool's clear_map: the tree reads it

    def _node(self, rec: dict) -> SWANode:
        node = self.nodes.get(rec["node"])
        if node is None:
            raise ValueError(f"node {rec['node']} is not one an earlier swa_match or swa_insert ended on")
        return node
