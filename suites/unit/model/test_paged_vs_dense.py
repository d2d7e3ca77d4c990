"""The paged forward equals the dense reference forward.

A hypothesis state machine drives the real KVManager: requests are admitted,
prefilled in random chunks, decoded one token at a time (the next token is the
model's argmax), batched together in random subsets, retracted (released, then
re-admitted and re-prefilled from position 0 into whatever pages come next) and
finished. After every forward the hidden states of the positions it wrote must
equal a dense forward (contiguous KV, full recompute, separate attention code)
over the same tokens (a batch of one position each takes the decode fast path,
pages read through the backend's device mirror of request-to-token), for ps in {1, 16, 64}, with sliding-window layers whose KV
lives in the SWA pool and is evicted by the window rule.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from mini_engine.model.attn_meta import build_meta, decode_meta
from mini_engine.model.mirror import DeviceMirror
from mini_engine.forward.step_batch import Layout, MirrorFeed
from mini_engine.model.transformer import KVCache

from .conftest import MACHINE_SETTINGS, manager, tiny

MAX_LEN = 72
MAX_REQS = 4
_models: dict = {}


def model_for(pattern: str, window: int):
    if (pattern, window) not in _models:
        _models[(pattern, window)] = tiny(pattern, window)
    return _models[(pattern, window)]


def machine(ps: int):
    class PagedVsDense(RuleBasedStateMachine):
        @initialize(data=st.data())
        def setup(self, data):
            pattern = data.draw(st.sampled_from(["1:1", "3:1", "all-local", "all-global"]), label="pattern")
            window = data.draw(st.sampled_from([3, 8, 20]), label="window")
            policy = data.draw(st.sampled_from(["aligned", "unaligned"]), label="policy")
            self.model = model_for(pattern, window)
            swa = pattern != "all-global"
            width = -(-MAX_LEN // ps) * ps + ps
            self.num_pages = MAX_REQS * (width // ps)
            self.mgr = manager(ps, self.num_pages, max_reqs=MAX_REQS, row_width=width,
                               window=window if swa else None, policy=policy)
            self.mirror = DeviceMirror(Layout.of(self.mgr.mem), torch.device("cpu"))
            self.feed = MirrorFeed(self.mgr)
            slots = (self.num_pages + 1) * ps
            self.cache = KVCache.allocate(self.model.cfg, slots, slots if swa else 0, "cpu")
            self.reqs: dict[int, dict] = {}
            self.next_rid = 0
            self.checked = 0

        @precondition(lambda self: len(self.reqs) < 6)
        @rule(length=st.integers(1, 40), seed=st.integers(0, 2**16))
        def add(self, length, seed):
            toks = np.random.default_rng(seed).integers(0, self.model.cfg.vocab_size, length).tolist()
            self.reqs[self.next_rid] = {"tokens": toks, "state": None, "done": 0}
            self.next_rid += 1

        @precondition(lambda self: self.reqs)
        @rule(data=st.data())
        def step(self, data):
            rids = data.draw(st.lists(st.sampled_from(sorted(self.reqs)), min_size=1, max_size=4, unique=True))
            batch = []
            for rid in rids:
                r = self.reqs[rid]
                if r["state"] is None:
                    r["state"] = self.mgr.admit(rid)
                    if r["state"] is None:
                        continue
                    r["done"] = 0
                rem = len(r["tokens"]) - r["done"]
                n = data.draw(st.integers(1, min(rem, 24)), label="chunk")
                if not self.mgr.extend(r["state"], r["done"] + n):
                    continue
                batch.append((r, n))
            if batch:
                self._forward(batch)

        @precondition(lambda self: any(r["state"] is not None and r["done"] < len(r["tokens"])
                                       for r in self.reqs.values()))
        @rule(data=st.data())
        def decode(self, data):
            """One position for each of a subset of the live requests: the decode fast path."""
            live = sorted(rid for rid, r in self.reqs.items() if r["state"] is not None and r["done"] < len(r["tokens"]))
            rids = data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=4, unique=True))
            batch = [(self.reqs[rid], 1) for rid in rids if self.mgr.extend(self.reqs[rid]["state"],
                                                                            self.reqs[rid]["done"] + 1)]
            if batch:
                self._forward(batch)

        @precondition(lambda self: any(r["state"] is not None for r in self.reqs.values()))
        @rule(data=st.data())
        def retract(self, data):
            live = sorted(rid for rid, r in self.reqs.items() if r["state"] is not None)
            r = self.reqs[data.draw(st.sampled_from(live))]
            self.mgr.release(r["state"])
            r["state"], r["done"] = None, 0  # its tokens stay: it is re-prefilled later

        @precondition(lambda self: self.reqs)
        @rule(data=st.data())
        def finish(self, data):
            rid = data.draw(st.sampled_from(sorted(self.reqs)))
            r = self.reqs.pop(rid)
            if r["state"] is not None:
                self.mgr.release(r["state"])

        def _forward(self, batch):
            rows, lens, ids = [], [], []
            for r, n in batch:
                end = r["done"] + n
                rows.append(self.mgr.slots(r["state"], 0, end))
                lens.append(n)
                ids += r["tokens"][r["done"] : end]
            swa = [self.mgr.swa.translate(x) for x in rows] if self.mgr.swa is not None else None
            if all(n == 1 for _, n in batch):  # plain decode: pages read from the device mirror
                self.mirror.apply(self.feed.drain())
                meta = decode_meta(self.mirror.table, np.array([r["state"].row for r, _ in batch]),
                                   np.array([len(x) for x in rows]), self.mgr.mem.page_size, self.mirror.swa_map)
            else:
                meta = build_meta(rows, lens, None, "cpu", swa_rows=swa)
            h = self.model(torch.tensor(ids), meta.q_pos, meta, self.cache)
            off = 0
            for (r, n) in batch:
                got = h[off : off + n]
                off += n
                end = r["done"] + n
                want = self.model.dense_forward(torch.tensor(r["tokens"][:end]))[r["done"] : end]
                torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
                self.checked += n
                self.mgr.commit(r["state"], n)
                self.mgr.evict_swa(r["state"])
                r["done"] = end
                if end == len(r["tokens"]) and end < MAX_LEN:
                    r["tokens"].append(int(self.model.logits(got[-1:]).argmax()))

        @invariant()
        def pools_consistent(self):
            if hasattr(self, "mgr") and self.mgr.aligned:
                assert self.mgr.check() == []

        def teardown(self):
            if not hasattr(self, "mgr"):
                return
            for r in self.reqs.values():
                if r["state"] is not None:
                    self.mgr.release(r["state"])
            if self.mgr.aligned:
                assert self.mgr.leaked_pages() == 0

    return PagedVsDense


@pytest.mark.parametrize("ps", [1, 16, 64])
def test_paged_forward_equals_dense(ps):
    run_state_machine_as_test(machine(ps), settings=MACHINE_SETTINGS)


def test_paged_forward_detects_a_wrong_slot():
    """The comparison can fail: reading one position through a wrong slot changes the output."""
    model = model_for("1:1", 8)
    mgr = manager(16, 16, window=8)
    s = mgr.admit(0)
    toks = list(range(1, 30))
    mgr.extend(s, len(toks))
    cache = KVCache.allocate(model.cfg, 17 * 16, 17 * 16, "cpu")
    rows = mgr.slots(s, 0, 29)
    meta = build_meta([rows[:20]], [20], None, "cpu", swa_rows=[mgr.swa.translate(rows[:20])])
    model(torch.tensor(toks[:20]), meta.q_pos, meta, cache)
    bad = rows.copy()
    bad[25] = bad[3]  # position 25 written over position 3's slot
    meta = build_meta([bad], [9], None, "cpu", swa_rows=[mgr.swa.translate(bad)])
    h = model(torch.tensor(toks[20:]), meta.q_pos, meta, cache)
    want = model.dense_forward(torch.tensor(toks))[20:]
    assert not torch.allclose(h, want, atol=1e-4, rtol=1e-4)
