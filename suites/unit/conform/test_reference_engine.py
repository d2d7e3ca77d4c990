"""The reference engine (SGLang 0.5.23's own scheduler loop, harness/reference/) against the mini engine.

Where the mini engine already follows SGLang's loop (overlap off; overlap on without a
shared prefix; retraction under a tight pool) the two agree on every total and every
step. Where docs/findings say they differ (D0: under overlap a prefill's result lands
one iteration late in SGLang, so the next prefill batch matches nothing the first
computed), the reference gives SGLang's own figures and ``compare`` names the first
differing step. One SGLang import for the module (the serving stack fixture).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness import ROOT
from harness.cli import main
from harness.core.run_spec import RunSpec
from harness.reference import loader
from harness.reference.compare import Comparison, compare, describe
from harness.reference.run import UnsupportedByReference, check_supported, run_reference

SMALL = {"workload": "uniform", "num_requests": 8, "input_len": 64, "min_len": 16, "output_len": 16,
         "pool_tokens": 8192}
# fidelity review D0's first workload: 32 requests, 4 groups of a 256-token shared prefix, ps 16.
GROUPS = {"workload": "uniform", "num_requests": 32, "input_len": 256, "min_len": 32, "output_len": 64,
          "shared_prefix": 256, "prefix_groups": 4, "pool_tokens": 65536}


@pytest.mark.parametrize("overlap", [False, True])
def test_plain_decoding_equal_on_every_step(reference, overlap):
    c = compare({**SMALL, "overlap": overlap})
    assert c.equal, describe(c)
    assert c.steps == ((16, 16) if not overlap else (17, 17))


def test_retraction_under_a_tight_pool_equal(reference):
    c = compare({"workload": "uniform", "num_requests": 32, "input_len": 256, "min_len": 32, "output_len": 64,
                 "pool_tokens": 2048, "overlap": False, "max_running": 16})
    assert c.equal, describe(c)


def test_sessions_equal_on_every_step_with_overlap_off(reference):
    # A next turn (prompt + outputs + new tokens) arrives the step after its predecessor finishes.
    c = compare({"workload": "fixed", "num_requests": 4, "input_len": 32, "output_len": 40, "shared_prefix": 96,
                 "prefix_groups": 2, "turns": 3, "overlap": False})
    assert c.equal, describe(c)
    assert c.steps == (120, 120)


def test_shared_prefix_totals_equal_with_overlap_off(reference):
    c = compare({**GROUPS, "overlap": False})
    assert c.totals == [], describe(c)


def _reported(c) -> None:
    """compare's report is faithful: a total is listed, with both values, exactly when the
    engines' figures differ, and the verdict follows the totals and the steps."""
    text = describe(c)
    for m in c.mine:
        differs = c.mine[m] != c.theirs[m]
        assert ((m, c.mine[m], c.theirs[m]) in c.totals) == differs, m
        assert (f"{m}: mini {c.mine[m]}, sglang {c.theirs[m]}" in text) == differs, m
    assert c.equal == (not c.totals and c.first_step is None and c.steps[0] == c.steps[1])
    if c.first_step is not None:
        assert f"first differing step {c.first_step[0]}: {c.first_step[1]}" in text


def test_overlap_prefill_lands_late_in_sglang(reference):
    """D0: SGLang's second prefill batch is formed before the first's result checkpoints
    the shared prefixes: 160 hit tokens and 512 pages at the peak (the mini engine, which
    lands a prefill's result in its own step, had 2560 and 405 when this was written)."""
    c = compare({**GROUPS, "overlap": True})
    assert (c.theirs["prefix_hit_tokens"], c.theirs["peak_pages_held"]) == (160, 512)
    _reported(c)
    assert c.equal, describe(c)  # the mini engine holds its prefill results in flight too (prefill_step.py)


DFLASH = {"spec": "dflash", "block_size": 16, "accept_len": 4, "workload": "uniform", "input_len": 64, "min_len": 16}


def test_dflash_equal_on_every_step_with_overlap_off(reference):
    # Below 8 running requests SGLang's min-free-slots delay is off: the loops agree.
    c = compare({**DFLASH, "num_requests": 8, "output_len": 40, "pool_tokens": 8192, "overlap": False})
    assert c.equal, describe(c)


def test_dflash_waits_for_free_slots_in_sglang(reference):
    """D1: with max_running >= 8 SGLang's DFLASH admission waits for a few free request
    slots (MinFreeSlotsDelayer) and admits them in one pass: 4 prefill passes and 28 steps
    (the mini engine, admitting as soon as one slot frees, made 6 and 30 when this was written)."""
    c = compare({**DFLASH, "num_requests": 16, "output_len": 48, "max_running": 8, "pool_tokens": 16384,
                 "overlap": False})
    assert (c.theirs["prefill_steps"], c.theirs["steps"]) == (4, 28)
    _reported(c)
    assert c.equal, describe(c)  # the mini engine waits too (mini_engine/scheduler/admission_delay.py)


