"""Pinned accounting of seeded runs against the DESIGN.md formulas.

The worked example of DESIGN.md section 1 (ps 16, DFLASH block 16, 37 prompt
tokens) run through the whole engine: the pre-35265 unaligned reservation strands
exactly as the formula says and SGLang's segment free returns every page; only
the floor-free what-if leaks; every writer aligned does neither.
"""

from __future__ import annotations

import pytest

from harness.run.runner import run_config

# Four requests of 37 prompt tokens, 11 output tokens, 5 accepted per verify:
# prefill extent 37 (3 pages, 11 stranded each); verify 1: nxt = 37 + 32 = 69
# (5 pages, 11 stranded); verify 2: nxt = max(69, 42 + 32) = 74, done, released
# with extent 74: SGLang's segment free returns all 5 pages; a floor free (the
# floor-free what-if) returns 74 // 16 = 4 and the fifth leaks.
# The synchronous loop (--overlap off); test_overlap.py runs the overlapped one. The chunk
# cache: these pin each request's own pages; under the radix tree a request's page-aligned
# prompt moves to the tree after its prefill (test_prefix_cache.py).
DFLASH = dict(spec="dflash", page_size=16, block_size=16, accept_len=5, workload="fixed",
              num_requests=4, input_len=37, output_len=11, pool_tokens=4096, overlap="off", prefix_cache="chunk")


@pytest.mark.parametrize("profile, free, leaked", [("sglang-pre-35265", None, 0), ("floor-free", None, 4),
                                                  ("sglang-pre-35265", "dedup", 0)])
def test_unaligned_dflash_worked_example(profile, free, leaked):
    row = run_config(dict(DFLASH, profile=profile, free_policy=free))
    m = row["metrics"]
    assert m["steps"] == 3 and m["output_tokens"] == 44
    assert row["series"]["stranded"] == [44, 44, 0]
    assert m["peak_stranded_slots"] == 44 and m["stranded_slots_sum"] == 88
    assert m["peak_stranded_slots_prefill"] == 44 and m["peak_stranded_slots_spec"] == 44
    assert m["leaked_pages"] == leaked == m["predicted_leaked_pages"]
    assert "K1" not in row["violations"]  # exact writers strand; K1 holds aligned writers only
    assert row["status"] == ("violated" if leaked else "ok")
    if free == "dedup" or profile == "sglang-pre-35265":
        # one unique() per release: the dedup policy's, or 0.5.18's unique-row free of
        # the committed row (sglang-pre-35265's default)
        assert m["syncs"] == 4
        assert m["syncs_per_step"] == pytest.approx(4 / 3)
    else:
        assert m["syncs"] == 0
    if leaked:
        assert row["violations"]["K8"] >= 1  # the leak is caught (K8 conservation)


def test_aligned_dflash_worked_example():
    row = run_config(dict(DFLASH, profile="host-aligned"))
    m = row["metrics"]
    # Aligned: prefill 48, verify 1 nxt = ceil_ps(69) = 80, verify 2 nxt = max(80, ceil_ps(74)) = 80.
    assert row["series"]["held"] == [4 * 3, 4 * 5, 0]
    assert row["series"]["reserved"] == [4 * (48 - 37), 4 * (80 - 42), 0]
    assert m["peak_stranded_slots"] == 0 and m["leaked_pages"] == 0 == m["predicted_leaked_pages"]
    assert row["status"] == "ok" and row["violations"] == {}
    assert m["tau"] == 5.0 and m["acceptance_rate"] == pytest.approx(4 / 15)


def test_tau_counts_what_the_verify_accepted():
    # 10 outputs = 1 from prefill + 5 + 4: the second verify accepted 5 (bonus included)
    # even though the request needed only 4 of them; tau measures the verify.
    m = run_config(dict(DFLASH, output_len=10))["metrics"]
    assert m["output_tokens"] == 40 and m["tau"] == 5.0
    assert m["acceptance_rate"] == pytest.approx(4 / 15)


def test_unaligned_eagle_chain():
    # EAGLE topk 1, steps 3, ndt 4: W = 4, reserve 8. Prefill extent 37 (11 stranded);
    # verify 1: nxt = 45 (3 stranded), commit 4 -> 41; verify 2: nxt = 49, done; 49 % 16 != 0
    # leaks under a floor free. No SGLang version de-aligned EAGLE: this is the formula, by knobs.
    row = run_config(dict(spec="eagle", page_size=16, topk=1, steps=3, num_draft_tokens=4, accept_len=4,
                          workload="fixed", num_requests=2, input_len=37, output_len=9,
                          profile="floor-free", align="none", pool_tokens=4096))
    assert row["series"]["stranded"] == [22, 6, 0]
    assert row["metrics"]["leaked_pages"] == 2 == row["metrics"]["predicted_leaked_pages"]


def test_eagle_tree_reserve():
    # topk 4, steps 3, ndt 8, ps 16: W = 2 * 16 * 4 = 128, reserve 256; committed 37 -> 304 (aligned).
    # The synchronous loop; under overlap the last result lands one step later (test_overlap.py).
    row = run_config(dict(spec="eagle", page_size=16, topk=4, steps=3, num_draft_tokens=8, accept_len=1,
                          workload="fixed", num_requests=1, input_len=37, output_len=2, pool_tokens=4096,
                          overlap="off", prefix_cache="chunk"))
    assert row["series"]["held"] == [3, 0]  # prefill records 37 exactly (3 pages); the verify finishes it
    row = run_config(dict(spec="eagle", page_size=16, topk=4, steps=3, num_draft_tokens=8, accept_len=1,
                          workload="fixed", num_requests=1, input_len=37, output_len=3, pool_tokens=4096,
                          overlap="off", prefix_cache="chunk"))
    assert row["series"]["held"] == [3, 304 // 16, 0]
    assert row["series"]["reserved"] == [0, 304 - 38, 0]


@pytest.mark.parametrize("window", [None, 48])
@pytest.mark.parametrize("ps", [1, 16, 64])
def test_unaligned_seeded_workload_matches_formula(ps, window):
    """A seeded uniform workload: measured leaks equal the DESIGN.md count of unaligned releases."""
    base = dict(spec="dflash", page_size=ps, block_size=8, workload="pd", pd_fraction=0.5, num_requests=24,
                input_len=300, output_len=120, min_len=10, pool_tokens=16384, seed=7, policy="unaligned",
                window=window)
    host = run_config(dict(base, free_policy="floor"))["metrics"]
    dedup = run_config(dict(base, free_policy="dedup"))["metrics"]
    assert host["leaked_pages"] == host["predicted_leaked_pages"]
    assert host["leaked_swa_pages"] == host["predicted_leaked_swa_pages"]
    assert host["leaked_swa_pages"] == (host["leaked_pages"] if window else 0)
    assert dedup["leaked_pages"] == 0 == dedup["predicted_leaked_pages"] == dedup["leaked_swa_pages"]
    if ps == 1:
        assert host["leaked_pages"] == 0 and host["stranded_slots_sum"] == 0
    else:
        assert host["leaked_pages"] > 0 and dedup["stranded_slots_sum"] > 0
        assert host["predicted_leaked_pages"] <= host["releases"]
