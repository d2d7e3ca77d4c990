"""`kvbench run` through harness.cli.main: exit codes, one-line errors, JSON, trace."""

from __future__ import annotations

import json

import pytest

from harness.cli import main

SMALL = ["--workload", "fixed", "--num-requests", "4", "--input-len", "37", "--output-len", "11"]


def test_clean_run_exit_0_and_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["run", "--spec", "dflash", "--page-size", "16", "--block-size", "16", "--accept-len", "5",
               *SMALL, "--json", str(out), "--outputs"])
    assert rc == 0
    row = json.loads(out.read_text())
    assert row["status"] == "ok" and row["metrics"]["output_tokens"] == 44
    assert row["key"].startswith("spec=dflash,ps=16,bs=16,profile=sglang-0.5.23,")
    assert [len(o["output"]) for o in row["outputs"]] == [11] * 4 and len(row["outputs"][0]["prompt"]) == 37
    shown = capsys.readouterr().out
    assert "leaked token slots (measured / predicted)" in shown and "256" not in row["key"]


def test_floor_free_shows_leak_and_exits_1(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["run", "--spec", "dflash", "--accept-len", "5", "--profile", "floor-free", *SMALL, "--json", str(out)])
    assert rc == 1
    shown = capsys.readouterr().out
    assert "4 / 4" in shown  # leaked pages measured / predicted
    assert "44 / 88" in shown  # stranded slots peak / sum
    row = json.loads(out.read_text())
    assert row["status"] == "violated" and row["metrics"]["leaked_pages"] == 4


def test_pre_35265_strands_without_leaking(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["run", "--spec", "dflash", "--accept-len", "5", "--profile", "sglang-pre-35265", *SMALL,
               "--json", str(out)])
    assert rc == 0
    row = json.loads(out.read_text())
    assert row["metrics"]["leaked_pages"] == 0 and row["metrics"]["peak_stranded_slots_spec"] == 44


@pytest.mark.parametrize("argv, message", [
    (["--profile", "sglang-9"], "--profile: invalid choice"),
    (["--profile", "floor-free", "--free", "segment"], "free contradicts profile floor-free"),
    (["--profile", "host-aligned", "--policy", "unaligned"], "align contradicts profile host-aligned"),
    (["--swa-ratio", "0"], "swa_ratio must be a number in (0, 1]"),
])
def test_bad_profile_input_is_one_line_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        rc = main(["run", *argv, *SMALL])
        raise SystemExit(rc)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and message in err[-1]


def test_config_file_and_flags_override(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('spec = "eagle"\npage_size = 1\n[workload]\nworkload = "fixed"\nnum_requests = 2\n'
                   'input_len = 20\noutput_len = 5\n')
    out = tmp_path / "r.json"
    assert main(["run", "--config", str(cfg), "--page-size", "16", "--json", str(out)]) == 0
    row = json.loads(out.read_text())
    assert row["config"]["spec"] == "eagle" and row["config"]["page_size"] == 16


def test_trace_and_prompts(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("[1, 2, 3, 4, 5]\n" + json.dumps({"prompt": [9] * 40, "max_new_tokens": 3}) + "\n")
    trace = tmp_path / "t.jsonl"
    out = tmp_path / "r.json"
    assert main(["run", "--prompts", str(prompts), "--output-len", "6", "--trace", str(trace),
                 "--json", str(out), "--outputs"]) == 0
    row = json.loads(out.read_text())
    assert [len(o["output"]) for o in row["outputs"]] == [6, 3]
    lines = trace.read_text().splitlines()
    head = json.loads(lines[0])
    assert head["format"] == "kvbench-trace" and head["page_size"] == 16
    assert any(json.loads(line)["op"] == "alloc_extend" for line in lines[1:])


@pytest.mark.parametrize("argv, words", [
    (["--page-size", "0"], "page_size must be an integer >= 1"),
    (["--block-size", "8"], "block_size applies to spec=dflash only"),
    (["--window", "64", "--layer-pattern", "all-global"], "needs SWA layers"),
    (["--layer-pattern", "3:1"], "needs a window"),
    (["--pool-tokens", "256", *SMALL[:4], "--input-len", "300", "--output-len", "10"], "too small for one request"),
    (["--spec", "medusa"], "invalid choice"),
    (["--page-size", "x"], "invalid int value"),
    (["--config", "/nonexistent/c.toml"], "config file '/nonexistent/c.toml': not found"),
    (["--prompts", "/nonexistent/p.jsonl"], "prompts file '/nonexistent/p.jsonl': not found"),
    (["--prompts", "/nonexistent/p.jsonl", "--num-requests", "8"], "num_requests shapes a synthetic workload"),
    (["--outputs"], "--outputs needs --json"),
    (["--json", "/nonexistent/r.out", "--trace", "/nonexistent/./r.out"], "name the same file"),
    (["--json", "/nonexistent/dir/r.json"], "cannot be written"),
    (["--workload", "fixed", "--input-len", str(10**12)], "input_len must be an integer <= 2147483647"),
    (["--prompt-vocab", str(10**20)], "prompt_vocab must be an integer <= 2147483647"),
    (["--workload", "lognormal", "--input-len", "5000"], "max_context=4096 is below request"),
    (["--max-context", str(10**9)], "does not fit in host memory"),
    (["--workload", "pd", "--pool-tokens", "1024", *SMALL[2:4], "--input-len", "600", "--min-len", "600",
      "--output-len", "16"],
     "SGLang's decode side would never preallocate PD request"),
    (["--pool-tokens", "48", *SMALL[:4], "--input-len", "31", "--output-len", "1"], "no output under SGLang's clip"),
])
def test_bad_input_is_one_line_exit_2(argv, words, capsys):
    try:
        rc = main(["run", *argv])
    except SystemExit as exit_:  # argparse's own errors (bad choice, bad int)
        rc = exit_.code
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("content, words", [
    (b"\xff\xfe", "c.toml': not UTF-8 text"),
    (b"prompts = 5\n", "prompts must be the path of a JSON-lines file"),
    (b"[engine]\npage_size = 16.5\n", "page_size must be an integer >= 1"),
])
def test_bad_config_file_is_one_line_exit_2(tmp_path, capsys, content, words):
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(content)
    assert main(["run", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_bad_input_leaves_no_result_files(tmp_path, capsys):
    out, trace = tmp_path / "r.json", tmp_path / "t.jsonl"
    assert main(["run", "--pool-tokens", "256", "--json", str(out), "--trace", str(trace)]) == 2
    assert not out.exists() and not trace.exists()
    assert "too small for one request" in capsys.readouterr().err


def test_trace_of_a_pressured_run_replays(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    rc = main(["run", "--spec", "dflash", "--window", "48", "--workload", "pd", "--pd-fraction", "0.5",
               "--num-requests", "12", "--input-len", "300", "--output-len", "200", "--pool-tokens", "1024",
               "--trace", str(trace)])
    assert rc == 0
    capsys.readouterr()
    assert main(["replay", str(trace)]) == 0
    assert "0 divergences" in capsys.readouterr().out
