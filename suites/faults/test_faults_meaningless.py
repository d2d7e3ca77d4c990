"""An option given where it means nothing, or where the rest of the config silently
overrode it, is one line and exit 2, in `kvbench run` and in a suite alike (R10, and
the last review's --min-len above --input-len): each ran as if it had not been given."""

from __future__ import annotations

import pytest

from test_faults_trust import cli

SHAPE = ["--num-requests", "2", "--input-len", "64", "--output-len", "16", "--min-len", "8"]


@pytest.mark.parametrize("argv, words", [
    (["--pd-radix"], "pd_radix (the decode side's radix cache) applies to PD arrivals only"),
    (["--workload", "pd", "--pd-radix", "--prefix-cache", "chunk"], "pd_radix (the decode side's radix cache) "
                                                                    "contradicts prefix_cache chunk"),
    (["--min-len", "500"], "min_len must be at most input_len (got min_len 500, input_len 64)"),
    (["--workload", "fixed", "--min-len", "5"], "--min-len applies to --workload uniform or pd only"),
    (["--arrival-gap", "3"], "--arrival-gap applies to --workload pd only"),
])
def test_run_refuses_an_option_that_means_nothing_here(tmp_path, capsys, monkeypatch, argv, words):
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    code, out, err = cli(["run", *SHAPE, *argv], capsys)
    assert code == 2 and not out and len(err) == 1 and words in err[0], (out, err)


def test_the_same_options_where_they_apply_still_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    code, _, err = cli(["run", *SHAPE, "--workload", "pd", "--pd-radix", "--arrival-gap", "2", "--min-len", "64"],
                       capsys)
    assert code == 0, err


@pytest.mark.parametrize("axis, words", [
    ("pd_radix = [true, false]", "applies to PD arrivals only"),
    ("min_len = [8, 100]", "min_len must be at most input_len"),
])
def test_a_suite_refuses_them_when_it_loads(tmp_path, capsys, monkeypatch, axis, words):
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    suite = tmp_path / "s.toml"
    suite.write_text("[defaults]\nnum_requests = 2\ninput_len = 64\noutput_len = 16\nmin_len = 8\n"
                     f"[axes]\npage_size = [1, 16]\n{axis}\n")
    code, out, err = cli(["sweep", suite, "--list"], capsys)
    assert code == 2 and not out and len(err) == 1 and words in err[0], (out, err)


@pytest.mark.parametrize("workload", ["uniform", "pd"])
def test_min_len_above_output_len_fixes_the_outputs(workload):
    """Not refused: min_len bounds both draws, so one above output_len (below input_len) gives
    prompts in [min_len, input_len] and every output output_len, as the evict-floor fault
    test asks with min_len = input_len (prompts of one length, outputs of another)."""
    from harness.core.workloads import WorkloadConfig, make_requests

    wl = WorkloadConfig(workload=workload, num_requests=64, input_len=64, output_len=16, min_len=40)
    reqs = make_requests(wl, seed=0)
    assert {r.max_new_tokens for r in reqs} == {16}
    lens = {len(r.prompt) for r in reqs}
    assert min(lens) >= 40 and max(lens) <= 64 and len(lens) > 1
