"""The reference engine takes the spec its caller parsed: `kvbench run --engine sglang` and
`kvbench conform --engine` parse a config once (its mini engine run, the reference's
workload and the result key take the same spec), `--suite` once per config at the load."""

from __future__ import annotations

from harness.cli import main

SMALL = ["--workload", "fixed", "--num-requests", "2", "--input-len", "32", "--output-len", "8",
         "--pool-tokens", "8192"]


def test_kvbench_run_on_the_reference_parses_once(reference, parses, capsys):
    assert main(["run", "--engine", "sglang", *SMALL]) == 0
    assert "engine=sglang" in capsys.readouterr().out
    assert len(parses) == 1


def test_conform_engine_parses_once(reference, parses, capsys):
    assert main(["conform", "--engine", *SMALL]) == 0
    assert "equal on every total and every step" in capsys.readouterr().out
    assert len(parses) == 1


def test_conform_engine_suite_parses_each_config_once(reference, parses, tmp_path, capsys):
    suite = tmp_path / "two.toml"
    suite.write_text('[defaults]\nworkload = "fixed"\nnum_requests = 2\ninput_len = 32\noutput_len = 8\n'
                     'overlap = false\n[axes]\nspec = ["none", "ngram"]\n')
    assert main(["conform", "--engine", "--suite", str(suite)]) == 0
    assert "not run, 1 config" in capsys.readouterr().out
    assert sorted(c["spec"] for c in parses) == ["ngram", "none"]
