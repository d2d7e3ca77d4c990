"""The test run says, before its first result, which tests this machine skips and why."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _suites_conftest(config):
    root = Path(__file__).resolve().parents[2] / "conftest.py"
    return next(p for p in config.pluginmanager.get_plugins() if getattr(p, "__file__", None) == str(root))


def test_without_sglang_the_header_names_the_skipped_conformance_tests(request, monkeypatch):
    conftest = _suites_conftest(request.config)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sglang" else real(name, *a))
    lines = conftest.pytest_report_header(request.config)
    assert any("SGLang is not installed" in line and "suites/unit/conform" in line for line in lines)
    monkeypatch.setattr(importlib.util, "find_spec", real)
    assert not any("SGLang" in line for line in conftest.pytest_report_header(request.config)) or real("sglang") is None
