"""Inputs with no bound ran on unseen (R11): a trace of 10^6 records in `kvbench replay`,
a prompts file of 10^6 lines in `kvbench run --prompts`. Each has a stated bound now,
refused above it in one line, exit 2, before the first record is parsed."""

from __future__ import annotations

import json

from mini_engine.memory.trace import reader
from harness.core import workloads
from test_faults_trust import cli

HEAD = {"format": "kvbench-trace", "version": 2, "page_size": 16, "num_pages": 64, "swa_num_pages": None}


def test_a_trace_over_the_record_bound_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(HEAD) + "\n" + '{"op":"tree","bigram":false}\n' * (reader.MAX_RECORDS + 1))
    code, out, err = cli(["replay", path], capsys)
    assert code == 2 and len(err) == 1, (out, err)
    assert f"holds more than {reader.MAX_RECORDS:,} records, the most replay and conform read" in err[0]


def test_a_prompts_file_over_the_bound_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    path = tmp_path / "p.jsonl"
    path.write_text("[1, 2, 3]\n" * (workloads.MAX_PROMPTS + 1))
    code, out, err = cli(["run", "--prompts", path], capsys)
    assert code == 2 and not out and len(err) == 1, (out, err)
    assert f"holds more than {workloads.MAX_PROMPTS:,} prompts, the most a run reads" in err[0]


def test_a_prompts_file_at_the_bound_with_blank_lines_is_read(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("[1, 2, 3]\n\n" * 3)  # blank lines are not prompts: only the prompts count
    assert len(workloads.load_prompts(str(path), default_output_len=4)) == 3
