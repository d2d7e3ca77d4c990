"""An insert's prev_prefix_len changed in a trace is a divergence, in replay and in
conform (R9): it is the request's locked prefix (SGLang's cache_protected_len), which
each tree gives (mini_engine/memory/replay/held_prefix.py). Replay let a value raised by 16
through where the tree had cached as much, and any lowered one; conform checked none."""

from __future__ import annotations

import json
import os

import pytest

from test_faults_trace_header import trace_lines  # noqa: F401 (the fixture: one traced run, shared)
from test_faults_trust import cli


@pytest.fixture(scope="module")
def sg_serving():
    """SGLang's serving stack, as suites/unit/conform's fixture of that name: a skip where it
    does not load, a failure under KVBENCH_REQUIRE_SGLANG."""
    from harness.conform.check import load_sglang
    from harness.conform.swa_tree import sglang_swa

    try:
        load_sglang()
        return sglang_swa()
    except Exception as err:  # SGLangMissing, or a dependency failing at import time
        required = os.environ.get("KVBENCH_REQUIRE_SGLANG")
        if required:
            pytest.fail(f"KVBENCH_REQUIRE_SGLANG={required} but SGLang's serving stack does not load: {err}")
        pytest.skip(f"SGLang's serving stack does not load on this machine: {err}")


def tampered(lines: list[str], tmp_path, by: int):
    """The trace with the first insert carrying a nonzero prev_prefix_len changed by `by`:
    (path, its line number, the record)."""
    lines = list(lines)
    n, rec = next((n, r) for n, r in ((n, json.loads(line)) for n, line in enumerate(lines) if n and line.strip())
                  if r["op"] == "insert" and r.get("prev_prefix_len", 0) >= 16)
    rec["prev_prefix_len"] += by
    lines[n] = json.dumps(rec)
    path = tmp_path / "tampered.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path, n + 1, rec


@pytest.mark.parametrize("by", [16, -16])
def test_replay_finds_a_changed_prev_prefix_len(trace_lines, tmp_path, capsys, by):
    path, line, rec = tampered(trace_lines, tmp_path, by)
    code, out, err = cli(["replay", path], capsys)
    was = rec["prev_prefix_len"] - by
    assert code == 1 and f"(line {line}) insert: prev_prefix_len expected {rec['prev_prefix_len']}, got {was}" in out


@pytest.mark.parametrize("by", [16, -16])
def test_conform_finds_a_changed_prev_prefix_len(sg_serving, trace_lines, tmp_path, capsys, by):
    path, line, rec = tampered(trace_lines, tmp_path, by)
    code, out, err = cli(["conform", path], capsys)
    was = rec["prev_prefix_len"] - by
    assert code == 1 and (f"(line {line}) insert: prev_prefix_len (rid {rec['rid']}, {rec['len']} tokens): "
                          f"kvbench {rec['prev_prefix_len']}, sglang {was}") in out, (out, err)

def test_the_trace_as_written_replays_and_conforms_clean(sg_serving, trace_lines, tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(trace_lines) + "\n")
    code, out, err = cli(["replay", path], capsys)
    assert code == 0 and "0 divergences" in out, err
    code, out, err = cli(["conform", path], capsys)
    assert code == 0 and "conforms to sglang" in out, (out, err)
