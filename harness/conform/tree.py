"""The prefix tree's trace records replayed on SGLang's own tree (``kvbench conform``).

A trace of a run with the radix prefix cache (trace version 2) records every call the
engine's PrefixCache makes on its tree (mini_engine/memory/trace/tree_calls.py). conform.py
hands each of those records to TreeConform.check, in trace order between the
allocator calls, and this runs the same call on the tree the installed SGLang builds
for a full-attention model (page size from the header, EAGLE's bigram keys where the
trace's ``tree`` record says so):

* 0.5.23: ``UnifiedRadixCache`` with the FULL component only
  (registry.create_unified_radix_cache; the installed class, imported on a CPU by
  harness/conform/sglang_swa_radix.py, with the Python tree core);
* 0.5.18 (sglang-pre-35265 traces): ``RadixCache`` (registry.default_radix_cache_factory's
  last resort there; compiled from the installed source, harness/conform/sglang_radix.py).

and compares:

* match: the matched length;
* insert: the length already cached (``prefix_len``) and the record's
  ``prev_prefix_len``, which must be the request's locked prefix on SGLang's tree
  (mini_engine/memory/replay/held_prefix.py: its match, then the node each insert ended on;
  the prompt split's own key length); on 0.5.23 also the duplicates
  the insert frees itself (the request's own copies of what the tree held, past the
  record's ``prev_prefix_len``: one free per node it walked), against kvbench's
  ``free_pages`` records after the insert, call by call, where kvbench's were not
  held by a free group (a group's frees reach the allocator as one call at its end,
  which the allocator replay checks);
* lock / unlock: the change of the evictable size;
* evict: the tokens evicted and the evicted pages, in the order SGLang frees them;
* every call: ``evictable_size()`` and ``protected_size()`` after it.

The node a lock names is the SGLang node that the match or insert recorded with that
node id ended on. SGLang's tree frees into a recorder, not into the allocator conform
replays: kvbench's frees are the trace's own ``free_pages`` records, which replay on
SGLang's allocator as every other free does. So an evict is also checked against
those records: the full pool's page ids freed since the previous tree call must end
with the pages SGLang's tree evicted, in its order (the free-list order every later
allocation depends on).

What is checked is the tree's answer to each recorded call, not the sequence of
calls: that is kvbench's scheduler path (mini_engine/memory/tree/prefix.py), which follows
0.5.23's under every profile (docs/conform.md says where 0.5.18's differs).
"""

from __future__ import annotations

import functools
from array import array

from harness.conform.swa_tree import unified_tree
from harness.conform.versions import full_tree_is_unified
from harness.core.causes import one_line
from harness.conform.sglang_radix import matched_len, radix_cache, radix_namespace
from mini_engine.memory.replay.held_prefix import HeldPrefix
from mini_engine.memory.trace.tree_calls import TokenStore, insert_slots

_classes = functools.cache(radix_namespace)  # compiled once a process, as SGLang imports once


