"""The runner registry (ci/runners.toml): CI runner labels, their hardware, what runs where.

The bot and the workflow checks resolve every label here, so a typo in a workflow or
in a test file's ``runner`` mark is caught on CPU before any GPU runner waits for it.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.ci import testfiles
from harness.ci.config_file import read_config
from harness.ci.specs import SUITE_RE, show
from harness.errors import ConfigError

PROFILES = ("cpu", "rtx5090", "h100", "h200")
LABEL_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,39}\Z", re.ASCII)
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
            raise ConfigError(f"runner must be one of {', '.join(self.runners)} (got {show(str(label))})")
        return self.runners[label]

    def runner_for_suite(self, suite: str) -> str:
        for runner in self.runners.values():
            if suite in runner.suites:
                return runner.label
        return self.default

    def runner_for_test(self, root: Path, relpath: str, test: str | None = None) -> str:
        """The label a test file (or one test in it) runs on; see ci/runners.toml for the order."""
        info = testfiles.scan(root / relpath)
        label = info.runner_of(test) if test else info.module_runner
        if label is None:
            label = next((r.runner for r in self.files if fnmatch.fnmatchcase(relpath, r.glob)), None)
        if label is None:
            label = self.gpu_default if info.module_gpu else self.default
        if label not in self.runners:
            # The label is the pull request's text: quoted and cut short, it goes into a reply.
            raise ConfigError(
                f"{relpath}: runner mark {show(label)} is not in ci/runners.toml "
                f"(known: {', '.join(self.runners)})"
            )
        return label


def _need(table: dict, key: str, kind: type, where: str):
    if key not in table:
        raise ConfigError(f"{where}: missing key {key!r}")
    value = table[key]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{where}.{key} must be an integer (got {value!r})")
    if not isinstance(value, kind):
        raise ConfigError(f"{where}.{key} must be a {kind.__name__} (got {value!r})")
    return value


def parse_registry(data: dict, source: str = "runners.toml") -> Registry:
    raw = data.get("runners")
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{source}: needs at least one [runners.<label>] table")
    runners: dict[str, Runner] = {}
    for label, table in raw.items():
        where = f"{source}: runners.{label}"
        if not LABEL_RE.match(label):
            raise ConfigError(f"{where}: a label is lowercase letters, digits and '-' (got {label!r})")
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table")
        profile = _need(table, "profile", str, where)
        if profile not in PROFILES:
            raise ConfigError(f"{where}.profile must be one of {', '.join(PROFILES)} (got {profile!r})")
        gpus = _need(table, "gpus", int, where)
        if gpus < 0 or (profile == "cpu") != (gpus == 0):
            raise ConfigError(f"{where}.gpus must be 0 for the cpu profile and >= 1 otherwise (got {gpus})")
        runs_on = _need(table, "runs_on", str, where)
        suites = table.get("suites", [])
        if not isinstance(suites, list) or not all(isinstance(s, str) and SUITE_RE.match(s) for s in suites):
            raise ConfigError(f"{where}.suites must be a list of suite names (got {suites!r})")
        unknown = set(table) - {"profile", "gpus", "runs_on", "suites"}
        if unknown:
            raise ConfigError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
        runners[label] = Runner(label, profile, gpus, runs_on, tuple(suites))

    defaults = data.get("defaults", {})
    default = defaults.get("runner", "cpu")
    gpu_default = defaults.get("gpu_runner", default)
    for key, label in (("runner", default), ("gpu_runner", gpu_default)):
        if label not in runners:
            raise ConfigError(f"{source}: defaults.{key} must be one of {', '.join(runners)} (got {label!r})")
    if runners[gpu_default].gpus == 0:
        raise ConfigError(f"{source}: defaults.gpu_runner must be a GPU runner (got {gpu_default!r})")

    files = []
    for i, rule in enumerate(data.get("files", [])):
        where = f"{source}: files[{i}]"
        glob = _need(rule, "glob", str, where)
        label = _need(rule, "runner", str, where)
        if not glob.startswith("suites/"):
            raise ConfigError(f"{where}.glob must start with suites/ (got {glob!r})")
        if label not in runners:
            raise ConfigError(f"{where}.runner must be one of {', '.join(runners)} (got {label!r})")
        files.append(FileRule(glob, label))
    return Registry(runners, default, gpu_default, files)


def load_registry(path: str | Path = DEFAULT_PATH) -> Registry:
    return parse_registry(read_config(path, "runner registry"), str(path))
