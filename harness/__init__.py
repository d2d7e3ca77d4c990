"""harness: sweeps, metrics, MLflow logging, baselines and CI glue around mini_engine."""

from pathlib import Path

# The project root: suites/ (the grid module and the suite TOML files) sits beside this
# package, in a checkout and in an install alike. Modules find it from here, not from
# their own depth in the package, so moving a module does not move what it finds.
ROOT = Path(__file__).resolve().parent.parent
