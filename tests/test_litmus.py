"""litmus, the WebDAV server test suite (Debian ``litmus``), against
``serverio --webdav``: every test of ``basic``, ``copymove``, ``props`` and
``http`` passes (``locks`` needs class 2, the lock table's job).

A real server on 127.0.0.1 port 0 in this process (tests/conftest.py's
``running_server``), litmus as a subprocess, bounded in time.  Skipped,
with the reason shown, only when litmus is not installed (``.ci/run``
installs it, so CI runs it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import trio

from serverio.fs.davtree import PROPS_DIR

from .conftest import make_config, running_server

LITMUS = shutil.which("litmus")
SUITES = ("basic", "copymove", "props", "http")
# "<- summary for `basic': of 16 tests run: 16 passed, 0 failed. 100.0%"
SUMMARY = re.compile(r"summary for `(\w+)': of (\d+) tests run: (\d+) passed, (\d+) failed")

pytestmark = pytest.mark.skipif(
    LITMUS is None, reason="litmus is not installed (apt-get install litmus)"
)


def summaries(output: str) -> dict[str, tuple[int, int, int]]:
    """Each suite's (run, passed, failed) from litmus's output."""
    return {m[1]: (int(m[2]), int(m[3]), int(m[4])) for m in SUMMARY.finditer(output)}


def test_the_summary_parser_reads_litmus_lines() -> None:
    text = "<- summary for `props': of 30 tests run: 29 passed, 1 failed. 96.7%\n"
    assert summaries(text) == {"props": (30, 29, 1)}


async def run_litmus(root: Path, suites: tuple[str, ...], path: str = "/", **cfg: object) -> str:
    config = make_config(root, min_free_space=0, **cfg)
    async with running_server(config) as (_, port):
        env = {**os.environ, "TESTS": " ".join(suites)}
        with trio.fail_after(120):
            done = await trio.run_process(
                [LITMUS or "litmus", f"http://127.0.0.1:{port}{path}"],
                # litmus writes debug.log and child.log where it runs.
                cwd=str(root.parent),
                env=env,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                stdin=subprocess.DEVNULL,
            )
    return done.stdout.decode("utf-8", "replace") + done.stderr.decode("utf-8", "replace")


async def test_litmus_basic_copymove_props_http_all_pass(tmp_path: Path) -> None:
    root = tmp_path / "dav"
    root.mkdir()
    output = await run_litmus(root, SUITES, webdav=True)
    got = summaries(output)
    assert set(got) == set(SUITES), output
    for suite, (run, passed, failed) in got.items():
        assert run > 0 and failed == 0 and passed == run, (
            f"{suite}: {run, passed, failed}\n{output}"
        )
    assert "FAIL" not in output, output
    # litmus cleans up after itself; serverio left no temporary behind.
    left = [n for _, _, names in os.walk(root) for n in names if n.startswith(".serverio-tmp-")]
    assert left == []


async def test_litmus_under_a_webdav_prefix_all_pass(tmp_path: Path) -> None:
    """``--webdav-prefix /dav``: litmus pointed at ``/dav/`` passes every
    test of basic, copymove, props, http and locks; nothing is written
    outside the prefix."""
    root = tmp_path / "site"
    (root / "dav").mkdir(parents=True)
    suites = (*SUITES, "locks")
    output = await run_litmus(root, suites, "/dav/", webdav_prefix="/dav")
    got = summaries(output)
    assert set(got) == set(suites), output
    for suite, (run, passed, failed) in got.items():
        assert run > 0 and failed == 0 and passed == run, (
            f"{suite}: {run, passed, failed}\n{output}"
        )
    assert "FAIL" not in output, output
    # Nothing outside the prefix but the one dead-property store, at the
    # root whatever the prefix (serverio's own, never served).
    assert sorted(p.name for p in root.iterdir()) == [PROPS_DIR, "dav"]


async def test_litmus_fails_against_a_server_without_webdav(tmp_path: Path) -> None:
    """The judge can fail: without --webdav (--upload only) basic does not pass."""
    root = tmp_path / "plain"
    root.mkdir()
    output = await run_litmus(root, ("basic",), upload=True)
    run, passed, failed = summaries(output)["basic"]
    assert failed > 0 and passed < run, output
