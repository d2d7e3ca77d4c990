"""The memory layer stands alone: importing it loads nothing of the engine above it.

Only mini_engine.memory, numpy and the standard library may load, plus the
package itself and mini_engine.errors, the error root every layer shares (a leaf
that imports only the standard library). Each check runs in a fresh interpreter
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
# __init__ (a version string) and the shared error root (a leaf).
LEAVES = {"mini_engine", "mini_engine.errors"}


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


@pytest.mark.parametrize("module", ["mini_engine.memory.sizing", "mini_engine.memory"])
def test_importing_the_memory_layer_loads_nothing_above_it(module):
    names = loaded_by(f"import {module}")
    assert module in names
    assert outside_the_layer(names) == []


def test_the_error_root_is_a_leaf():
    names = loaded_by("import mini_engine.errors")
    assert [n for n in names if n.startswith("mini_engine")] == ["mini_engine", "mini_engine.errors"]
    assert outside_the_layer(names) == []


def test_the_check_sees_an_engine_module():
    # The filter itself must not pass everything: the profiles sit above the layer.
    assert "mini_engine.config.profiles" in outside_the_layer(loaded_by("import mini_engine.config.profiles"))
