"""A run's config file is the harness's: [engine] and [workload] tables (or top-level
keys) merged flat; the engine's own loader reads engine options only."""

from __future__ import annotations

import pytest

from harness.core.errors import HarnessError
from harness.core.run_spec import RunSpec
from harness.run.runner import load_config_file
from mini_engine.errors import KVBenchError


def test_tables_and_top_level_keys_merge_flat(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('spec = "eagle"\n[engine]\npage_size = 1\n[workload]\nnum_requests = 4\n')
    options = load_config_file(p)
    assert options == {"spec": "eagle", "page_size": 1, "num_requests": 4}
    spec = RunSpec.parse(options)
    assert (spec.engine.spec, spec.engine.page_size, spec.workload.num_requests) == ("eagle", 1, 4)


@pytest.mark.parametrize("text, words", [
    ("[model]\nx = 1\n", r"unknown table \[model\] \(allowed: \[engine\], \[workload\]\)"),
    ("[workload.extra]\nx = 1\n", r"unknown table \[workload.extra\]"),
])
def test_unknown_tables_are_the_harness_error(tmp_path, text, words):
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(HarnessError, match=words):
        load_config_file(p)


@pytest.mark.parametrize("content, words", [
    (b"spec = \n", "c.toml': not valid TOML"),
    (b"\xff\xfe", "c.toml': not UTF-8 text"),
])
def test_a_file_that_is_not_toml_is_one_line(tmp_path, content, words):
    p = tmp_path / "c.toml"
    p.write_bytes(content)
    with pytest.raises(KVBenchError, match=words):
        load_config_file(p)
    with pytest.raises(KVBenchError, match="config file '.*missing.toml': not found"):
        load_config_file(tmp_path / "missing.toml")
