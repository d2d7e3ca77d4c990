"""The SWA-aware tree's trace records replayed on SGLang's own UnifiedRadixCache (``kvbench conform``).

A hybrid-SWA run with the radix prefix cache records every call its SWAPrefixCache
makes on its tree as an ``swa_`` record (mini_engine/memory/trace/tree_calls.py,
``swa_tree_trace``). conform.py hands each to SWATreeConform.check, in trace order
between the allocator calls, and this runs the same call on the installed SGLang's
UnifiedRadixCache with the FULL and SWA components (harness/conform/sglang_swa_radix.py builds
it on a CPU over SGLang's SWATokenToKVPoolAllocator; pools, page size and window from
the trace) and compares:

* swa_match: the matched length, and (0.5.23) the branching point its FULL hit gives;
* swa_insert: the length already cached (``prefix_len``), the insert made with the
  recorded FULL slots, SWA cursor (the request's SWA evicted length) and protected
  length (``prev_prefix_len``);
* swa_lock / swa_unlock: the change of the FULL evictable size (a lock's from SGLang's
  result, an unlock's measured around the call: its result carries none);
* swa_evict: the FULL and the SWA tokens evicted, for the FULL and SWA tokens asked;
* swa_release_swa: SGLang's ``release_swa`` on the request's lock (its tree core's
  ``dec_swa_lock_only``); that request's unlock after it is ``dec_lock_ref(skip_swa=True)``;
* every call: the FULL and the SWA evictable sizes after it.

An EAGLE run's ``swa_tree`` record says ``bigram``: SGLang's tree is built with
``is_eagle`` and the keys are the bigram RadixKeys its scheduler makes.

The node a lock names is the SGLang node the match or insert recorded with that node id
ended on; an unlock hands SGLang back the receipt of the lock the same request took
(its SWA window uuid). The full -> SWA map SGLang's tree reads is its allocator's: each
insert sets it from the recorded SWA slots of the inserted FULL slots, as the request's
allocations had. SGLang's tree frees into its allocator, but the trace's own allocator
records (the engine's frees, evictions included) replay on conform's allocators, as every
other free does; so this allocator's frees are kept, not applied (a page the engine
reused would be a double free there).

Under SGLang 0.5.18 (sglang-pre-35265 traces) the same check runs on 0.5.18's class:
it instantiates the same UnifiedRadixCache for a hybrid SWA model and takes the same
calls (harness/conform/sglang_swa_radix.py adapts their spelling).
"""

from __future__ import annotations

import functools
from array import array

from harness.conform import sglang_swa_radix  # light: it imports SGLang only when load() runs
from harness.conform.versions import SGLangMissing
from harness.core.causes import one_line
from mini_engine.memory.trace.tree_calls import TokenStore, insert_slots


@functools.cache
def sglang_swa():
    """SGLang's serving stack, imported once a process and only for a trace with tree
    records that run on UnifiedRadixCache (seconds, and stand-ins for modules a CPU install
    lacks)."""
    return sglang_swa_radix.load()


def unified_tree(records: str):
    """sglang_swa() for a trace with `records` (what they are, for the one-line error)."""
    try:
        return sglang_swa()
    except Exception as err:  # an ImportError, or a dependency failing at import time
        raise SGLangMissing(f"the trace has {records} and SGLang's UnifiedRadixCache does not import "
                            f"here ({one_line(err)}); docs/conform.md") from None


