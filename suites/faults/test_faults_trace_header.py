"""A trace header at odds with itself or with its records is refused in one line, exit 2
(R9): replay read past a release kvbench does not model, a 0.5.23 trace relabelled
0.5.18, and "prefix_cache": "chunk" over tree calls, and called each clean (conform
checks the header through the same check_profile)."""

from __future__ import annotations

import json

import pytest

from test_faults_trust import cli

RUN = ["run", "--num-requests", "4", "--input-len", "64", "--output-len", "16", "--min-len", "8",
       "--shared-prefix", "32"]


@pytest.fixture(scope="module")
def trace_lines(tmp_path_factory) -> list[str]:
    from harness.cli import main

    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    assert main([*RUN, "--trace", str(path)]) == 0
    return path.read_text().splitlines()


@pytest.mark.parametrize("change, says", [
    ({"release": "0.4.0"}, "header profile release must be one of 0.5.23, 0.5.18 (got 0.4.0)"),
    ({"release": 523}, "header profile release must be one of 0.5.23, 0.5.18 (got 523)"),
    ({"release": "0.5.18"}, "header profile sglang-0.5.23 is SGLang 0.5.23, but its release says 0.5.18"),
    ({"prefix_cache": "chunk"}, "header prefix_cache is chunk (no prefix tree), but line 2 is a tree call (tree)"),
])
def test_a_header_at_odds_with_itself_is_refused(trace_lines, tmp_path, capsys, monkeypatch, change, says):
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    head = json.loads(trace_lines[0])
    assert head["profile"]["name"] == "sglang-0.5.23"
    head["profile"].update(change)
    path = tmp_path / "edited.jsonl"
    path.write_text("\n".join([json.dumps(head), *trace_lines[1:]]) + "\n")
    code, out, err = cli(["replay", path], capsys)
    assert code == 2 and not out and len(err) == 1 and says in err[0], (out, err)


def test_the_trace_as_written_replays_clean(trace_lines, tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(trace_lines) + "\n")
    code, out, err = cli(["replay", path], capsys)
    assert code == 0 and "0 divergences" in out, err

