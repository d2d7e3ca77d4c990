"""Who may run which bot command on which runner (ci/permissions.json).

A commenter's roles come from an explicit ``users`` entry, from their GitHub author
association (OWNER, MEMBER, ...), and, on their own pull request, from the
``pr_author`` role. Roles add up; a command or runner no role grants is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.ci.config_file import read_config
from harness.core.errors import UsageError
from harness.schemas import parse
from harness.schemas.ci import ASSOCIATIONS, COMMANDS, PermissionsFile

__all__ = ["ASSOCIATIONS", "COMMANDS", "Grant", "Permissions", "Role", "load_permissions", "parse_permissions"]
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
    associations: dict[str, tuple[str, ...]]
    author_role: str | None
    author_associations: frozenset[str]
    max_specs: int
    ci_label: str

    def grant(self, login: str, association: str, is_pr_author: bool) -> Grant:
        names: list[str] = list(self.users.get(login.lower(), ()))
        names += self.associations.get(association, ())
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


def parse_permissions(data: Any, source: str = "permissions.json", labels: tuple[str, ...] = ()) -> Permissions:
    """The permissions as declared in harness/schemas/ci.py (PermissionsFile); ``labels``:
    the registry's runner labels, which a role's runners must be drawn from."""
    model = parse(PermissionsFile, data, source, UsageError, {"labels": labels}, tables="object")
    roles = {name: Role(name, t.commands, t.runners) for name, t in model.roles.items()}
    users = {login.lower(): names for login, names in model.users.items()}
    return Permissions(roles, users, dict(model.associations), model.pr_author.role, model.pr_author.associations,
                       model.max_specs, model.ci_label)


def load_permissions(path: str | Path = DEFAULT_PATH, labels: tuple[str, ...] = ()) -> Permissions:
    return parse_permissions(read_config(path, "permissions file"), str(path), labels)
