"""The CI layer's config files as declared models: ci/runners.toml and ci/permissions.json.

What the files mean is in harness/ci/runners.py and harness/ci/permissions.py. The
runner labels a permissions file may name come in the validation context as
``labels`` (the registry is read first).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional

from pydantic import BeforeValidator, ValidationInfo, model_validator

from harness.run.hardware import PROFILES
from harness.schemas import Model, check, int_in

LABEL_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,39}\Z", re.ASCII)
SUITE_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\Z", re.ASCII)
COMMANDS = ("rerun-test", "rerun-suite", "tag-and-rerun-ci", "rerun-sglang")
ASSOCIATIONS = (
    "OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR",
    "FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "MANNEQUIN", "NONE",
)


def _label(name: Any) -> Any:
    if not (isinstance(name, str) and LABEL_RE.match(name)):
        raise ValueError(f"a label is lowercase letters, digits and '-' (got {name!r})")
    return name


def _str_list(value: Any, test=lambda s: True) -> bool:
    return isinstance(value, list) and all(isinstance(s, str) and test(s) for s in value)


class RunnerTable(Model):
    profile: Literal[PROFILES]  # type: ignore[valid-type]
    gpus: int_in(0)  # type: ignore[valid-type]
    runs_on: str
    suites: Annotated[list[str], check(lambda v: _str_list(v, SUITE_RE.match), "must be a list of suite names")] = []

    @model_validator(mode="after")
    def _gpus_match_profile(self) -> RunnerTable:
        if (self.profile == "cpu") != (self.gpus == 0):
            raise ValueError(f"gpus must be 0 for the cpu profile and >= 1 otherwise (got {self.gpus})")
        return self


class RunnerDefaults(Model):
    runner: str = "cpu"  # where unmarked tests run
    gpu_runner: Optional[str] = None  # where a gpu-marked file runs; the runner above if unset


class FileRuleTable(Model):
    glob: Annotated[str, check(lambda v: isinstance(v, str) and v.startswith("suites/"), "must start with suites/")]
    runner: str


class RegistryFile(Model):
    runners: Annotated[dict[Annotated[str, BeforeValidator(_label)], RunnerTable],
                       check(lambda v: isinstance(v, dict) and bool(v), "needs at least one [runners.<label>] table")]
    defaults: RunnerDefaults = RunnerDefaults()
    files: list[FileRuleTable] = []

    @model_validator(mode="after")
    def _labels_exist(self) -> RegistryFile:
        known = ", ".join(self.runners)
        gpu = self.defaults.gpu_runner or self.defaults.runner
        for key, label in (("runner", self.defaults.runner), ("gpu_runner", gpu)):
            if label not in self.runners:
                raise ValueError(f"defaults.{key} must be one of {known} (got {label!r})")
        if self.runners[gpu].gpus == 0:
            raise ValueError(f"defaults.gpu_runner must be a GPU runner (got {gpu!r})")
        for i, rule in enumerate(self.files):
            if rule.runner not in self.runners:
                raise ValueError(f"files[{i}].runner must be one of {known} (got {rule.runner!r})")
        return self


def _runners(value: Any, info: ValidationInfo) -> Any:
    if value == "*":
        return None  # every runner
    if not _str_list(value):
        raise ValueError('must be "*" or a list of runner labels')
    labels = (info.context or {}).get("labels") or ()
    unknown = [r for r in value if labels and r not in labels]
    if unknown:
        raise ValueError(f"{', '.join(unknown)} not in ci/runners.toml")
    return frozenset(value)


def _association(name: Any) -> Any:
    if name not in ASSOCIATIONS:
        raise ValueError(f"is not one of {', '.join(ASSOCIATIONS)}")
    return name


class RoleTable(Model):
    commands: Annotated[frozenset[str], check(lambda v: _str_list(v, COMMANDS.__contains__),
                                              f"must be a list drawn from {', '.join(COMMANDS)}", frozenset)]
    runners: Annotated[Optional[frozenset[str]], BeforeValidator(_runners)] = None  # None ("*"): every runner


RoleNames = Annotated[tuple[str, ...], BeforeValidator(lambda v: (v,) if isinstance(v, str) else
                                                       tuple(v) if isinstance(v, list) else v)]


class AuthorTable(Model):
    role: Optional[str] = None  # the role an author holds on their own pull request
    associations: Annotated[frozenset[str], check(lambda v: _str_list(v, ASSOCIATIONS.__contains__),
                                                  f"must be drawn from {', '.join(ASSOCIATIONS)}", frozenset)] = \
        frozenset(ASSOCIATIONS)


class PermissionsFile(Model):
    version: Annotated[int, check(lambda v: v == 1 and not isinstance(v, bool), "must be 1")]
    roles: dict[str, RoleTable] = {}
    users: dict[str, RoleNames] = {}
    associations: dict[Annotated[str, BeforeValidator(_association)], RoleNames] = {}
    pr_author: AuthorTable = AuthorTable()
    max_specs: int_in(1, 100) = 20  # type: ignore[valid-type]
    ci_label: Annotated[str, check(lambda v: isinstance(v, str) and 0 < len(v) <= 50,
                                   "must be a label name of 1..50 characters")] = "run-ci"

    @model_validator(mode="after")
    def _roles_exist(self) -> PermissionsFile:
        named = [(f"users.{login}", names) for login, names in self.users.items()]
        named += [(f"associations.{assoc}", names) for assoc, names in self.associations.items()]
        if self.pr_author.role is not None:
            named.append(("pr_author.role", (self.pr_author.role,)))
        for where, names in named:
            if not names or any(n not in self.roles for n in names):
                raise ValueError(f"{where} must name roles from: {', '.join(self.roles)} (got {list(names)!r})")
        return self
