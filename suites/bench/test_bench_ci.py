"""What the CI helpers cost: planning a bot comment, nightly triage, workflow lint.

Timings are reported, never gated; the asserts are on what each call decided.
Run: python -m pytest -n 0 suites/bench/test_bench_ci.py --benchmark-only
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.ci import triage
from harness.ci.bot import Comment, plan_comment
from harness.ci.permissions import load_permissions
from harness.ci.recording import RecordingClient
from harness.ci.runners import load_registry
from harness.commands.ci import lint
from harness.judge.baseline import load_baseline

pytestmark = [pytest.mark.bench, pytest.mark.benchmark(group="ci")]

REPO = Path(__file__).resolve().parents[1].parent
FIX = REPO / "suites" / "unit" / "ci" / "fixtures"
FILES = {
    "suites/unit/test_a.py": "def test_x():\n    pass\n\n\nclass TestA:\n" + "".join(
        f"    def test_{i}(self):\n        pass\n\n" for i in range(50)),
    "suites/gpu/test_g.py": "import pytest\n\npytestmark = pytest.mark.gpu\n\n\ndef test_x():\n    pass\n",
    "suites/gpu/multi/test_m.py": "def test_x():\n    pass\n",
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(REPO / "ci", root / "ci")
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_plan_twenty_spec_comment(benchmark, tree):
    registry = load_registry(tree / "ci" / "runners.toml")
    perms = load_permissions(tree / "ci" / "permissions.json", registry.labels)
    specs = [f"suites/unit/test_a.py::TestA.test_{i}" for i in range(18)]
    body = "/rerun-test " + " ".join(specs + ["suites/gpu/test_g.py", "suites/gpu/multi/test_m.py"])
    comment = Comment(body, "core-dev", "MEMBER", 1, "pr-opener")
    plan = benchmark(plan_comment, comment, tree, registry, perms, [])
    assert plan.refusal is None
    assert [(g.runner, len(g.tests)) for g in plan.groups] == [("cpu", 18), ("1-gpu-h100", 1), ("8-gpu-h200", 1)]


def test_triage_three_nights(benchmark):
    baseline = load_baseline(FIX / "baseline_cpu.json")
    dirs = triage.history(FIX / "nights")

    def run():
        nights = triage.load_nights(dirs, baseline)
        tp = triage.plan(nights, baseline, "cpu")
        return tp, triage.apply(tp, RecordingClient(), "cpu", nights[-1].name)

    tp, log = benchmark(run)
    assert len(tp.track) == 1 and len(tp.blips) == 1 and log[0].startswith("opened #")


def test_workflow_lint(benchmark):
    assert benchmark(lint, REPO) == []
