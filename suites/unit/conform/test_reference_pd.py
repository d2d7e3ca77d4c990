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
    """pop_preallocated reads running_batch.reqs before the next batch filters out the
    requests the last result finished: each still counts as active (512 reserved tokens)
    though its KV is freed, so SGLang admits one request less after a finish (docs/reference.md)."""
    c = compare({**PD, "num_requests": 16, "pool_tokens": 4096, "page_size": 16})
    assert c.first_step == (3, "running", 6, 5), describe(c)


def test_plain_pd_arrivals_equal_with_overlap_off(reference):
    c = compare({**PLAIN, "overlap": False})
    assert c.equal, describe(c)


def test_the_decode_loop_plans_a_request_its_inflight_result_finishes(reference):
    """event_loop_overlap_disagg_decode leaves enable_skip_finishing_decode off (only
    event_loop_overlap turns it on), so plain decoding's last result is followed by one
    more batch: one trailing step more than the mini engine's 0.5.23 rule, every common
    step equal (docs/reference.md)."""
    c = compare({**PLAIN, "overlap": True})
    assert c.first_step is None, describe(c)
    assert c.steps[1] == c.steps[0] + 1, describe(c)


def test_pd_workloads_the_decode_side_cannot_run_are_refused():
    for extra, what in (({"pd_fraction": 0.5}, "--pd-fraction below 1"), ({"window": 32}, "--workload pd with --window"),
                        ({"pd_radix": True}, "--pd-radix")):
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
