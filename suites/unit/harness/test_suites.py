"""Suite grids: expansion, ids, validation, and bad input before any work."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.core.errors import HarnessError
from harness.grid.suites import SuiteError, available, load_suite


def write(tmp_path: Path, text: str, name: str = "grid.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_shipped_suites_load_and_have_unique_ids():
    assert {"smoke", "invariants", "nightly-gpu"} <= set(available())
    smoke = load_suite("smoke")
    inv = load_suite("invariants")
    gpu = load_suite("nightly-gpu", validate=False)  # validating cuda configs needs a GPU
    for s in (smoke, inv, gpu):
        ids = [c.id for c in s.configs]
        assert len(ids) == len(set(ids))
    assert len(inv.configs) >= 200
    assert gpu.needs_gpu and gpu.marks == ("gpu", "nightly")


def test_smoke_covers_what_the_issue_asks():
    configs = [c.config for c in load_suite("smoke").configs]
    assert {c.get("spec") for c in configs} >= {"eagle", "dflash"}
    assert {c.get("profile") for c in configs} >= {"sglang-0.5.23", "sglang-pre-35265", "host-aligned", "floor-free"}
    assert {c.get("page_size") for c in configs} >= {1, 16, 64}
    assert any(c.get("window") for c in configs) and any(c.get("window") is None for c in configs)
    assert any(c.get("model") == "tiny" for c in configs)


def test_nightly_gpu_covers_the_axes():
    configs = [c.config for c in load_suite("nightly-gpu", validate=False).configs]
    assert {c["page_size"] for c in configs} == {1, 16, 64, 256}
    assert {c.get("block_size") for c in configs} >= {4, 8, 16}
    assert {c.get("window") for c in configs} == {None, 128, 512, 1024, 4096}
    assert {c["model"] for c in configs} == {"qwen3-0.6b", "llama-3.1-8b"}
    assert {c.get("profile", "sglang-0.5.23") for c in configs} == {"sglang-0.5.23", "sglang-pre-35265",
                                                                    "host-aligned", "floor-free"}
    assert max(c["max_running"] for c in configs) >= 128


def test_nightly_gpu_options_validate_apart_from_the_device():
    from harness.grid.suites import GridConfig, validate_config

    # Only device=cuda and mem_fraction need a GPU to check; every other option is checked here.
    for gc in load_suite("nightly-gpu", validate=False).configs:
        cfg = {k: v for k, v in gc.config.items() if k != "mem_fraction"}
        validate_config(GridConfig(gc.id, {**cfg, "device": "cpu", "pool_tokens": 1 << 20}), gc.id)


def test_product_table_axes_include_exclude(tmp_path):
    p = write(tmp_path, """
