"""The Wine run reruns a test that failed on one of Wine's own faults
(tests/wine/outcomes.py WINE_FAULTS: the emulator's CreateProcess), once,
and only a few: the rerun's outcome stands (tests/wine/suite.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.wine import outcomes, suite

FAULT = "OSError: [WinError 1359] An internal error occurred"


def _report(nodeid: str, text: str) -> Any:
    return SimpleNamespace(
        nodeid=nodeid,
        when="call",
        outcome="failed",
        failed=True,
        skipped=False,
        longreprtext=text,
    )


def test_the_outcome_names_a_wine_fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "outcomes.jsonl"
    monkeypatch.setattr(outcomes, "_PATH", str(record))
    outcomes.pytest_runtest_logreport(_report("t.py::a", f"...\n{FAULT}\n"))
    outcomes.pytest_runtest_logreport(_report("t.py::b", "AssertionError: 1 != 2"))
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert lines == [
        {"test": "t.py::a", "outcome": "failed", "when": "call", "wine_fault": True},
        {"test": "t.py::b", "outcome": "failed", "when": "call"},
    ]


def _results(*faulted: str, other: str = "") -> dict[str, dict[str, str]]:
    got: dict[str, dict[str, Any]] = {
        name: {"test": name, "outcome": "failed", "when": "call", "wine_fault": True}
        for name in faulted
    }
    got["t.py::fine"] = {"test": "t.py::fine", "outcome": "passed", "when": "call"}
    if other:
        got[other] = {"test": other, "outcome": "failed", "when": "call"}
    return got


def test_a_wine_fault_is_run_again_and_its_rerun_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[str, list[str], str]] = []
    rerun = {"t.py::a[x]": "passed", "u.py::b": "failed"}

    def run_file(
        prefix: Path, test_file: str, tmp: Path, tests: list[str], tag: str
    ) -> dict[str, dict[str, str]]:
        asked.append((test_file, list(tests), tag))
        got = {name: {"test": name, "outcome": rerun[name], "when": "call"} for name in tests}
        if test_file == "t.py":  # the rerun leaked a child: that is a failure of its own
            got["t.py::<leaked child 7>"] = {"test": "t.py", "outcome": "failed", "when": "leak"}
        return got

    monkeypatch.setattr(suite, "run_file", run_file)
    got = suite.rerun_wine_faults(
        tmp_path, _results("t.py::a[x]", "u.py::b", other="v.py::c"), tmp_path
    )
    assert asked == [("t.py", ["t.py::a[x]"], "-rerun"), ("u.py", ["u.py::b"], "-rerun")]
    assert got["t.py::a[x]"]["outcome"] == "passed"
    assert got["t.py::a[x]"]["rerun"] == "after a Wine fault"
    assert got["u.py::b"]["outcome"] == "failed"  # failed again: it stays failed
    assert got["v.py::c"]["outcome"] == "failed"  # not a Wine fault: never rerun
    assert got["t.py::fine"]["outcome"] == "passed"
    assert got["t.py::<leaked child 7> (rerun)"]["outcome"] == "failed"


def test_too_many_wine_faults_are_not_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run_file(*args: object, **kw: object) -> dict[str, dict[str, str]]:
        raise AssertionError("no rerun past the cap")

    monkeypatch.setattr(suite, "run_file", run_file)
    names = [f"t.py::n{i}" for i in range(suite.MAX_WINE_RERUNS + 1)]
    got = suite.rerun_wine_faults(tmp_path, _results(*names), tmp_path)
    assert all(got[name]["outcome"] == "failed" for name in names)
