"""The PD decode side on the reference engine (harness/reference/pd_decode.py) against the mini engine.

SGLang's own DecodePreallocQueue (the decode prealloc budget, _pre_alloc), its
DecodeTransferQueue (SGLang's fake transfer: the KV lands on the first poll) and the
decode loop's prebuilt batch, driven in event_loop_(overlap_)disagg_decode's order. The
invariants suite's PD workload (10 DFLASH arrivals, ps 16) agrees on every step; where
the mini engine lacks one of the decode loop's rules the reference names the step
(docs/reference.md). One SGLang import for the module (the serving stack fixture).
"""

from __future__ import annotations

import pytest

from harness.cli import main
from harness.core.run_spec import RunSpec
from harness.reference.compare import compare, describe
from harness.reference.run import UnsupportedByReference, check_supported

# The invariants suite's PD include: every request arrives prefilled.
PD = {"workload": "pd", "num_requests": 10, "input_len": 128, "min_len": 16, "output_len": 64, "seed": 11,
      "pool_tokens": 16384, "spec": "dflash", "block_size": 16}
PLAIN = {k: v for k, v in PD.items() if k != "block_size"} | {"spec": "none", "page_size": 16}


@pytest.mark.parametrize("ps", [1, 16])
@pytest.mark.parametrize("overlap", [False, True])
def test_dflash_pd_arrivals_equal_on_every_step(reference, ps, overlap):
    c = compare({**PD, "page_size": ps, "overlap": overlap})
    assert c.equal, describe(c)
    assert c.steps[0] == c.steps[1] > 1


def test_a_finished_request_still_counts_in_the_next_prealloc_budget(reference):
    """Regression for the mini engine's decode prealloc budget: pop_preallocated reads
    running_batch.reqs before the next batch filters out the requests the last result
    finished, so each still counts as active (512 reserved tokens) though its KV is freed.
    Without the rule (pd_prealloc.unfiltered) the mini engine admitted one request more at
    step 3 (running 6 against 5; 26 steps against 28, peak held 55 against 50)."""
    c = compare({**PD, "num_requests": 16, "pool_tokens": 4096, "page_size": 16})
    assert c.equal, describe(c)
    assert c.steps == (28, 28)


@pytest.mark.parametrize("extra", [
    {"num_requests": 12, "input_len": 200, "min_len": 100, "output_len": 30, "pool_tokens": 2048, "page_size": 1,
     "arrival_gap": 1},
    {"num_requests": 12, "input_len": 200, "min_len": 100, "output_len": 30, "pool_tokens": 2048, "page_size": 64},
    {"num_requests": 10, "input_len": 64, "min_len": 16, "output_len": 8, "pool_tokens": 1536, "overlap": False,
     "spec": "none", "block_size": None},
])
def test_held_out_pd_workloads_under_the_reservation_equal(reference, extra):
    """Workloads of the same kind held out of the suite: every running request finishing at
    once (SGLang idles an iteration, its next pass budgets without them), a finished
    request among running ones, plain decoding."""
    c = compare({k: v for k, v in {**PD, **extra}.items() if v is not None})
    assert c.equal, describe(c)


def test_plain_pd_arrivals_equal_with_overlap_off(reference):
    c = compare({**PLAIN, "overlap": False})
    assert c.equal, describe(c)


def test_the_decode_loop_plans_a_request_its_inflight_result_finishes(reference):
    """Regression: event_loop_overlap_disagg_decode leaves enable_skip_finishing_decode off
    (only event_loop_overlap turns it on), so a request one output short is planned once
    more and its result lands a step later. The mini engine's decode node follows it; with
    0.5.23's normal-loop rule it stopped a step early (61 steps against 62)."""
    c = compare({**PLAIN, "overlap": True})
    assert c.equal, describe(c)
    assert c.steps == (62, 62)


@pytest.mark.parametrize("ps", [1, 16])
def test_decode_radix_hits_equal_on_every_step(reference, ps):
    """The decode radix cache (--pd-radix): arrivals 20 steps apart over a shared 200-token
    prompt hit the finished ones' prompts in the decode node's tree."""
    c = compare({**PD, "num_requests": 6, "arrival_gap": 20, "shared_prefix": 200, "pd_radix": True, "page_size": ps})
    assert c.equal, describe(c)
    assert c.theirs["prefix_hit_tokens"] > 0


@pytest.mark.parametrize("ps", [1, 16])
def test_hybrid_swa_decode_side_equal_on_every_step(reference, ps):
    """A hybrid SWA model's decode node, held out of the suite (window 64, the reservation
    binding, staggered arrivals): at ps 16 SGLang's SWA tail prealloc (_uses_swa_tail_prealloc),
    at ps 1 the full side read against the smaller pool."""
    c = compare({**PD, "window": 64, "num_requests": 12, "pool_tokens": 4096, "arrival_gap": 2, "page_size": ps})
    assert c.equal, describe(c)
    assert c.theirs["peak_swa_pages_held"] > 0


def test_pd_workloads_the_decode_side_cannot_run_are_refused():
    for extra, what in (({"pd_fraction": 0.5}, "--pd-fraction below 1"), ({"window": 32, "swa_ratio": 0.2}, "--swa-ratio")):
        spec = RunSpec.parse({**PD, **extra})
        with pytest.raises(UnsupportedByReference, match=what):
            check_supported(spec.engine, spec.workload.to_dict(), "0.5.23")
    spec = RunSpec.parse({**PD, "profile": "sglang-pre-35265"})
    with pytest.raises(UnsupportedByReference, match="--workload pd on SGLang 0.5.18"):
        check_supported(spec.engine, spec.workload.to_dict(), "0.5.18")


def test_conform_filter_selects_a_suites_configs(capsys):
    assert main(["conform", "--engine", "--suite", "invariants", "--filter", "workload=nothing"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "selects no config of suite invariants" in err[0]
    assert main(["conform", "--engine", "--filter", "workload=pd"]) == 2
    assert "--filter goes with --engine --suite" in capsys.readouterr().err
