"""What an insert's ``prev_prefix_len`` must be, from the tree calls of a trace.

SGLang passes ``req.kv.cache_protected_len`` as an insert's prev_prefix_len: the length
of the prefix the request holds locked in the tree, the matched prefix at admission,
then the path of the node each checkpoint's insert ended on (where its lock moves).
The insert that splits a finished request's leaf at its prompt (0.5.23's second insert
in cache_finished_req, kvbench's in PrefixCache.checkpoint) passes its own key's length
instead, and moves no lock. Replay (tree_replay.py) and conform (harness/conform/tree.py)
feed this the lengths their own tree gives, so a tampered value is found either way.
"""

from __future__ import annotations


class HeldPrefix:
    def __init__(self) -> None:
        self.held: dict[object, int] = {}  # rid -> the length of the prefix it holds locked
        self.last: tuple[str, object] | None = None  # the previous tree call's (op, rid)

    def reset(self) -> None:
        self.held, self.last = {}, None

    def matched(self, rid, length: int) -> None:
        """A match (an admission looks up; the next one of this rid replaces it)."""
        if rid is not None:
            self.held[rid] = length
        self.last = ("match", rid)

    def inserted(self, rid, key_len: int, path_len: int) -> int | None:
        """The prev_prefix_len this insert of rid must carry (None: its admission is not
        in the trace); path_len: the tree's path to the node it ended on."""
        split = self.last == ("insert", rid)
        expected = key_len if split else self.held.get(rid)
        if not split:
            self.held[rid] = path_len
        self.last = ("insert", rid)
        return expected

    def other(self, op: str) -> None:
        """A lock, unlock or evict."""
        self.last = (op, None)
