"""A pytest plugin of the fault tests (loaded with -p killworker): the xdist worker
that starts config ps:16 of the grid kills itself with SIGKILL, as an OOM kill or a
segfault in a kernel would take it down. Inert in the controller and without xdist."""

from __future__ import annotations

import os
import signal


def pytest_runtest_call(item) -> None:
    if hasattr(item.config, "workerinput") and item.nodeid.endswith("::test_config[ps:16]"):
        os.kill(os.getpid(), signal.SIGKILL)
