"""Shared prompts at the boundaries: `kvbench run` flags, its --config file, a swept suite
(one line, exit 2, the same rule everywhere), and the shipped suites' shared-prompt configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.grid.suites import load_suite
from harness.run.runner import run_config

ROOM = "shared_prefix=5000 leaves no room in max_context=4096"


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("argv, words", [
    (["--shared-prefix", "5000"], ROOM),
    (["--shared-prefix", "99", "--max-context", "100"], "allowed: shared_prefix <= 98"),
    (["--prefix-groups", "0"], "prefix_groups must be an integer >= 1 (got 0)"),
    (["--turns", "0"], "turns must be an integer >= 1 (got 0)"),
    (["--shared-prefix", "-3"], "shared_prefix must be an integer >= 0 (got -3)"),
    (["--prefix-groups", "3"], "prefix_groups=3 needs a shared_prefix >= 1"),
    (["--workload", "fixed", "--input-len", "500", "--output-len", "500", "--turns", "5"],
     "max_context=4096 is below the last of turns=5 of session 0"),
    (["--prompts", "PROMPTS", "--shared-prefix", "8"], "shared_prefix shapes a synthetic workload"),
])
def test_run_refuses_in_one_line(tmp_path, capsys, argv, words):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("[1, 2, 3]\n")
    # --num-requests keeps the runs that would pass small; it would itself be refused beside --prompts.
    shape = [] if "PROMPTS" in argv else ["--num-requests", "2"]
    rc = main(["run", *shape, *[str(prompts) if a == "PROMPTS" else a for a in argv]])
    assert rc == 2 and words in _one_line(capsys)


def test_config_file_refuses_alike(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[workload]\nnum_requests = 2\nshared_prefix = 5000\n")
    assert main(["run", "--config", str(cfg)]) == 2
    assert ROOM in _one_line(capsys)
    cfg.write_text("[workload]\nturns = 0\n")
    assert main(["run", "--config", str(cfg)]) == 2
    assert "turns must be an integer >= 1 (got 0)" in _one_line(capsys)


@pytest.mark.parametrize("axis, words", [
    ("shared_prefix = [16, 5000]", ROOM),
    ("prefix_groups = [2, 0]", "prefix_groups must be an integer >= 1 (got 0)"),
    ("turns = [2, 0]", "turns must be an integer >= 1 (got 0)"),
])
def test_sweep_refuses_before_any_work(tmp_path, results_root, cli, capsys, axis, words):
    suite = tmp_path / "grid.toml"
    suite.write_text(f"[defaults]\nnum_requests = 2\nshared_prefix = 16\n\n[axes]\n{axis}\n")
    assert cli("sweep", suite, "--no-mlflow") == 2
    assert words in _one_line(capsys)
    runs = results_root / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_shipped_suites_hold_shared_prompts():
    smoke = [c.config for c in load_suite("smoke").configs if c.config.get("shared_prefix")]
    assert smoke and any(c.get("turns", 1) > 1 and c.get("prefix_groups", 1) > 1 for c in smoke)
    inv = [c.config for c in load_suite("invariants").configs if c.config.get("shared_prefix")]
    assert {c["page_size"] for c in inv} >= {1, 16, 64} and {c["spec"] for c in inv} >= {"dflash", "eagle"}
    assert {c.get("window") for c in inv} >= {None, 32}
    assert {(c.get("prefix_groups", 1) > 1, c.get("turns", 1) > 1) for c in inv} >= {(False, False), (True, False),
                                                                                    (False, True)}
    assert 20 <= len(inv) <= 80  # tens of configs, not hundreds


def test_smoke_shared_prompt_configs_run_clean():
    for gc in load_suite("smoke").configs:
        c = gc.config
        if not c.get("shared_prefix"):
            continue
        row = run_config(c)
        assert row["status"] == "ok", gc.id
        assert row["metrics"]["finished_requests"] == c["num_requests"] * c.get("turns", 1), gc.id
        assert row["config"]["shared_prefix"] == c["shared_prefix"] and row["violations"] == {}, gc.id


def test_invariants_sessions_under_pressure_run_clean():
    pressed = [gc for gc in load_suite("invariants").configs
               if gc.config.get("turns", 1) > 1 and gc.config.get("pool_tokens") == 1024]
    assert pressed
    for gc in pressed:
        row = run_config(gc.config)
        assert row["status"] == "ok" and row["violations"] == {}, gc.id
        assert row["metrics"]["finished_requests"] == gc.config["num_requests"] * gc.config["turns"], gc.id


def test_docs_name_the_flags():
    root = Path(__file__).resolve().parents[3]
    readme = (root / "README.md").read_text()
    assert all(flag in readme for flag in ("--shared-prefix", "--prefix-groups", "--turns"))
