"""The prefix tree's calls in the allocation trace (DESIGN.md section 5, trace version 2).

PrefixCache (memory/tree/prefix.py) makes five calls on its RadixCache: match, insert,
inc_lock_ref (lock), dec_lock_ref (unlock) and evict. With a trace open, each is one
record carrying its arguments and what kvbench got (matched or cached length, the node
it ended on, the lock delta, the evicted pages) and the tree's evictable and protected
sizes after it, so a replay can run the same calls on another tree and compare. The
waiting-prefix refresh's walks (SGLang's touch_prefix) are match records of the whole
key marked ``touch``: a replay runs them as the matches they are.

Keys are token ids, and a request's are looked up and inserted again and again as it
grows: a ``tokens`` record gives a request's ids once (only what the trace has not had
yet, from position ``at``), and a match or insert names the request and how many of
its raw tokens make the key. Requests that share a prompt prefix (a system prompt, the
next turn of a session) share it in the trace too: a request's first ``tokens`` record
may take its first ``at`` ids ``from`` an earlier request: of the last ``PEERS`` that
began with the same ``START`` ids, the one that shares the most. An EAGLE run keys the tree by bigrams; its ``tree`` record
(written once, when the tree is built) says so, and the replay builds the bigram keys
from the raw ids as the engine did. An insert's slots are written as page ids when they
are whole pages (always, on the paged allocator), else slot by slot.

The SWA-aware tree (tree/swa_prefix.py, hybrid SWA models) writes its calls through the same
writer (``swa_tree_trace``): its records are the ``swa_`` ops (SWA_TREE_OPS), so no
reader can take them for the full tree's, they share the ``tokens`` records, and each
carries the FULL and SWA evictable sizes after it instead of the full tree's two.

The reading side is here too (TokenStore, insert_slots), shared by kvbench's replay
(replay/tree_replay.py) and ``kvbench conform`` (harness/conform/tree.py, conform_swa_tree.py).
"""

from __future__ import annotations

import numpy as np

# The tree's records, in the order a run first writes them.
TREE_OPS = ("tree", "tokens", "match", "insert", "lock", "unlock", "evict")
# The SWA-aware tree's (their token ids are the shared ``tokens`` records).
SWA_TREE_OPS = ("swa_tree", "swa_match", "swa_insert", "swa_lock", "swa_unlock", "swa_evict", "swa_release_swa")
START = 16  # leading ids that pick the earlier requests a new one may share its prefix with
PEERS = 8  # how many of those are compared (the latest)


def tree_key(tokens, bigram: bool) -> np.ndarray:
    """The tree key of raw tokens: the tokens, or (EAGLE) one bigram per adjacent pair."""
    tokens = np.asarray(tokens, dtype=np.int64)
    if not bigram:
        return tokens
    return (tokens[:-1] << 32) | tokens[1:] if len(tokens) > 1 else np.empty(0, np.int64)


def raw_len(key_len: int, bigram: bool) -> int:
    """How many raw tokens make a key of key_len (a bigram key is one shorter)."""
    return key_len + 1 if bigram and key_len else key_len


