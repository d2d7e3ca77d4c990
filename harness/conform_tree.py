"""The prefix tree's trace records replayed on SGLang's own RadixCache (``kvbench conform``).

A trace of a run with the radix prefix cache (trace version 2) records every call the
engine's PrefixCache makes on its tree (mini_engine/memory/tree_trace.py). conform.py
hands each of those records to TreeConform.check, in trace order between the
allocator calls, and this runs the same call on SGLang 0.5.23's ``RadixCache``
(compiled from the installed source, harness/sglang_radix.py; page size from the
header, EAGLE's bigram keys where the trace's ``tree`` record says so) and compares:

* match: the matched length (``device_prefix_len``);
* insert: the length already cached (``prefix_len``);
* lock / unlock: the change of the evictable size (``inc_lock_ref`` / ``dec_lock_ref``);
* evict: the tokens evicted and the evicted pages, in the order SGLang frees them;
* every call: ``evictable_size()`` and ``protected_size()`` after it.

The node a lock names is the SGLang node that the match or insert recorded with that
node id ended on. SGLang's tree frees its evicted leaves into a recorder, not into
the allocator conform replays: kvbench's eviction is its own ``free_pages`` records
(one per leaf, just before the evict record), which replay on SGLang's allocator as
every other free does. So an evict is also checked against those records: the full
pool's page ids freed since the previous tree call must end with the pages SGLang's
tree evicted, in its order (the free-list order every later allocation depends on).

The tree is SGLang 0.5.23's (kvbench's tree reproduces it): under another release
(0.5.18, for sglang-pre-35265 traces) the tree records are counted as unchecked.
"""

from __future__ import annotations

import functools
from array import array

from harness.core.causes import one_line
from harness.sglang_radix import radix_cache, radix_namespace
from mini_engine.memory.tree_trace import TokenStore, insert_slots

TREE_VERSION = "0.5.23"
_classes = functools.cache(radix_namespace)  # compiled once a process, as SGLang imports once


class _Freed:
    """The allocator SGLang's tree evicts into: keeps the page ids of each freed leaf."""

    device = "cpu"

    def __init__(self, ps: int):
        self.ps, self.pages = ps, []

    def free_segment(self, value, start_pos=0):
        self.pages.extend((value[::self.ps] // self.ps).tolist())


class TreeConform:
    def __init__(self, sg, page_size: int):
        self.sg, self.ps = sg, page_size
        self.checked = sg.version == TREE_VERSION
        self.calls = 0  # tree calls (match, insert, lock, unlock, evict) checked
        self.unchecked = 0  # tree calls of a trace conformed under another release
        self.ns: dict | None = None  # SGLang's tree classes, once the trace's tree record came
        self.tree = None
        self.tokens = TokenStore()
        self.nodes: dict[int, object] = {}  # the recorded node id -> SGLang's node
        self.freed = _Freed(page_size)
        self.frees: list[int] = []  # the full pool's page ids freed since the last tree call

    def saw_free(self, rec: dict) -> None:
        """An allocator free of the trace (conform.py): an eviction's frees come just before it."""
        if rec["op"] == "free_pages" and rec.get("pool", "full") == "full":
            self.frees.extend(rec["page_ids"])

    def check(self, rec: dict):
        """(field, kvbench's value, SGLang's value) of the first mismatch, or None. A record
        that cannot be run (a call before the tree record, tokens the trace never gave, an
        unknown node) raises ValueError: conform calls the trace malformed."""
        op = rec["op"]
        if op == "tokens":
            self.tokens.add(rec)
            return None
        if not self.checked:
            self.unchecked += op != "tree"
            return None
        if op == "tree":
            self.ns = ns = _classes(self.sg.torch)
            self.tree, self.nodes = radix_cache(ns, self.ps, self.freed, bigram=rec["bigram"]), {}
            return None
        if self.tree is None:
            raise ValueError("a tree call before the trace's tree record")
        self.calls += 1
        try:
            found = getattr(self, "_" + op)(rec)
        except (RuntimeError, AssertionError, IndexError) as err:  # SGLang's tree refused the call itself
            found = ("result", "a result", one_line(err))
        self.frees = []
        if found is None:
            for fld, got in (("evictable", self.tree.evictable_size()), ("protected", self.tree.protected_size())):
                if rec[fld] != got:
                    return f"{fld} size after it", rec[fld], got
        return found

    # -- one method per call ----------------------------------------------------------
    def _key(self, rec: dict):
        return self.ns["RadixKey"](array("q", self.tokens.raw(rec)))

    def _match(self, rec: dict):
        res = self.tree.match_prefix(self.ns["MatchPrefixParams"](key=self._key(rec)))
        self.nodes[rec["node"]] = res.last_device_node
        if res.device_prefix_len != rec["matched"]:
            return f"matched (rid {rec['rid']}, {rec['len']} tokens)", rec["matched"], res.device_prefix_len
        return None

    def _insert(self, rec: dict):
        value = self.sg.torch.tensor(insert_slots(rec, self.ps))
        res = self.tree.insert(self.ns["InsertParams"](key=self._key(rec), value=value))
        self.nodes[rec["node"]] = res.last_device_node
        if res.prefix_len != rec["cached"]:
            return f"cached (rid {rec['rid']}, {rec['len']} tokens)", rec["cached"], res.prefix_len
        return None

    def _lock(self, rec: dict):
        delta = self.tree.inc_lock_ref(self._node(rec)).delta
        return None if delta == rec["delta"] else (f"delta (node {rec['node']})", rec["delta"], delta)

    def _unlock(self, rec: dict):
        delta = self.tree.dec_lock_ref(self._node(rec)).delta
        return None if delta == rec["delta"] else (f"delta (node {rec['node']})", rec["delta"], delta)

    def _node(self, rec: dict):
        node = self.nodes.get(rec["node"])
        if node is None:
            raise ValueError(f"node {rec['node']} is not one an earlier match or insert ended on")
        return node

    def _evict(self, rec: dict):
        self.freed.pages = []
        got = self.tree.evict(self.ns["EvictParams"](num_tokens=rec["num_tokens"])).num_tokens_evicted
        if got != rec["evicted"]:
            return f"evicted (of {rec['num_tokens']} tokens asked)", rec["evicted"], got
        if self.freed.pages != rec["pages"]:
            return "pages", rec["pages"], self.freed.pages
        before = self.frees[-len(self.freed.pages):] if self.freed.pages else []
        if before != self.freed.pages:
            return "pages (the free_pages records before it)", before, self.freed.pages
        return None
