"""The grid suite: one pytest test per config of a TOML suite.

Everything lives in the grid plugin, harness.grid.plugin (options, collection, the
run of a config, the controller that writes the rows); this conftest only loads it,
by naming its hooks and fixture here. (`pytest_plugins` in a conftest below the
rootdir is refused by pytest when a plain `pytest` meets it after start-up.)

  pytest suites/grid --kvbench-suite smoke --kvbench-run-dir DIR [-n 4]
"""

from harness.grid.plugin import (kvbench_grid, pytest_addoption, pytest_collection_modifyitems, pytest_configure,
                                 pytest_generate_tests, pytest_runtest_makereport)

__all__ = ["kvbench_grid", "pytest_addoption", "pytest_collection_modifyitems", "pytest_configure",
           "pytest_generate_tests", "pytest_runtest_makereport"]
