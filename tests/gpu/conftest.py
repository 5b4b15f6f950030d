"""Failure texts as they happen: a GPU run cut by its time limit loses pytest's end-of-run
summary, so with TILEFUSE_FAIL_LOG set each failing test's report is appended to that file
at once (by the xdist worker that ran it, or by pytest itself when not distributed)."""

import os

_config = None


def pytest_configure(config):
    global _config
    _config = config


def pytest_runtest_logreport(report):
    path = os.environ.get("TILEFUSE_FAIL_LOG")
    if not path or not report.failed or _config is None:
        return
    if not hasattr(_config, "workerinput") and _config.getoption("numprocesses", None):
        return  # the controller of an xdist run: its workers wrote it
    with open(path, "a") as f:
        f.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext[-6000:]}\n")
