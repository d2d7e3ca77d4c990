"""The runner registry and how a test file picks its runner (statically, never imported)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from harness.ci import testfiles
from harness.ci.runners import load_registry, parse_registry
from harness.core.errors import UsageError

REPO = Path(__file__).resolve().parents[3]


def test_real_registry():
    reg = load_registry(REPO / "ci" / "runners.toml")
    assert {"cpu", "1-gpu-5090", "1-gpu-h100", "1-gpu-h200", "8-gpu-h200"} <= set(reg.labels)
    assert [(r.profile, r.gpus) for r in (reg.get("1-gpu-5090"), reg.get("8-gpu-h200"))] == [("rtx5090", 1), ("h200", 8)]
    assert reg.runner_for_suite("nightly-gpu") != "cpu" and reg.runner_for_suite("smoke") == "cpu"
    assert reg.runner_for_suite("not-listed") == reg.default == "cpu"
    with pytest.raises(UsageError, match="runner must be one of"):
        reg.get("4-gpu-a100")


@pytest.mark.parametrize("rel, test, label", [
    ("suites/unit/test_alloc.py", None, "cpu"),                       # default
    ("suites/unit/test_alloc.py", "TestPages::test_free", "cpu"),
    ("suites/gpu/test_attention_gpu.py", None, "1-gpu-h100"),         # [[files]] rule
    ("suites/gpu/multi/test_tp8.py", None, "8-gpu-h200"),             # first matching rule wins
    ("suites/bench/test_marked_gpu.py", None, "1-gpu-h100"),          # gpu mark -> gpu_runner
    ("suites/invariants/test_swa_floor.py", "test_floor", "1-gpu-h200"),
    ("suites/invariants/test_swa_floor.py", "TestPD::test_prealloc", "1-gpu-5090"),  # method mark
    ("suites/invariants/test_swa_floor.py", "TestPD::test_window", "1-gpu-h200"),
])
def test_runner_resolution(rel, test, label, setup):
    tree, registry, _ = setup
    assert registry.runner_for_test(tree, rel, test) == label


def test_unknown_or_dynamic_runner_marks(tree):
    registry = load_registry(tree / "ci" / "runners.toml")
    bad = tree / "suites" / "unit" / "test_bad_mark.py"
    bad.write_text("import pytest\npytestmark = pytest.mark.runner('2-gpu-a100')\ndef test_x():\n    pass\n")
    with pytest.raises(UsageError, match="`2-gpu-a100` is not in ci/runners.toml"):
        registry.runner_for_test(tree, "suites/unit/test_bad_mark.py")
    bad.write_text("import pytest\nLABEL = 'cpu'\npytestmark = pytest.mark.runner(LABEL)\n")
    with pytest.raises(UsageError, match="one string literal"):
        registry.runner_for_test(tree, "suites/unit/test_bad_mark.py")
    bad.write_text("def test_x(:\n")
    with pytest.raises(UsageError, match=r"not valid Python \(line 1\)"):
        registry.runner_for_test(tree, "suites/unit/test_bad_mark.py")
    bad.write_bytes(b"def test_x():\n    pass\n\x00\n")
    with pytest.raises(UsageError, match=r"^test file 'test_bad_mark.py': not valid Python\Z"):
        registry.runner_for_test(tree, "suites/unit/test_bad_mark.py")


@pytest.mark.parametrize("damage, reason", [
    ("missing", "not found"),
    ("directory", "a directory, not a regular file"),
    ("syntax", "not valid Python (line 1)"),
    ("binary", "not UTF-8 text"),
    ("huge", f"{(1 << 20) + 1} bytes, over the limit of {1 << 20}"),
])
def test_a_bad_test_file_is_one_line_naming_it(damage, reason, tmp_path):
    path = tmp_path / "test_odd.py"
    if damage == "directory":
        path.mkdir()
    elif damage == "syntax":
        path.write_text("def test_x(:\n")
    elif damage == "binary":
        path.write_bytes(b"\xff\xfe")
    elif damage == "huge":
        path.write_text("#" * ((1 << 20) + 1))
    with pytest.raises(UsageError) as err:
        testfiles.scan(path)
    assert str(err.value) == f"test file 'test_odd.py': {reason}"


def test_scan_does_not_import(tmp_path):
    path = tmp_path / "test_boom.py"
    path.write_text("raise SystemExit('imported!')\nclass TestA:\n    async def test_b(self):\n        pass\n")
    info = testfiles.scan(path)
    assert info.has("TestA::test_b") and not info.has("TestA::test_c") and not info.has("test_b")


def _registry_text() -> dict:
    return tomllib.loads((REPO / "ci" / "runners.toml").read_text())


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["runners"]["cpu"].update(gpus=1), "gpus must be 0 for the cpu profile"),
    (lambda d: d["runners"]["1-gpu-h100"].update(profile="a100"), "profile must be one of"),
    (lambda d: d["runners"]["1-gpu-h100"].update(gpus="1"), "must be an integer"),
    (lambda d: d["runners"]["1-gpu-h100"].pop("runs_on"), "missing key 'runs_on'"),
    (lambda d: d["runners"]["1-gpu-h100"].update(suits=["x"]), "runners.1-gpu-h100: unknown key 'suits'"),
    (lambda d: d["runners"].update({"GPU_X": d["runners"]["cpu"]}), "a label is lowercase"),
    (lambda d: d["defaults"].update(gpu_runner="cpu"), "must be a GPU runner"),
    (lambda d: d["defaults"].update(runner="nope"), "defaults.runner must be one of"),
    (lambda d: d["files"].append({"glob": "tests/*.py", "runner": "cpu"}), "must start with suites/"),
    (lambda d: d["files"].append({"glob": "suites/x/*.py", "runner": "tpu"}), "files[2].runner must be one of"),
])
def test_registry_validation(edit, message):
    data = _registry_text()
    edit(data)
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_registry(data)