class TreeTrace:
    """Writes a PrefixCache's tree calls into an open TraceWriter.

    head: the record that says the tree is built (the full tree's ``tree``); after: the
    tree's sizes each call's record ends with (the full tree's evictable and protected)."""

    def __init__(self, trace, tree, bigram: bool, *, head: dict | None = None, after=None):
        self.trace, self.tree, self.ps = trace, tree, tree.ps
        self._after = after or (lambda: {"evictable": tree.evictable_size, "protected": tree.protected_size})
        self._known: dict = {}  # rid -> the token ids the trace holds for it
        self._by_start: dict[bytes, list] = {}  # the first START ids -> the last PEERS rids that began so
        trace.write(head or {"op": "tree", "bigram": bigram})

    def write(self, op: str, fields: dict, raw=None) -> None:
        """One call's record. raw: the request's tokens, of which fields["len"] make the key;
        fields["slots"], fields["swa_slots"]: an insert's slots (written as pages when they
        are whole pages)."""
        rec = {"op": op}
        if "rid" in fields:
            rid = fields["rid"]
            rec["rid"] = rid if isinstance(rid, (int, str)) and not isinstance(rid, bool) else str(rid)
        if raw is not None:
            self._tokens(rec["rid"], np.asarray(raw, dtype=np.int64)[:fields["len"]])
        for k, v in fields.items():
            if k in ("slots", "swa_slots"):
                prefix = k.removesuffix("slots")
                rec.update({prefix + n: x for n, x in _encode_slots(np.asarray(v, dtype=np.int64), self.ps).items()})
            elif k != "rid":
                rec[k] = v
        rec.update(self._after())
        self.trace.write(rec)

    def _tokens(self, rid, raw: np.ndarray) -> None:
        """A tokens record with what the trace does not hold yet of rid's raw tokens."""
        known, source = self._known.get(rid), None
        if known is not None:
            at = _common(known, raw)
            if at >= len(raw):
                return  # the trace has them (raw is a prefix of what it holds)
        elif not len(raw):
            return
        else:  # a new request: from the earlier one that shares the most, if any
            peers = self._by_start.setdefault(raw[:START].tobytes(), [])
            at, source = max(((_common(self._known[p], raw), p) for p in peers), key=lambda s: s[0],
                             default=(0, None))
            peers[:] = (peers + [rid])[-PEERS:]
        rec = {"op": "tokens", "rid": rid, "at": at, "ids": raw[at:].tolist()}
        if source is not None and at:
            rec["from"] = source
        self.trace.write(rec)
        self._known[rid] = raw.copy()  # the replay keeps [0, at) (of "from" if named) and appends the rest


def swa_tree_trace(trace, tree, window: int, bigram: bool = False) -> TreeTrace:
    """The writer of an SWAPrefixCache's calls (memory/tree/swa_prefix.py): ``swa_tree`` first
    (with the window a replay builds its tree with, and ``bigram`` for an EAGLE run's
    keys), then each call with both pools' evictable sizes after it."""
    return TreeTrace(trace, tree, bigram, head={"op": "swa_tree", "window": window, "bigram": bigram},
                     after=lambda: {"full_evictable": tree.full_evictable, "swa_evictable": tree.swa_evictable})


def _common(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def _encode_slots(slots: np.ndarray, ps: int) -> dict:
    """Whole pages as page ids; a page of slot 0 (no slot: an SWA slot the window freed,
    swa_slots) as page 0, which is never handed out."""
    if ps > 1 and len(slots) % ps == 0:
        pages = slots[::ps]
        whole = slots.reshape(-1, ps) == pages[:, None] + np.arange(ps)
        none = (slots.reshape(-1, ps) == 0).all(axis=1) & (pages == 0)
        if (pages % ps == 0).all() and (whole.all(axis=1) | none).all():
            return {"pages": (pages // ps).tolist()}
    return {"slots": slots.tolist()}


def insert_slots(rec: dict, ps: int, prefix: str = "") -> np.ndarray:
    """The slots of an insert record (its pages, expanded to every slot of each; page 0
    to slot 0s). prefix "swa_": the SWA slots of an swa_insert."""
    if prefix + "slots" in rec:
        return np.asarray(rec[prefix + "slots"], dtype=np.int64)
    pages = np.asarray(rec[prefix + "pages"], dtype=np.int64)
    return np.where(pages[:, None] > 0, pages[:, None] * ps + np.arange(ps), 0).reshape(-1)


def evicted_pages(slots, ps: int) -> list[int]:
    """The pages of evicted leaves' slots, in eviction order (every leaf is whole pages)."""
    return (np.asarray(slots, dtype=np.int64)[::ps] // ps).tolist()


class TokenStore:
    """Each request's token ids, rebuilt from the tokens records (ValueError: malformed)."""

    def __init__(self):
        self._ids: dict = {}

    def add(self, rec: dict) -> None:
        base = rec.get("from", rec["rid"])
        have = self._ids.get(base, [])
        if rec["at"] > len(have):
            raise ValueError(f"tokens of rid {rec['rid']!r} at {rec['at']}, past the {len(have)} known of "
                             f"rid {base!r}")
        self._ids[rec["rid"]] = have[:rec["at"]] + rec["ids"]

    def raw(self, rec: dict) -> list[int]:
        """The first rec["len"] token ids of rec["rid"]."""
        have = self._ids.get(rec["rid"], [])
        if rec["len"] > len(have):
            raise ValueError(f"len {rec['len']} but the trace gave rid {rec['rid']!r} {len(have)} token ids")
        return have[:rec["len"]]
