"""A non-editable install: the wheel ships the suites `kvbench sweep` needs, a sweep runs
from it in another directory, and an install without them says so in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path


ROOT = Path(__file__).resolve().parents[3]
SHIPPED_SUITES = {"suites/conftest.py", "suites/grid/conftest.py", "suites/grid/test_grid.py",
                  "suites/smoke.toml", "suites/invariants.toml", "suites/nightly-gpu.toml"}


def installed(wheel: Path, where: Path) -> Path:
    """The wheel unpacked as pip lays out purelib: what `pip install .` puts in site-packages."""
    with zipfile.ZipFile(wheel) as z:
        z.extractall(where)
    return where


def test_the_wheel_ships_the_suite_grids_and_not_the_tests(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert SHIPPED_SUITES <= names
    assert not any(n.startswith(("suites/unit", "suites/gpu", "suites/bench", "suites/invariants/")) for n in names)
    assert {"harness/cli.py", "harness/run/devices.py", "mini_engine/engine.py"} <= names
    # The report's templates are package data: without them `kvbench report` fails at its first section.
    templates = {p.relative_to(ROOT).as_posix() for p in (ROOT / "harness" / "view" / "templates").rglob("*.*")}
    assert templates and templates <= names, templates - names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "kvbench = harness.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def _sweep(site: Path, cwd: Path, results: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(site), KVBENCH_RESULTS=str(results))
    cmd = [sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main())", "sweep", "smoke",
           "--no-mlflow", "--filter", "dflash and profile:sglang-0.5.23 and ps:16 and win:none and not model", "--run-id", "installed"]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_sweep_runs_from_the_install_in_another_directory(wheel, tmp_path):
    site = installed(wheel, tmp_path / "site")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = _sweep(site, elsewhere, tmp_path / "results")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = tmp_path / "results" / "runs" / "installed"
    meta = json.loads((run / "meta.json").read_text())
    assert Path(meta["suite_path"]) == site / "suites" / "smoke.toml"  # the installed grid, not the checkout's
    rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert [r["verdict"] for r in rows] == ["ok"]


def test_an_install_without_suites_says_so_in_one_line(wheel, tmp_path):
    site = installed(wheel, tmp_path / "site")
    shutil.rmtree(site / "suites")
    proc = _sweep(site, tmp_path, tmp_path / "results")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "has no suites/" in proc.stderr and "reinstall" in proc.stderr
    assert not (tmp_path / "results" / "runs").exists()


def test_workflows_install_only_extras_that_exist():
    import re

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    asked = {}
    for wf in sorted((ROOT / "ci" / "workflows").glob("*.yml")):
        for m in re.finditer(r"pip install[^\n]*?\.\[([^\]]+)\]", wf.read_text()):
            for extra in m.group(1).split(","):
                asked.setdefault(extra.strip(), []).append(wf.name)
    assert asked and set(asked) <= extras, {e: f for e, f in asked.items() if e not in extras}
