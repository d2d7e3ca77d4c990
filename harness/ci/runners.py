"""The runner registry (ci/runners.toml): CI runner labels, their hardware, what runs where.

The bot and the workflow checks resolve every label here, so a typo in a workflow or
in a test file's ``runner`` mark is caught on CPU before any GPU runner waits for it.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.ci import testfiles
from harness.ci.config_file import read_config
from harness.ci.specs import show
from harness.core.errors import UsageError
from harness.schemas import parse
from harness.schemas.ci import RegistryFile
DEFAULT_PATH = Path("ci") / "runners.toml"


@dataclass(frozen=True)
class Runner:
    label: str
    profile: str
    gpus: int
    runs_on: str
    suites: tuple[str, ...] = ()


@dataclass(frozen=True)
class FileRule:
    glob: str
    runner: str


@dataclass
class Registry:
    runners: dict[str, Runner]
    default: str
    gpu_default: str
    files: list[FileRule] = field(default_factory=list)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(self.runners)

    def get(self, label: str) -> Runner:
        if label not in self.runners:
            raise UsageError(f"runner must be one of {', '.join(self.runners)} (got {show(str(label))})")
        return self.runners[label]

    def runner_for_suite(self, suite: str) -> str:
        for runner in self.runners.values():
            if suite in runner.suites:
                return runner.label
        return self.default

    def runner_for_test(self, root: Path, relpath: str, test: str | None = None) -> str:
        """The label a test file (or one test in it) runs on; see ci/runners.toml for the order.
        A whole file is asked of every test in it: one whose tests need different runners
        names them (``runners_for_file`` splits it)."""
        if test is None:
            split = self.runners_for_file(root, relpath)
            if len(split) > 1:
                where = "; ".join(f"{label}: {', '.join(tests[:3])}" for label, tests in split.items())
                raise UsageError(f"{relpath}: its tests run on {len(split)} runners ({where}); name the tests")
            return next(iter(split))
        return self._resolve(testfiles.scan(root / relpath), relpath, test)

    def runners_for_file(self, root: Path, relpath: str) -> dict[str, list[str]]:
        """label -> the tests of a whole file that run there: function and class marks
        count as for one test, so a file is never sent where one of its tests may not run.
        A class whose methods share a runner is named once."""
        info = testfiles.scan(root / relpath)
        split: dict[str, list[str]] = {}
        for test in info.tests():
            split.setdefault(self._resolve(info, relpath, test), []).append(test)
        if not split:  # no test found statically: the module's runner
            return {self._resolve(info, relpath, None): []}
        for label, tests in split.items():
            classes = {t.split("::")[0] for t in tests if "::" in t}
            whole = {c for c in classes if all(f"{c}::{m}" in tests for m in info.methods[c])}
            split[label] = list(dict.fromkeys(t.split("::")[0] if t.split("::")[0] in whole else t for t in tests))
        return split

    def _resolve(self, info: testfiles.TestInfo, relpath: str, test: str | None) -> str:
        label = info.runner_of(test) if test else info.module_runner
        if label is None:
            label = next((r.runner for r in self.files if fnmatch.fnmatchcase(relpath, r.glob)), None)
        if label is None:
            label = self.gpu_default if info.module_gpu else self.default
        if label not in self.runners:
            # The label is the pull request's text: quoted and cut short, it goes into a reply.
            raise UsageError(
                f"{relpath}: runner mark {show(label)} is not in ci/runners.toml "
                f"(known: {', '.join(self.runners)})"
            )
        return label


def parse_registry(data: Any, source: str = "runners.toml") -> Registry:
    """The registry as declared in harness/schemas/ci.py (RegistryFile)."""
    model = parse(RegistryFile, data, source, UsageError)
    runners = {label: Runner(label, t.profile, t.gpus, t.runs_on, tuple(t.suites))
               for label, t in model.runners.items()}
    default = model.defaults.runner
    files = [FileRule(rule.glob, rule.runner) for rule in model.files]
    return Registry(runners, default, model.defaults.gpu_runner or default, files)


def load_registry(path: str | Path = DEFAULT_PATH) -> Registry:
    return parse_registry(read_config(path, "runner registry"), str(path))
