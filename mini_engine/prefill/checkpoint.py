"""What a prefill result puts into the radix prefix cache: the committed prefix of a
request still running (SGLang's checkpoint_kv_cache after an extend, cache_unfinished_req
in older versions), and a PD arrival's transferred prompt before it decodes.
"""

from __future__ import annotations

import numpy as np

from mini_engine.request import Request


def checkpoint_prefill(manager, r: Request) -> None:
    """After a prefill chunk of r landed (r still running): the tree takes its committed prefix."""
    prefix = manager.prefix
    if prefix is None or r.kv is None:
        return
    up_to = min(r.kv.committed, r.seq_len)
    if manager.swa is None:
        prefix.checkpoint(r.kv, np.asarray(r.tokens(0, up_to), dtype=np.int64), len(r.prompt), up_to)
        return
    _checkpoint_swa(manager, prefix, r, up_to)


def checkpoint_transfer(manager, r: Request) -> None:
    """A PD arrival's transferred prompt goes into the decode side's tree before it decodes
    (SGLang's process_prebuilt: checkpoint_kv_cache up to kv_committed_len, 0.5.23;
    maybe_cache_unfinished_req, 0.5.18), so arrivals after it can hit it while it runs.
    A prebuilt request computes no SWA window of its own: 0.5.23 clears its match's
    branching point first."""
    if manager.prefix is None:
        return
    getattr(manager.prefix, "branching", {}).pop(r.rid, None)
    checkpoint_prefill(manager, r)


def _checkpoint_swa(manager, prefix, r: Request, up_to: int) -> None:
    """The FULL + SWA tree's checkpoint of an unfinished request (SGLang's
    checkpoint_into_tree with the SWA component, 0.5.23 and 0.5.18).

    Before the insert the request's SWA window moves to the key's end
    (free_out_of_window_slots(req, len(key) - 1), interval 1, on by default), so the
    insert records the moved cursor: a long prompt's SWA pages below the window go
    back right after its prefill. Where the request's match had a branching point past
    what it shares (0.5.23's swa_branching_seqlen: the FULL hit ran past the SWA-valid
    part), the key is cut there, so the shared prefix gets this request's live SWA
    (prepare_for_caching_req); once that insert is made the point is cleared and the
    window moves on to the whole key (cleanup_after_caching_req)."""
    bigram = int(prefix.bigram)  # an EAGLE key is one bigram shorter than its tokens
    point = prefix.branching.get(r.rid)
    branch = point is not None and point > r.kv.protected and point + bigram <= up_to
    cut = point + bigram if branch else up_to
    manager.evict_swa(r.kv, cut - bigram - 1, interval=1)
    prefix.checkpoint(r.kv, np.asarray(r.tokens(0, cut), dtype=np.int64), len(r.prompt), cut)
    if branch:  # the branch is in the tree now
        prefix.branching.pop(r.rid, None)
        manager.evict_swa(r.kv, up_to - bigram - 1, interval=1)
