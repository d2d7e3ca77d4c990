"""One module per ``kvbench`` subcommand, each with ``register(subparsers)``.

``register`` adds the subparser and sets ``func`` to a callable(args) -> int. Modules
import only the standard library and light harness modules at the top, so that building
the parser (and ``kvbench bot``/``kvbench ci``) needs no engine, MLflow or plotting
packages; ``func`` imports what its command needs.
"""

# Order is the order of ``kvbench --help``.
COMMANDS = ("run", "sweep", "compare", "baseline", "history", "report", "bisect", "sync", "ui", "replay", "conform", "bot", "ci")

# The extra (pyproject.toml) that installs what each command imports; the CLI names it
# when a package is missing.
EXTRA = {"replay": "engine", "conform": "conform", "bot": "ci", "ci": "ci"}
DEFAULT_EXTRA = "harness"