class _Freed:
    """The allocator SGLang's tree frees into: keeps the page ids of each free call."""

    device = "cpu"

    def __init__(self, ps: int):
        self.page_size, self.calls = ps, []

    def free_segment(self, value, start_pos=0):
        self.calls.append((value[::self.page_size] // self.page_size).tolist())

    def take(self) -> list[list[int]]:
        calls, self.calls = self.calls, []
        return calls


class FullRadix:
    """0.5.18's RadixCache, compiled from the installed source, freeing into freed (an
    allocator's free_segment); the side-by-side tests call it as conform does."""

    def __init__(self, sg, ps: int, freed, bigram: bool):
        self.ns = ns = _classes(sg.torch)
        self.torch, self.tree = sg.torch, radix_cache(ns, ps, freed, bigram=bigram)

    def key(self, raw):
        return self.ns["RadixKey"](array("q", raw))

    def match(self, raw):
        res = self.tree.match_prefix(self.ns["MatchPrefixParams"](key=self.key(raw)))
        return res.last_device_node, matched_len(res)

    def insert(self, raw, slots, prev: int):
        res = self.tree.insert(self.ns["InsertParams"](key=self.key(raw), value=self.torch.tensor(slots)))
        return res.last_device_node, res.prefix_len

    def lock(self, node) -> int:
        return self.tree.inc_lock_ref(node).delta

    def unlock(self, node) -> int:
        return self.tree.dec_lock_ref(node).delta

    def evict(self, n: int) -> int:
        return self.tree.evict(self.ns["EvictParams"](num_tokens=n)).num_tokens_evicted

    def path(self, node) -> list[int]:
        """The slots from the root down to node."""
        values = []
        while node is not self.tree.root_node:
            values.append(node.value)
            node = node.parent
        return [int(x) for v in reversed(values) for x in v.tolist()]


class FullUnified:
    """0.5.23's UnifiedRadixCache with the FULL component, the installed class. Its lock
    result counts the protected change (the opposite sign of the trace's delta) and its
    unlock result none, so both are measured as the evictable size's change."""

    frees_duplicates = True  # its insert frees the request's copies of what it held

    def __init__(self, sg, ps: int, freed, bigram: bool):
        self.u = u = unified_tree("tree records")
        self.bigram, self.torch = bigram, u.torch
        self.tree = u.build_full(ps, freed, bigram)
        self.receipts: dict[object, list] = {}  # node -> the receipts of the locks it holds

    def key(self, raw):
        return self.u.RadixKey(array("q", raw), is_bigram=self.bigram)

    def match(self, raw):
        res = self.tree.match_prefix(self.u.base.MatchPrefixParams(key=self.key(raw)))
        return res.last_device_node, self.u.matched_len(res)

    def insert(self, raw, slots, prev: int):
        res = self.tree.insert(self.u.base.InsertParams(key=self.key(raw), value=self.torch.tensor(slots),
                                                        prev_prefix_len=prev))
        return res.last_device_node, res.prefix_len

    def lock(self, node) -> int:
        before = self.tree.evictable_size()
        self.receipts.setdefault(node, []).append(self.tree.inc_lock_ref(node).to_dec_params())
        return self.tree.evictable_size() - before

    def unlock(self, node) -> int:
        held = self.receipts.get(node)
        if not held:
            raise ValueError("an unlock of a node that holds no lock")
        before = self.tree.evictable_size()
        self.tree.dec_lock_ref(node, held.pop())
        return self.tree.evictable_size() - before

    def evict(self, n: int) -> int:
        return self.tree.evict(self.u.base.EvictParams(num_tokens=n)).num_tokens_evicted

    def path(self, node) -> list[int]:
        """The slots from the root down to node."""
        return self.tree.path_device_indices(node).tolist()


class TreeConform:
    def __init__(self, sg, page_size: int):
        self.sg, self.ps = sg, page_size
        self.calls = 0  # tree calls (match, insert, lock, unlock, evict) checked
        self.tree = None  # FullRadix or FullUnified, once the trace's tree record came
        self.tokens = TokenStore()
        self.nodes: dict[int, object] = {}  # the recorded node id -> SGLang's node
        self.freed = _Freed(page_size)
        self.frees: list[list[int]] = []  # the full pool's free_pages calls since the last tree call
        self.dedup: tuple[dict, list[list[int]]] | None = None  # the last insert's record and its own frees
        self.held = HeldPrefix()  # what each insert's prev_prefix_len must be

    def saw_free(self, rec: dict) -> None:
        """An allocator free of the trace (conform.py): an eviction's frees come just before it."""
        if rec["op"] == "free_pages" and rec.get("pool", "full") == "full":
            self.frees.append(list(rec["page_ids"]))

    def check(self, rec: dict):
        """(field, kvbench's value, SGLang's value) of the first mismatch, or None. A record
        that cannot be run (a call before the tree record, tokens the trace never gave, an
        unknown node) raises ValueError: conform calls the trace malformed."""
        op = rec["op"]
        if op == "tokens":
            self.tokens.add(rec)
            return None
        if op == "tree":
            kind = FullUnified if full_tree_is_unified(self.sg.version) else FullRadix
            self.tree, self.nodes = kind(self.sg, self.ps, self.freed, rec["bigram"]), {}
            self.held.reset()
            return None
        if self.tree is None:
            raise ValueError("a tree call before the trace's tree record")
        found = self._dedup_freed()
        if found is not None:
            return found
        self.calls += 1
        if op not in ("match", "insert"):
            self.held.other(op)
        try:
            found = getattr(self, "_" + op)(rec)
        except (RuntimeError, AssertionError, IndexError) as err:  # SGLang's tree refused the call itself
            found = ("result", "a result", one_line(err))
        self.frees = []
        if found is None:
            for fld, got in (("evictable", self.tree.tree.evictable_size()),
                             ("protected", self.tree.tree.protected_size())):
                if rec[fld] != got:
                    return f"{fld} size after it", rec[fld], got
        return found

    def finish(self):
        """The trace ended: the last insert's duplicates, if no tree call came after it."""
        return self._dedup_freed()

    def _dedup_freed(self):
        """The frees kvbench recorded after the last insert against the ones SGLang's insert
        made. Only where kvbench recorded some: frees held by a free group reach the
        allocator as one call at the group's end (the allocator replay checks those), so an
        empty list here cannot tell a group from a missing free."""
        if self.dedup is None:
            return None
        rec, theirs = self.dedup
        self.dedup = None
        if self.frees and self.frees != theirs:
            return f"duplicates freed (insert of rid {rec['rid']}, {rec['len']} tokens)", self.frees, theirs
        return None

    # -- one method per call ----------------------------------------------------------
    def _match(self, rec: dict):
        node, got = self.tree.match(self.tokens.raw(rec))
        self.nodes[rec["node"]] = node
        self.held.matched(rec.get("rid"), got)
        if got != rec["matched"]:
            return f"matched (rid {rec['rid']}, {rec['len']} tokens)", rec["matched"], got
        return None

    def _insert(self, rec: dict):
        self.freed.take()
        slots = insert_slots(rec, self.ps)
        node, got = self.tree.insert(self.tokens.raw(rec), slots, rec.get("prev_prefix_len", 0))
        self.nodes[rec["node"]] = node
        want = self.held.inserted(rec["rid"], len(slots), len(self.tree.path(node)))
        theirs = self.freed.take()
        # Only a tree that frees its insert's duplicates itself (0.5.23's); 0.5.18's RadixCache
        # leaves them to its caller. Older traces lack prev_prefix_len: not checked.
        if "prev_prefix_len" in rec and getattr(self.tree, "frees_duplicates", False):
            self.dedup = (rec, theirs)
        if got != rec["cached"]:
            return f"cached (rid {rec['rid']}, {rec['len']} tokens)", rec["cached"], got
        if want is not None and rec.get("prev_prefix_len", want) != want:
            return f"prev_prefix_len (rid {rec['rid']}, {rec['len']} tokens)", rec["prev_prefix_len"], want
        return None

    def _lock(self, rec: dict):
        delta = self.tree.lock(self._node(rec))
        return None if delta == rec["delta"] else (f"delta (node {rec['node']})", rec["delta"], delta)

    def _unlock(self, rec: dict):
        delta = self.tree.unlock(self._node(rec))
        return None if delta == rec["delta"] else (f"delta (node {rec['node']})", rec["delta"], delta)

    def _node(self, rec: dict):
        node = self.nodes.get(rec["node"])
        if node is None:
            raise ValueError(f"node {rec['node']} is not one an earlier match or insert ended on")
        return node

    def _evict(self, rec: dict):
        self.freed.take()
        got = self.tree.evict(rec["num_tokens"])
        pages = [p for call in self.freed.take() for p in call]
        if got != rec["evicted"]:
            return f"evicted (of {rec['num_tokens']} tokens asked)", rec["evicted"], got
        if pages != rec["pages"]:
            return "pages", rec["pages"], pages
        mine = [p for call in self.frees for p in call]
        before = mine[-len(pages):] if pages else []
        if before != pages:
            return "pages (the free_pages records before it)", before, pages
        return None
