"""One module per ``kvbench`` subcommand, each with ``register(subparsers)``.

``register`` adds the subparser and sets ``func`` to a callable(args) -> int. Modules
import only the standard library and light harness modules at the top, so that building
the parser (and ``kvbench bot``/``kvbench ci``) needs no engine, MLflow or plotting
packages; ``func`` imports what its command needs.
"""

# Order is the order of ``kvbench --help``.
COMMANDS = ("run", "sweep", "compare", "baseline", "history", "report", "bisect", "sync", "ui", "replay", "conform", "bot", "ci")

# The role (an extra of pyproject.toml) each command needs: the CLI checks it is installed
# (harness.roles) before the command imports anything of it, and names the extra if not.
ROLE = {**{name: "harness" for name in COMMANDS}, "replay": "engine", "conform": "conform", "bot": "ci", "ci": "ci"}
# What a command cannot run without beyond its role's check (optional elsewhere in the role).
NEEDS = {"sync": ("mlflow",), "ui": ("mlflow",)}
