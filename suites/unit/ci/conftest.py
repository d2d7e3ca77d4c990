"""A small repository tree for the bot tests: the real ci/ registry, test files that
ask for every runner, suite names, and permissions with a few roles."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FIXTURES = Path(__file__).resolve().parent / "fixtures"

TREE = {
    "suites/unit/test_alloc.py": (
        "def test_extend():\n    pass\n\n\n"
        "class TestPages:\n    def test_free(self):\n        pass\n\n    def test_alloc(self):\n        pass\n"
    ),
    "suites/unit/test_dup.py": "def test_one():\n    pass\n",
    "suites/gpu/test_dup.py": "def test_one():\n    pass\n",
    "suites/gpu/test_attention_gpu.py": (
        "import pytest\n\npytestmark = [pytest.mark.gpu]\n\n\ndef test_paged_attention():\n    pass\n"
    ),
    "suites/gpu/multi/test_tp8.py": "def test_eight_ranks():\n    pass\n",
    "suites/invariants/test_swa_floor.py": (
        "import pytest\nfrom pytest import mark\n\npytestmark = pytest.mark.runner('1-gpu-h200')\n\n\n"
        "def test_floor():\n    pass\n\n\n"
        "class TestPD:\n    @mark.runner('1-gpu-5090')\n    def test_prealloc(self):\n        pass\n\n"
        "    def test_window(self):\n        pass\n"
    ),
    "suites/bench/test_marked_gpu.py": "import pytest\n\npytestmark = pytest.mark.gpu\n\n\ndef test_bench():\n    pass\n",
    # The real grids: a rerun's --filter is checked against the suite's configs.
    "suites/smoke.toml": (REPO / "suites" / "smoke.toml").read_text(),
    "suites/nightly-gpu.toml": (REPO / "suites" / "nightly-gpu.toml").read_text(),
}

PERMISSIONS_USERS = {"release-bot": "maintainer", "gpu-friend": "gpu-tester"}


def make_tree(root: Path) -> Path:
    (root / "ci").mkdir(parents=True)
    shutil.copy(REPO / "ci" / "runners.toml", root / "ci" / "runners.toml")
    perms = json.loads((REPO / "ci" / "permissions.json").read_text())
    perms["users"] = dict(PERMISSIONS_USERS)
    (root / "ci" / "permissions.json").write_text(json.dumps(perms))
    for rel, text in TREE.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    outside = root.parent / f"{root.name}-outside"
    outside.mkdir(exist_ok=True)
    (outside / "test_secret.py").write_text("def test_x():\n    pass\n")
    os.symlink(outside / "test_secret.py", root / "suites" / "unit" / "test_link.py")
    return root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "repo")


@pytest.fixture
def setup(tree: Path):
    from harness.ci.permissions import load_permissions
    from harness.ci.runners import load_registry

    registry = load_registry(tree / "ci" / "runners.toml")
    perms = load_permissions(tree / "ci" / "permissions.json", registry.labels)
    return tree, registry, perms


@pytest.fixture
def load_event():
    def load(name: str) -> dict:
        return json.loads((FIXTURES / "events" / f"{name}.json").read_text(encoding="utf-8"))

    return load
