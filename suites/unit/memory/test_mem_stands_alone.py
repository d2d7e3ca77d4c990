"""The memory layer stands alone: importing it loads nothing of the engine above it.

Only mini_engine.memory, numpy and the standard library may load, plus the
package itself and two leaves that import only the standard library: mini_engine.errors,
the error root every layer shares, and mini_engine.files, the one reader of a file a
user names (replay reads a trace through it). pyproject.toml's import-linter contract
says the same of the source; this checks what an import really loads. Each check runs in a fresh interpreter
and compares sys.modules before and after the import, so what the interpreter
loads at start-up (site hooks) does not count.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

# Modules of the package allowed outside mini_engine.memory, and why: the package's
# __init__ (a version string), the shared error root and the file reader (leaves).
LEAVES = {"mini_engine", "mini_engine.errors", "mini_engine.files"}


def loaded_by(statement: str) -> list[str]:
    """The modules `statement` loads in a fresh interpreter, by name."""
    code = textwrap.dedent(f"""
        import json, sys
        before = set(sys.modules)
        {statement}
        print(json.dumps(sorted(set(sys.modules) - before)))
    """)
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


def outside_the_layer(names: list[str]) -> list[str]:
    stdlib = sys.stdlib_module_names
    return [n for n in names
            if not (n == "mini_engine.memory" or n.startswith("mini_engine.memory.") or n in LEAVES
                    or n.split(".")[0] == "numpy" or n.split(".")[0] in stdlib)]


# The entry points: the sizing formulas the engine plans with, the package, the
# manager (every part but replay), replay (the trace reader and the trees), the batch.
ENTRY_POINTS = ["mini_engine.memory.sizing", "mini_engine.memory", "mini_engine.memory.manager",
                "mini_engine.memory.replay.run", "mini_engine.memory.batch"]


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_importing_the_memory_layer_loads_nothing_above_it(module):
    names = loaded_by(f"import {module}")
    assert module in names
    assert outside_the_layer(names) == []


@pytest.mark.parametrize("leaf", ["mini_engine.errors", "mini_engine.files"])
def test_the_leaves_are_leaves(leaf):
    names = loaded_by(f"import {leaf}")
    assert [n for n in names if n.startswith("mini_engine")] == ["mini_engine", leaf]
    assert outside_the_layer(names) == []


def test_the_package_loads_no_numpy():
    # The CLI's parser reads memory.rules' vocabularies where numpy is not installed.
    names = loaded_by("import mini_engine.memory.rules, mini_engine.memory.config")
    assert "numpy" not in names


def test_the_check_sees_an_engine_module():
    # The filter itself must not pass everything: the profiles sit above the layer.
    assert "mini_engine.config.profiles" in outside_the_layer(loaded_by("import mini_engine.config.profiles"))