def test_a_next_turn_takes_what_the_client_received_not_the_verify_overshoot(reference):
    """A verify that accepts past max_new_tokens leaves the overshoot in SGLang's output_ids
    (finished_len cuts what the client gets). The next turn's prompt is built from what the
    client received: from output_ids it was 57 tokens longer (prefill_tokens 4184 against
    the mini engine's 4127) and the two differed from step 14 on."""
    c = compare({"spec": "dflash", "block_size": 16, "workload": "uniform", "num_requests": 12,
                 "input_len": 160, "min_len": 40, "output_len": 96, "seed": 7, "page_size": 64, "pool_tokens": 8192, "shared_prefix": 96,
                 "prefix_groups": 2, "turns": 2, "overlap": False})
    assert c.theirs["prefill_tokens"] == 4127
    assert c.equal, describe(c)


def test_eagle_runs_on_sglangs_spec_path(reference):
    # EAGLE chain on a hybrid SWA model, ps 64: SGLang's bigram tree keys, its page-aligned
    # reservation of 2 x num_draft_tokens and the verify's commit agree with the mini engine's.
    c = compare({"spec": "eagle", "topk": 1, "steps": 3, "window": 64, "page_size": 64, "workload": "uniform",
                 "num_requests": 12, "input_len": 160, "min_len": 40, "output_len": 96, "seed": 7,
                 "pool_tokens": 8192, "overlap": False})
    assert c.equal, describe(c)


# fidelity review D0's SWA sessions, shorter: 8 requests, a 256-token shared prefix, window 128.
SWA_SESSIONS = {"window": 128, "workload": "fixed", "num_requests": 8, "input_len": 64, "output_len": 16,
                "shared_prefix": 256, "turns": 2}


def test_swa_sessions_equal_on_every_step_with_overlap_off(reference):
    c = compare({**SWA_SESSIONS, "overlap": False})
    assert c.equal, describe(c)


def test_swa_prefill_result_lands_late_in_sglang(reference):
    """D0 with SWA: under overlap the prefill's result (its checkpoint, which leaves the SWA
    pages behind the window to the tree) lands an iteration late, so every request still
    holds its whole prompt's SWA pages: 160 at the peak, SGLang's figure on the review's
    longer sessions too (the mini engine had 8 here when this was written)."""
    c = compare({**SWA_SESSIONS, "overlap": True})
    assert c.theirs["peak_swa_pages_held"] == 160
    _reported(c)
    assert c.equal, describe(c)  # the mini engine's checkpoint lands late too (prefill_step.py)


def test_swa_chunk_cache_equal(reference):
    c = compare({"window": 64, "workload": "uniform", "num_requests": 8, "input_len": 128, "min_len": 16,
                 "output_len": 40, "pool_tokens": 8192, "overlap": False, "prefix_cache": "chunk"})
    assert c.equal, describe(c)


def test_unsupported_features_are_refused_in_one_line():
    for extra, what in (({"spec": "ngram"}, "--spec ngram"), ({"model": "tiny"}, "--model tiny"),
                        ({"profile": "host-aligned"}, "--profile host-aligned"), ({"align": "none"}, "--align"),
                        ({"workload": "pd", "pd_fraction": 0.5}, "--pd-fraction below 1"),
                        ({"workload": "pd", "window": 32, "swa_ratio": 0.2}, "--swa-ratio")):
        spec = RunSpec.parse({**SMALL, **extra})
        with pytest.raises(UnsupportedByReference, match=what):
            check_supported(spec.engine, spec.workload.to_dict(), "0.5.23")