[defaults]
num_requests = 2
[axes]
algo = [{ spec = "dflash", block_size = [4, 8] }, { spec = "eagle", topk = 1 }]
page_size = [1, 16]
[[exclude]]
spec = "eagle"
page_size = 1
[[include]]
spec = "none"
page_size = [2, 4]
""")
    s = load_suite(p)
    ids = [c.id for c in s.configs]
    assert len(ids) == 2 * 2 + 1 + 2
    assert "spec:dflash-bs:8-ps:16" in ids
    assert "spec:eagle-topk:1-ps:16" in ids and "spec:eagle-topk:1-ps:1" not in ids
    assert all(c.config["num_requests"] == 2 for c in s.configs)
    eagle = s.by_id()["spec:eagle-topk:1-ps:16"].config
    assert "block_size" not in eagle  # a table axis sets only its own options


def test_none_means_unset(tmp_path):
    s = load_suite(write(tmp_path, '[axes]\nwindow = ["none", 32]\npage_size = [16]\n'))
    assert [c.config["window"] for c in s.configs] == [None, 32]


@pytest.mark.parametrize("text, needle", [
    ("[axes\npage_size = [1]", "grid.toml': not valid TOML"),
    ("[axes]\npage_size = [0]", "page_size must be an integer >= 1"),
    ("[axes]\nspec = ['medusa']", "spec must be one of"),
    ("[axes]\npage_size = 16", "must be a non-empty list"),
    ("[axes]\nbogus_option = [1]", "bogus_option"),
    ("colour = 'red'", "unknown key 'colour'"),
    ("repeat = 0", "repeat must be an integer from 1 to 100"),
    ("repeat = 1000000000", "repeat must be an integer from 1 to 100 (got 1000000000)"),
    ("repeat = 1e9", "repeat must be an integer from 1 to 100"),
    ("", "the suite has no configs (give [axes] or [[include]])"),
    ("[defaults]\npage_size = 16", "the suite has no configs"),
    ("[axes]\nmax_context = [1000000000000]\ninput_len = [100]", "does not fit in host memory"),
    ("marks = ['fast']", "marks[0] must be one of gpu, nightly or slow (got 'fast')"),
    ("[[expect]]\nwhen = { nope = 1 }", "unknown option 'nope'"),
    ("[[expect]]\nmetrics = { steps = { above = 1 } }", "metrics.steps: unknown key 'above' (allowed: min, max, equals)"),
    ("[axes]\npage_size = [1]\n[[exclude]]\npage_size = 1", "the grid is empty"),
    ("[axes]\npage_size = [1, 16]\n[[exclude]]\npage_sise = 1", "exclude[0].page_sise: unknown option 'page_sise'"),
    ("[axes]\nprompts = ['no-such-prompts.jsonl']", "no-such-prompts.jsonl': not found"),
    ("[axes]\nmodel = ['no-such-model']", "config default: checkpoint directory 'no-such-model'"),
    ("[[expect]]\nviolations = { K99 = { min = 1 } }", "unknown invariant 'K99'"),
    ("[[expect]]\nstatus = 'violatd'", "status must be one of ok, violated"),
    ("[[expect]]\nmetrics = { peak_stranded_slot = { min = 1 } }", "metrics.peak_stranded_slot: unknown metric 'peak_stranded_slot'"),
    ("[[expect]]\nmetrics = { leaked_pages = { equals = 'predicted_leaked_page' } }",
     "names unknown metric 'predicted_leaked_page'"),
    ("[[expect]]\nmetrics = { leaked_pages = { min = [1] } }", "metrics.leaked_pages.min must be a number"),
    ("[[expect]]\nwhen = { page_size = { min = 'two' } }", "when.page_size.min must be a number"),
    ("[[expect]]\nviolations = { K1 = 'lots' }", "names unknown metric 'lots'"),
])
def test_bad_suites_are_one_line_errors(tmp_path, text, needle):
    with pytest.raises(HarnessError) as err:  # SuiteError, or ExpectError for a bad rule
        load_suite(write(tmp_path, text))
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name", available())
def test_repeated_suites_can_show_a_timing_regression(name):
    # compare's noise test needs p < ALPHA; with too few repeats no shift ever gets there.
    from harness.judge.compare import ALPHA, _mwu

    n = load_suite(name, validate=False).repeat
    if n > 1:
        p = _mwu([2.0 + i for i in range(n)], [1.0 - i for i in range(n)], worse_means_larger=True)
        assert p < ALPHA, f"repeat = {n}: even fully separated samples give p = {p:.3f}"


def test_filter_counts_the_configs_it_selects():
    from harness.grid.sweep import check_filter

    smoke = load_suite("smoke")
    assert check_filter("ps:16 and not model", smoke) == 19  # both algorithms x 4 profiles x windows, + 1 dedup, + 2 plain
    assert check_filter(None, smoke) is None
    # name:value and name=value match an option exactly: ps:1 is not ps:16, ps:3 is not steps:3
    assert check_filter("ps=1", smoke) == check_filter("ps:1", smoke) == check_filter("page_size=1", smoke) == 16
    with pytest.raises(HarnessError, match="selects no config"):
        check_filter("ps:3", smoke)  # eagle configs have steps:3; no config has page size 3
    assert check_filter("steps:3", smoke) == check_filter("spec:eagle", smoke) > 0
    assert check_filter("dflash and not pre-35265", smoke) == (
        check_filter("spec=dflash", smoke) - check_filter("spec=dflash and profile=sglang-pre-35265", smoke))
    assert check_filter("ps:1-", smoke) == check_filter("ps=1", smoke)  # the old -k spelling of exact
    parts = next(c.id for c in smoke.configs if "-ps:16-" in c.id).split("-")[1:3]
    assert check_filter("-".join(parts), smoke) >= 1  # several id parts: a substring, as -k did
    assert check_filter("win:none and ps:64", smoke) == sum(
        c.config.get("page_size") == 64 and c.config.get("window") is None for c in smoke.configs)


def test_filter_matches_ids_alone_and_passes_a_leading_dash_through_to_pytest(tmp_path):
    from harness.grid.filter import compile_filter, id_options
    from harness.grid.sweep import pytest_args

    assert id_options("spec:eagle-ps:16-pat:3:1-win:none") == {"spec": "eagle", "ps": "16", "pat": "3:1", "win": "none"}
    sel = compile_filter("ps:1 and pat:3:1")
    assert sel("spec:eagle-ps:1-pat:3:1") and not sel("spec:eagle-ps:16-pat:3:1")
    cmd = pytest_args(1, "-ps:16", ())
    assert "--kvbench-filter=-ps:16" in cmd


def test_unknown_suite_names_the_available_ones():
    with pytest.raises(SuiteError, match="unknown suite 'nope' \\(available: .*smoke"):
        load_suite("nope")


def test_resume_of_an_edited_suite_is_refused(tmp_path, results_root, cli, capsys):
    from harness.store.results import RunDir

    suite = write(tmp_path, "[axes]\npage_size = [1, 16]\n")
    run = RunDir(results_root / "runs" / "r1")
    run.path.mkdir(parents=True)
    run.write_meta({"suite": "grid", "suite_hash": load_suite(suite).digest})
    suite.write_text("[axes]\npage_size = [1, 64]\n")  # edited after the run began
    assert cli("sweep", str(suite), "--resume", "r1", "--no-mlflow") == 2
    assert "suite grid changed since run r1 began" in capsys.readouterr().err
    assert not run.results.exists()


@pytest.mark.parametrize("args, needle", [
    (["sweep", "nope"], "unknown suite 'nope'"),
    (["sweep", "BAD"], "page_size must be an integer >= 1 (got 0)"),
    (["sweep", "smoke", "--filter", "ps:16 and ("], "--filter 'ps:16 and (' is not a valid expression"),
    (["sweep", "smoke", "--filter", "ps=16 and"], "is not a valid expression"),
    (["sweep", "smoke", "-j", "0"], "-j must be an integer from 1 to"),
    (["sweep", "smoke", "-j", "100000"], "-j must be an integer from 1 to"),
    (["sweep", "smoke", "--filter", "medusa"], "selects no config of suite smoke"),
    pytest.param(["sweep", "nightly-gpu"], "needs a CUDA GPU",
                 marks=pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU is here")),
    (["sweep", "smoke", "--resume", "no-such-run"], "--resume takes the id of a run in"),
    (["sweep", "smoke", "--resume", "../../../../tmp"], "--resume takes the id of a run in"),
    (["sweep", "smoke", "--resume", "/tmp"], "--resume takes the id of a run in"),
    (["sweep", "smoke", "--run-id", "../escape"], "run id must be"),
])
def test_sweep_bad_input_exits_2_before_any_work(tmp_path, results_root, cli, capsys, args, needle):
    bad = write(tmp_path, "[axes]\npage_size = [16, 0]\n", "bad.toml")
    argv = [str(bad) if a == "BAD" else a for a in args]
    assert cli(*argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert not (results_root / "runs").exists() or not any((results_root / "runs").iterdir())
    assert not (results_root / "mlflow.db").exists()


axis_values = st.lists(st.sampled_from([1, 2, 4, 16, 64, 256]), min_size=1, max_size=4, unique=True)


@given(ps=axis_values, policies=st.lists(st.sampled_from(["aligned", "unaligned"]), min_size=1, max_size=2, unique=True),
       seeds=st.lists(st.integers(0, 50), min_size=1, max_size=3, unique=True),
       excluded=st.sampled_from([1, 2, 4, 16, 64, 256]))
def test_grid_is_the_product_minus_exclusions_with_unique_ids(tmp_path_factory, ps, policies, seeds, excluded):
    tmp = tmp_path_factory.mktemp("grid")
    text = (f"[defaults]\nnum_requests = 2\n[axes]\npage_size = {ps}\npolicy = {policies}\nseed = {seeds}\n"
            f"[[exclude]]\npage_size = {excluded}\npolicy = 'unaligned'\n")
    want = {(p, pol, s) for p in ps for pol in policies for s in seeds if not (p == excluded and pol == "unaligned")}
    if not want:
        with pytest.raises(SuiteError, match="the grid is empty"):
            load_suite(write(tmp, text), validate=False)
        return
    suite = load_suite(write(tmp, text), validate=False)
    got = {(c.config["page_size"], c.config["policy"], c.config["seed"]) for c in suite.configs}
    assert got == want and len(suite.configs) == len(want)
    ids = [c.id for c in suite.configs]
    assert len(set(ids)) == len(ids)
    for c in suite.configs:  # every id names the values that vary across the grid
        for i, (name, short) in enumerate((("page_size", "ps"), ("policy", "policy"), ("seed", "seed"))):
            if len({w[i] for w in want}) > 1:
                assert f"{short}:{c.config[name]}" in c.id.split("-")


def test_relative_prompts_are_resolved_against_the_suite_file(tmp_path, monkeypatch):
    grids = tmp_path / "grids"
    grids.mkdir()
    (grids / "p.jsonl").write_text("[1, 2, 3]\n[4, 5]\n")
    path = write(grids, '[defaults]\nprompts = "p.jsonl"\n[axes]\npage_size = [1, 16]\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # kvbench runs from anywhere; the grid's workers from the project
    suite = load_suite(path)
    assert {c.config["prompts"] for c in suite.configs} == {str(grids / "p.jsonl")}
    assert [c.id for c in suite.configs] == ["ps:1", "ps:16"]  # ids do not carry the resolved path
