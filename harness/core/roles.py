"""Which installed role (an extra of pyproject.toml) each ``kvbench`` command needs, checked
before the command imports anything of it.

A role is checked by the import names of the packages its commands cannot run without,
found with ``importlib.util.find_spec`` (nothing is imported, so the check costs no
start-up time). Packages that only some paths import, each of which degrades or says so
(MLflow under ``--no-mlflow``, matplotlib's plots, psutil's system metrics, NVML on a CPU
machine, safetensors for a checkpoint, scipy for repeated timings; ci/gpu-check.sh sweeps
on GPU machines that may lack some of them), are not part of a role's check; a command that
cannot do without one lists it in ``harness.commands.NEEDS``. Anything a check misses
still ends as the same one line: the CLI turns an ImportError of a role package into it
(``missing_extra``).
"""

from __future__ import annotations

import importlib.util

from harness.core.errors import MissingExtra

_ENGINE = ("numpy", "torch")

# extra -> import names of what every command of that role imports.
ROLE_PACKAGES: dict[str, tuple[str, ...]] = {
    "engine": _ENGINE,
    "harness": _ENGINE + ("pydantic", "rich", "pytest", "xdist"),
    "ci": ("yaml", "pydantic", "pytest"),
    # SGLang itself is installed apart (--no-deps); kvbench conform says so in its own line.
    "conform": _ENGINE,
}

# Every import name an extra installs: a missing one of these is an install problem, any
# other ImportError is a bug and keeps its traceback.
EXTRA_PACKAGES = frozenset({p for names in ROLE_PACKAGES.values() for p in names}
                           | {"mlflow", "psutil", "pynvml", "matplotlib", "scipy", "safetensors", "_pytest"})


def installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that refuses the name, a module without a spec
        return False


def message(command: str, extra: str, package: str) -> MissingExtra:
    return MissingExtra(f"kvbench {command} needs the {extra} extra ({package} is not installed): "
                        f"pip install 'kvbench[{extra}]' (from a checkout: pip install -e '.[{extra}]')")


# Commands that need less than their role: replay runs the host accounting alone
# (mini_engine.memory, numpy only), so it works where torch is not installed.
COMMAND_PACKAGES: dict[str, tuple[str, ...]] = {"replay": ("numpy",)}


def check(command: str, extra: str, also: tuple[str, ...] = ()) -> None:
    """Raise MissingExtra (one line naming the extra) unless the role's packages are there."""
    for package in COMMAND_PACKAGES.get(command, ROLE_PACKAGES[extra]) + also:
        if not installed(package):
            raise message(command, extra, package)


def missing_extra(err: ImportError, command: str, extra: str) -> MissingExtra | None:
    """The one-line error for ``err`` if it is a role's package missing, else None."""
    name = (err.name or "").partition(".")[0]
    if name not in EXTRA_PACKAGES:
        return None
    return message(command, extra, name.lstrip("_"))  # _pytest is pytest's
