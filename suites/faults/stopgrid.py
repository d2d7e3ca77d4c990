"""A pytest plugin of the fault tests (loaded with -p suites.faults.stopgrid): the xdist worker asks
pytest to stop after its first config, as ``-x`` after a failure or a worker's own
stop would. The grid's pytest then ends INTERRUPTED with no SIGINT anywhere; the sweep
must report that stop, not turn it into a Ctrl-C. Inert in the controller."""

from __future__ import annotations


def pytest_runtest_teardown(item, nextitem) -> None:
    if hasattr(item.config, "workerinput"):
        item.session.shouldstop = "stopgrid: a plugin asked pytest to stop"
