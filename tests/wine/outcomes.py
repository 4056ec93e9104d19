"""pytest plugin for the Wine run: one JSON line per test outcome, as it happens.

Loaded by tests/wine/suite.py (``-p tests.wine.outcomes``) with
``SERVERIO_WINE_OUTCOMES`` naming the file.  Written and flushed per test,
so the record survives the run being ended early (pytest-timeout's only
method on Windows ends the process with ``os._exit`` at a hung test).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

_PATH = os.environ.get("SERVERIO_WINE_OUTCOMES", "")

# Failures that are the emulator's, not the code's: Wine's CreateProcess
# failing with ERROR_INTERNAL_ERROR when a test starts a child (seen once
# in 2026-12-07's runs, on a test that passed in the run before and after).
WINE_FAULTS = ("[WinError 1359]",)


def _write(record: dict[str, Any]) -> None:
    if not _PATH:
        return
    with open(_PATH, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _write({"test": nodeid, "outcome": "started"})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":
        if report.skipped:
            reason = (
                report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            )
            outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
            if outcome == "xfailed":
                reason = str(report.wasxfail)
            _write({"test": report.nodeid, "outcome": outcome, "reason": reason})
            return
        outcome = "error" if report.when != "call" and report.failed else report.outcome
        record: dict[str, Any] = {"test": report.nodeid, "outcome": outcome, "when": report.when}
        if report.failed and any(mark in report.longreprtext for mark in WINE_FAULTS):
            record["wine_fault"] = True  # Wine's, not serverio's: tests/wine/suite.py reruns it
        _write(record)
