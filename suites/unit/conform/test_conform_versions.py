"""kvbench conform judges a trace only on its profile's SGLang release.

Each profile names one release (profiles.SGLANG_VERSIONS: sglang-pre-35265 is 0.5.18,
the last before PR 35265). A trace of another release than the installed one is bad
input: one line, exit 2, and the traces of the right release keep their lines.
"""

from __future__ import annotations

import pytest

from harness.cli import main
from harness.conform.versions import check_version, trace_version
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, open_trace
from mini_engine.errors import TraceError
from mini_engine.config.profiles import PROFILES, SGLANG_VERSIONS
from mini_engine.request import Request


def test_every_profile_names_a_release():
    assert set(SGLANG_VERSIONS) == set(PROFILES)
    assert SGLANG_VERSIONS["sglang-pre-35265"] == "0.5.18" and SGLANG_VERSIONS["sglang-0.5.23"] == "0.5.23"


def test_trace_version_reads_the_header_profile():
    assert trace_version("t", {"profile": {"name": "sglang-pre-35265"}}) == "0.5.18"
    assert trace_version("t", {"profile": {"align": []}}) is None  # a memory-only caller's trace
    assert trace_version("t", {}) is None
    with pytest.raises(TraceError, match="header profile 'nope'"):
        trace_version("t", {"profile": {"name": "nope"}})
    check_version("t", {"profile": {"name": "sglang-0.5.23"}}, "0.5.23")
    with pytest.raises(TraceError) as err:
        check_version("t", {"profile": {"name": "sglang-pre-35265"}}, "0.5.23")
    assert "\n" not in str(err.value) and "SGLang 0.5.18" in str(err.value) and "0.5.23 is installed" in str(err.value)


def _trace(path, profile: str) -> None:
    cfg = EngineConfig(spec="dflash", block_size=8, page_size=16, pool_tokens=4096, max_context=512,
                       accept_len=4, profile=profile)
    with open(path, "w") as fh:
        eng = Engine(cfg, trace=open_trace(cfg, fh))
        eng.submit([Request(i, list(range(1, 40 + 9 * i)), 12) for i in range(3)])
        assert eng.run().verdict == "ok"


def test_a_trace_of_another_release_is_one_line_and_exit_2(sg, tmp_path, capsys):
    # whichever SGLang is installed, a trace of the other release's profile
    other = "sglang-0.5.23" if sg.version == "0.5.18" else "sglang-pre-35265"
    own = next(p for p, v in SGLANG_VERSIONS.items() if v == sg.version)
    bad, good = tmp_path / "other.jsonl", tmp_path / "own.jsonl"
    _trace(bad, other)
    _trace(good, own)
    rc = main(["conform", str(bad), str(good)])
    out, err = capsys.readouterr()
    assert rc == 2
    assert err.count("\n") == 1 and f"{bad}: recorded under profile {other}" in err
    assert f"SGLang {SGLANG_VERSIONS[other]}, but SGLang {sg.version} is installed" in err
    assert f"{good}: conforms to sglang {sg.version}" in out  # the right release's trace keeps its line