def test_cli_refuses_with_exit_2(reference, capsys):
    assert main(["run", "--engine", "sglang", "--spec", "ngram"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not support --spec ngram" in err[0]


def test_cli_conform_engine_names_the_first_step(reference, capsys):
    args = ["conform", "--engine", "--workload", "fixed", "--num-requests", "16", "--input-len", "64",
            "--output-len", "128", "--shared-prefix", "512", "--pool-tokens", "65536"]
    status = main(args)  # overlap on (the profile's default): D0, SGLang's hits 128 (the review's figure)
    out = capsys.readouterr().out
    # The mini engine holds a prefill's result in flight as SGLang's overlap loop does: equal.
    assert status == 0 and "equal on every total and every step" in out, out


def _import_as(monkeypatch, version=None, error=None):
    def installed():
        if error is not None:
            raise error
        return version

    monkeypatch.setattr(loader, "installed_version", installed)
    loader.load.cache_clear()


def test_a_reservation_past_the_row_is_refused(reference):
    """DFLASH block 16 at ps 1 with max_context 160: SGLang's reservation runs past the row
    (K4, issue 33579) and its loop wrote into the next row's memory, which killed the
    process (the invariants suite's config); refused after the mini engine's run."""
    with pytest.raises(UnsupportedByReference, match="past the request's row"):
        run_reference({"spec": "dflash", "block_size": 16, "page_size": 1, "accept_len": 8, "workload": "fixed",
                       "num_requests": 4, "input_len": 60, "output_len": 100, "max_context": 160})


def test_sglang_missing_names_what_to_install(monkeypatch):
    _import_as(monkeypatch, error=loader.importlib.metadata.PackageNotFoundError("sglang"))
    try:
        with pytest.raises(loader.ReferenceUnavailable, match=r"pip install --no-deps sglang==0\.5\.23"):
            loader.load()
    finally:
        loader.load.cache_clear()


def test_another_release_is_refused(monkeypatch):
    _import_as(monkeypatch, version="0.5.20")
    try:
        with pytest.raises(loader.ReferenceUnavailable, match="SGLang 0.5.20 is installed"):
            loader.load()
    finally:
        loader.load.cache_clear()


def test_an_untested_release_is_driven_when_asked(reference, monkeypatch):
    """The nightly SGLang-regression job drives the newest release with 0.5.23's hooks."""
    _import_as(monkeypatch, version="0.5.99")
    monkeypatch.setenv(loader.UNTESTED_ENV, "1")
    try:
        assert loader.load().version == "0.5.99"
    finally:
        loader.load.cache_clear()


def test_cli_conform_engine_runs_a_suites_supported_configs(reference, tmp_path, capsys):
    suite = tmp_path / "two.toml"
    suite.write_text('description = "one plain config, one the reference refuses"\n[defaults]\n'
                     'workload = "uniform"\nnum_requests = 4\ninput_len = 64\nmin_len = 16\noutput_len = 8\n'
                     'overlap = false\n[axes]\nspec = ["none", "ngram"]\n')
    report = tmp_path / "report.json"
    assert main(["conform", "--engine", "--suite", str(suite), "--report", str(report)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "equal on every total and every step" in out[0]
    assert out[1].startswith("not run, 1 config: --engine sglang does not support --spec ngram")
    assert out[-1] == ("sglang 0.5.23: 1 config compared, 1 equal on every total and every step, 0 differ, "
                       "0 failed on SGLang's loop; 1 not run")
    doc = json.loads(report.read_text())  # what kvbench ci reference-triage reads
    assert (doc["suite"], doc["sglang_version"], len(doc["configs"])) == (str(suite), "0.5.23", 1)
    assert doc["configs"][0]["equal"] and doc["configs"][0]["first_step"] is None
    assert list(doc["not_run"].values()) == [1]


def test_reading_the_version_loads_neither_sglang_nor_triton():
    """Regression: the version was read by importing sglang, which loaded triton before the
    serving-stack loader set TRITON_INTERPRET; a fresh `kvbench run --engine sglang --spec
    dflash` then failed in SGLang's triton row-assignment kernel (tests that had loaded
    SGLang through conform first did not see it)."""
    code = ("import sys; from harness.reference import loader; v = loader.installed_version(); "
            "print(v, 'sglang' in sys.modules, 'triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.split()
    assert out[1:] == ["False", "False"]


def test_a_step_count_difference_is_listed_once():
    c = Comparison(key="k", totals=[("steps", 28, 29)], steps=(28, 29), mine={"steps": 28}, theirs={"steps": 29})
    assert describe(c).count("steps: mini 28, sglang 29") == 1
    c = Comparison(key="k", steps=(28, 29))
    assert "steps: mini 28, sglang 29 (every common step equal)" in describe(c)


def test_run_writes_a_row_of_the_mini_engines_format(reference, tmp_path, capsys):
    from harness.run.runner import run_config

    out = tmp_path / "row.json"
    args = ["run", "--engine", "sglang", "--workload", "uniform", "--num-requests", "4", "--input-len", "64",
            "--output-len", "8", "--json", str(out)]
    assert main(args) == 0
    row = json.loads(out.read_text())
    given = {"workload": "uniform", "num_requests": 4, "input_len": 64, "output_len": 8}
    mini = run_config(given)
    # engine=sglang in its key: never the mini engine's row (or baseline) of the same options
    assert (row["engine"], row["sglang_version"]) == ("sglang", reference.version)
    assert row["key"] == RunSpec.parse({**given, "engine": "sglang"}).key != mini["key"]
    assert set(mini["series"]) <= set(row["series"])
    assert {len(v) for v in row["series"].values()} == {row["metrics"]["steps"]}
    missing = {"steps", "peak_pages_held", "peak_pages_used", "prefix_hit_tokens", "peak_tokens_held"} - set(row["metrics"])
    assert not missing
    assert "status" in capsys.readouterr().out
