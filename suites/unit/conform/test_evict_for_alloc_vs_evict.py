"""SGLang's scheduler evicts with ``evict_for_alloc``; kvbench's conform replays ``evict``.

An allocation short of room asks the tree through ``evict_for_alloc``
(``evict_to_free_tokens``, the PD prealloc's ``reclaim_for_prealloc``): the shortfalls
become targets on the pools' available sizes, so frees made along the way (a FULL leaf
evicted frees its SWA slots too) count toward them. kvbench's tree (memory/tree/swa_radix.py)
and conform (harness/conform/swa_tree.py) run ``evict``, whose targets are the tokens
evicted per component. This drives two copies of SGLang 0.5.23's own UnifiedRadixCache
(FULL + SWA, harness/conform/sglang_swa_radix.py) with the same requests (match, lock, allocate,
free the SWA behind a cursor, insert, unlock) and, for each joint shortfall, calls
``evict`` on one and ``evict_for_alloc`` on the other: the tokens evicted per pool and both
pools' available sizes must agree, so replaying ``evict`` checks what SGLang runs.
"""

from __future__ import annotations

from array import array

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st



@pytest.fixture(scope="module")
def sgswa(sg, request):
    if sg.version == "0.5.18":
        pytest.skip("0.5.18's tree has no evict_for_alloc: its scheduler calls evict")
    return request.getfixturevalue("sg_serving")  # or a skip (a failure when required)


def _alloc(sgt, alloc, ps: int, n: int):
    torch = sgt.torch
    if ps == 1:
        return alloc.alloc(n)
    z, seq = torch.zeros(1, dtype=torch.int64), torch.tensor([n])
    return alloc.alloc_extend(z, z.clone(), seq, seq.clone(), torch.tensor([-1]), n)


def _request(sgt, pair, ps: int, tokens: list[int], cursor: float) -> None:
    """One request on both trees alike: match, lock, allocate the rest, the window frees the
    SWA behind the cursor, insert, unlock."""
    key = sgt.RadixKey(array("q", tokens))
    aligned = len(tokens) // ps * ps
    held = []
    for alloc, tree in pair:
        res = tree.match_prefix(sgt.base.MatchPrefixParams(key=key))
        lock = tree.inc_lock_ref(res.last_device_node)
        m = sgt.matched_len(res)
        got = _alloc(sgt, alloc, ps, aligned - m) if aligned > m else None
        held.append((res, lock, m, got))
    assert len({(m, got is None) for _, _, m, got in held}) == 1  # the copies agree so far
    m = held[0][2]
    evicted = m + int(cursor * (aligned - m)) // ps * ps
    for (alloc, tree), (res, lock, _, got) in zip(pair, held):
        node = res.last_device_node
        if got is not None:
            prefix = tree.path_device_indices(node)[:m].to(sgt.torch.int64)
            row = sgt.torch.cat([prefix, got])
            if evicted > m:
                alloc.free_swa_segment(row[m:evicted], start_pos=0)
            tree.insert(sgt.insert_params(key, row, m, evicted))
        tree.dec_lock_ref(node, sgt.unlock_params(node, lock))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ps=st.sampled_from([1, 2, 4]), window=st.sampled_from([1, 3, 8]), seed=st.integers(0, 2**16),
       plan=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 95), st.floats(0, 1),
                               st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=20))
def test_evict_for_alloc_frees_what_evict_frees(sgswa, ps, window, seed, plan):
    sgt = sgswa
    pair = [sgt.build(48, 24, ps, window), sgt.build(48, 24, ps, window)]
    rng = np.random.default_rng(seed)
    root = rng.integers(1, 50, 96).tolist()
    seqs = [root] + [root[:c] + rng.integers(50, 100, 96 - c).tolist() for c in rng.integers(0, 80, 2)]
    for b, n, cursor, full, swa in plan:
        _request(sgt, pair, ps, seqs[b][:n], cursor)
        (a_alloc, a), (b_alloc, b_tree) = pair
        got_a = a.evict(sgt.base.EvictParams(num_tokens=full, swa_num_tokens=swa))
        got_b = b_tree.evict_for_alloc(sgt.base.EvictParams(num_tokens=full, swa_num_tokens=swa))
        assert (got_a.num_tokens_evicted, got_a.swa_num_tokens_evicted) == \
            (got_b.num_tokens_evicted, got_b.swa_num_tokens_evicted)
        assert (a_alloc.full_available_size(), a_alloc.swa_available_size()) == \
            (b_alloc.full_available_size(), b_alloc.swa_available_size())
