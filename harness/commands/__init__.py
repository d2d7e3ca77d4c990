"""One module per ``kvbench`` subcommand, each with ``register(subparsers)``.

``register`` adds the subparser and sets ``func`` to a callable(args) -> int. Modules
import only the standard library and light harness modules at the top, so that building
the parser (and ``kvbench bot``/``kvbench ci``) needs no engine, MLflow or plotting
packages; ``func`` imports what its command needs.
"""

from __future__ import annotations

import argparse
import importlib
from importlib.metadata import PackageNotFoundError, version as dist_version

# Order is the order of ``kvbench --help``.
COMMANDS = ("run", "sweep", "merge", "compare", "baseline", "history", "report", "bisect", "sync", "ui", "replay", "conform", "bot", "ci")

# The role (an extra of pyproject.toml) each command needs: the CLI checks it is installed
# (harness.core.roles) before the command imports anything of it, and names the extra if not.
ROLE = {**{name: "harness" for name in COMMANDS}, "replay": "engine", "conform": "conform", "bot": "ci", "ci": "ci"}
# What a command cannot run without beyond its role's check (optional elsewhere in the role).
NEEDS = {"sync": ("mlflow",), "ui": ("mlflow",)}


class _Parser(argparse.ArgumentParser):
    # argparse already exits 2 with one usage line; keep that but make it one line.
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"kvbench: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvbench", description="KV-cache accounting benchmark harness")
    parser.add_argument("--version", action="version", version=f"kvbench {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"harness.commands.{name}").register(sub)
    return parser


def version() -> str:
    """The installed distribution's version, or the source tree's when run from a checkout."""

    try:
        return dist_version("kvbench")
    except PackageNotFoundError:
        return "unknown (not installed)"