class SWATreeConform:
    def __init__(self, head: dict, tokens: TokenStore):
        self.head, self.ps = head, head["page_size"]
        self.tokens = tokens  # shared with the full tree's checker: the trace's tokens records
        self.calls = 0  # swa tree calls checked
        self.sgt = self.alloc = self.tree = None
        self.bigram = False
        self.nodes: dict[object, object] = {}  # the recorded node id -> SGLang's node
        self.receipts: dict[object, object] = {}  # request -> the inc_lock_ref result it holds
        self.freed: list = []

    def check(self, rec: dict):
        """(field, kvbench's value, SGLang's value) of the first mismatch, or None. A record
        that cannot be run raises ValueError (conform calls the trace malformed); SGLang's
        serving stack failing to import raises SGLangMissing."""
        op = rec["op"]
        if op == "swa_tree":
            self._build(rec)
            return None
        if self.tree is None:
            raise ValueError("an SWA tree call before the trace's swa_tree record")
        self.calls += 1
        try:
            found = getattr(self, "_" + op.removeprefix("swa_"))(rec)
        except (RuntimeError, AssertionError, IndexError) as err:  # SGLang's tree refused the call itself
            found = ("result", "a result", one_line(err))
        if found is None:
            for fld, got in (("full_evictable", self.tree.full_evictable_size()),
                             ("swa_evictable", self.tree.swa_evictable_size())):
                if rec[fld] != got:
                    return f"{fld} size after it", rec[fld], got
        return found

    def _build(self, rec: dict) -> None:
        head = self.head
        if not head.get("swa_num_pages"):
            raise ValueError("an swa_tree record in a trace whose header has no SWA pool")
        self.sgt = sgt = unified_tree("SWA tree records")
        self.bigram = rec.get("bigram", False)
        self.alloc, self.tree = sgt.build(head["num_pages"], head["swa_num_pages"], self.ps, rec["window"],
                                          self.bigram)
        self.nodes, self.receipts, self.freed = {}, {}, []
        for inner in (self.alloc.full_attn_allocator, self.alloc.swa_attn_allocator):
            inner.free = inner.free_page_ids = self.freed.append
            inner.free_segment = lambda index, start_pos=0: self.freed.append(index)

    # -- one method per call ----------------------------------------------------------
    def _key(self, rec: dict):
        return self.sgt.RadixKey(array("q", self.tokens.raw(rec)), is_bigram=self.bigram)

    def _match(self, rec: dict):
        res = self.tree.match_prefix(self.sgt.base.MatchPrefixParams(key=self._key(rec)))
        self.nodes[rec["node"]] = res.last_device_node
        got = self.sgt.matched_len(res)
        if got != rec["matched"]:
            return f"matched (rid {rec['rid']}, {rec['len']} tokens)", rec["matched"], got
        # The branching point (0.5.23's match result carries it; 0.5.18 has none): the
        # page-aligned FULL hit where it runs past the SWA-valid match.
        if "full_hit" in rec and hasattr(res, "swa_branching_seqlen"):
            want = rec["full_hit"] if rec["full_hit"] > rec["matched"] else None
            if res.swa_branching_seqlen != want:
                return f"swa_branching_seqlen (rid {rec['rid']})", want, res.swa_branching_seqlen
        return None

    def _insert(self, rec: dict):
        torch = self.sgt.torch
        full = insert_slots(rec, self.ps)
        swa = insert_slots(rec, self.ps, "swa_")
        n = rec["len"] - 1 if self.bigram and rec["len"] else rec["len"]  # a slot per key position
        if len(full) != n or len(swa) != n:
            raise ValueError(f"swa_insert of a {n}-long key with {len(full)} FULL and {len(swa)} SWA slots")
        value = torch.tensor(full, dtype=torch.int64)
        self.alloc.set_full_to_swa_mapping(value, torch.tensor(swa, dtype=torch.int64))
        res = self.tree.insert(self.sgt.insert_params(self._key(rec), value, rec["prev_prefix_len"],
                                                      rec["swa_evicted_seqlen"]))
        self.nodes[rec["node"]] = res.last_device_node
        if res.prefix_len != rec["cached"]:
            return f"cached (rid {rec['rid']}, {rec['len']} tokens)", rec["cached"], res.prefix_len
        return None

    def _lock(self, rec: dict):
        got = self.tree.inc_lock_ref(self._node(rec))
        self.receipts[rec["rid"]] = got
        return None if got.delta == rec["delta"] else (f"delta (node {rec['node']})", rec["delta"], got.delta)

    def _unlock(self, rec: dict):
        receipt = self.receipts.pop(rec["rid"], None)
        if receipt is None:
            raise ValueError(f"swa_unlock of request {rec['rid']!r}, which holds no lock")
        node = self._node(rec)
        # UnifiedRadixCache's dec_lock_ref result carries no delta: its change of the FULL
        # evictable size is measured around the call instead.
        before = self.tree.full_evictable_size()
        if rec.get("skip_swa", False):  # its SWA part went early (swa_release_swa): the FULL part only
            self.tree.dec_lock_ref(node, self.sgt.unlock_params(node, receipt), skip_swa=True)
        else:
            self.tree.dec_lock_ref(node, self.sgt.unlock_params(node, receipt))
        delta = self.tree.full_evictable_size() - before
        return None if delta == rec["delta"] else (f"delta (node {rec['node']})", rec["delta"], delta)

    def _release_swa(self, rec: dict):
        """SGLang's own early release (UnifiedRadixCache.release_swa, which calls its tree
        core's dec_swa_lock_only) on a TreeLock holding the request's receipt."""
        receipt = self.receipts.get(rec["rid"])
        if receipt is None:
            raise ValueError(f"swa_release_swa of request {rec['rid']!r}, which holds no lock")
        node = self._node(rec)
        self.sgt.release_swa(self.tree, node, self.sgt.unlock_params(node, receipt))
        return None

    def _node(self, rec: dict):
        node = self.nodes.get(rec["node"])
        if node is None:
            raise ValueError(f"node {rec['node']} is not one an earlier swa_match or swa_insert ended on")
        return node

    def _evict(self, rec: dict):
        got = self.tree.evict(self.sgt.base.EvictParams(num_tokens=rec["num_tokens"],
                                                        swa_num_tokens=rec["swa_num_tokens"]))
        for fld, mine, theirs in (("evicted", rec["evicted"], got.num_tokens_evicted),
                                  ("swa_evicted", rec["swa_evicted"], got.swa_num_tokens_evicted)):
            if mine != theirs:
                return (f"{fld} (of {rec['num_tokens']} FULL, {rec['swa_num_tokens']} SWA tokens asked)",
                        mine, theirs)
        return None
