"""Errors a user can cause in the harness and CI: a bad option, a bad file, a role's
packages not installed.

The engine has its own (``mini_engine.errors``) and the harness does not borrow them:
the bot and triage must not need the engine to say what is wrong. The CLI prints
``str(err)`` and exits 2 for either kind, without a traceback.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every error a user can cause in the harness or CI code."""


class ConfigError(HarnessError, ValueError):
    """An option or a configuration file (runners, permissions, workflows) is not valid."""


class MissingExtra(HarnessError):
    """A command needs packages of a role (an extra) that is not installed."""


# The import names of the packages the extras install; a missing one of these is an
# install problem, any other ImportError is a bug and keeps its traceback.
EXTRA_PACKAGES = frozenset({
    "torch", "numpy", "safetensors",  # engine
    "mlflow", "psutil", "pynvml", "matplotlib", "scipy", "rich", "xdist",  # harness
    "yaml", "pytest", "_pytest",  # ci
})


def missing_extra(err: ImportError, command: str, extra: str) -> MissingExtra | None:
    """The one-line error for ``err`` if it is a role's package missing, else None."""
    name = (err.name or "").partition(".")[0]
    if name not in EXTRA_PACKAGES:
        return None
    name = name.lstrip("_")  # _pytest is pytest's
    return MissingExtra(f"kvbench {command} needs the {extra} extra ({name} is not installed): "
                        f"pip install 'kvbench[{extra}]' (from a checkout: pip install -e '.[{extra}]')")
