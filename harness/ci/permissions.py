"""Who may run which bot command on which runner (ci/permissions.json).

A commenter's roles come from an explicit ``users`` entry, from their GitHub author
association (OWNER, MEMBER, ...), and, on their own pull request, from the
``pr_author`` role. Roles add up; a command or runner no role grants is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.ci.config_file import read_config
from harness.errors import ConfigError

COMMANDS = ("rerun-test", "rerun-suite", "tag-and-rerun-ci")
ASSOCIATIONS = (
    "OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR",
    "FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "MANNEQUIN", "NONE",
)
DEFAULT_PATH = Path("ci") / "permissions.json"


@dataclass(frozen=True)
class Role:
    name: str
    commands: frozenset[str]
    runners: frozenset[str] | None  # None: every runner


@dataclass(frozen=True)
class Grant:
    roles: tuple[str, ...]
    commands: frozenset[str]
    runners: frozenset[str] | None

    def allows(self, command: str, runner: str | None = None) -> bool:
        if command not in self.commands:
            return False
        return runner is None or self.runners is None or runner in self.runners


@dataclass
class Permissions:
    roles: dict[str, Role]
    users: dict[str, tuple[str, ...]]
    associations: dict[str, str]
    author_role: str | None
    author_associations: frozenset[str]
    max_specs: int
    ci_label: str

    def grant(self, login: str, association: str, is_pr_author: bool) -> Grant:
        names: list[str] = list(self.users.get(login.lower(), ()))
        if association in self.associations:
            names.append(self.associations[association])
        if is_pr_author and self.author_role and association in self.author_associations:
            names.append(self.author_role)
        names = list(dict.fromkeys(names))
        commands: set[str] = set()
        runners: set[str] | None = set()
        for name in names:
            role = self.roles[name]
            commands |= role.commands
            if role.runners is None or runners is None:
                runners = None
            else:
                runners |= role.runners
        return Grant(tuple(names), frozenset(commands), None if runners is None else frozenset(runners))


def parse_permissions(data: dict, source: str = "permissions.json", labels: tuple[str, ...] = ()) -> Permissions:
    if not isinstance(data, dict) or data.get("version") != 1:
        raise ConfigError(f"{source}: must be an object with \"version\": 1")
    roles: dict[str, Role] = {}
    for name, spec in (data.get("roles") or {}).items():
        where = f"{source}: roles.{name}"
        cmds = spec.get("commands") if isinstance(spec, dict) else None
        if not isinstance(cmds, list) or not set(cmds) <= set(COMMANDS):
            raise ConfigError(f"{where}.commands must be a list drawn from {', '.join(COMMANDS)}")
        runners = spec.get("runners", "*")
        if runners != "*":
            if not isinstance(runners, list) or not all(isinstance(r, str) for r in runners):
                raise ConfigError(f"{where}.runners must be \"*\" or a list of runner labels")
            unknown = [r for r in runners if labels and r not in labels]
            if unknown:
                raise ConfigError(f"{where}.runners: {', '.join(unknown)} not in ci/runners.toml")
        roles[name] = Role(name, frozenset(cmds), None if runners == "*" else frozenset(runners))

    def role_names(value: object, where: str) -> tuple[str, ...]:
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not all(n in roles for n in names):
            raise ConfigError(f"{where} must name roles from: {', '.join(roles)} (got {value!r})")
        return tuple(names)

    users = {login.lower(): role_names(v, f"{source}: users.{login}") for login, v in (data.get("users") or {}).items()}
    assocs = {}
    for assoc, role in (data.get("associations") or {}).items():
        if assoc not in ASSOCIATIONS:
            raise ConfigError(f"{source}: associations.{assoc} is not one of {', '.join(ASSOCIATIONS)}")
        assocs[assoc] = role_names(role, f"{source}: associations.{assoc}")[0]
    author = data.get("pr_author") or {}
    author_role = author.get("role")
    if author_role is not None:
        role_names(author_role, f"{source}: pr_author.role")
    author_assocs = author.get("associations", list(ASSOCIATIONS))
    if not isinstance(author_assocs, list) or not set(author_assocs) <= set(ASSOCIATIONS):
        raise ConfigError(f"{source}: pr_author.associations must be drawn from {', '.join(ASSOCIATIONS)}")
    max_specs = data.get("max_specs", 20)
    if isinstance(max_specs, bool) or not isinstance(max_specs, int) or not 1 <= max_specs <= 100:
        raise ConfigError(f"{source}: max_specs must be an integer in 1..100 (got {max_specs!r})")
    label = data.get("ci_label", "run-ci")
    if not isinstance(label, str) or not label or len(label) > 50:
        raise ConfigError(f"{source}: ci_label must be a label name of 1..50 characters")
    return Permissions(roles, users, assocs, author_role, frozenset(author_assocs), max_specs, label)


def load_permissions(path: str | Path = DEFAULT_PATH, labels: tuple[str, ...] = ()) -> Permissions:
    return parse_permissions(read_config(path, "permissions file"), str(path), labels)
