"""One module per ``kvbench`` subcommand, each with ``register(subparsers)``.

``register`` adds the subparser and sets ``func`` to a callable(args) -> int.
"""

# Order is the order of ``kvbench --help``.
COMMANDS = ("run", "sweep", "compare", "baseline", "history", "report", "bisect", "sync", "ui", "replay", "conform", "bot", "ci")
