"""litmus (Debian ``litmus``, the WebDAV server test suite) against
``serverio --webdav``: every test of ``locks`` passes (RFC 4918 class 2:
LOCK, UNLOCK, the If field, shared and exclusive locks, collection locks,
refresh, lock-null resources), with no warning.  (The class 1 suites,
``basic``, ``copymove``, ``props`` and ``http``, run with locking on in
tests/test_litmus.py.)  And a real client's locks: cadaver (neon) locks,
discovers, writes with its token, and a second session without it is
refused.

A real server in a subprocess (``python -m serverio --webdav``, the CLI
path) on 127.0.0.1 port 0, in a temporary root; litmus bounded in time.
Skipped, with the reason shown, only when litmus is not installed
(``.ci/run`` installs it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

LITMUS = shutil.which("litmus")
pytestmark = pytest.mark.skipif(LITMUS is None, reason="Debian litmus is not installed")

_SUMMARY = re.compile(r"<- summary for `(\w+)': of (\d+) tests run: (\d+) passed, (\d+) failed")


@pytest.fixture
def dav_url(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "root"
    root.mkdir()
    log = tmp_path / "server.log"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    argv = [sys.executable, "-m", "serverio", "--webdav", "--listen", "127.0.0.1:0"]
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [*argv, "-d", str(root)], stdout=sink, stderr=subprocess.STDOUT, env=env
        )
    try:
        deadline = time.monotonic() + 20
        match = None
        while match is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
            match = re.search(r"http://127\.0\.0\.1:(\d+)/", log.read_text())
        assert match is not None, log.read_text()
        yield f"http://127.0.0.1:{match.group(1)}/"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_litmus(url: str, cwd: Path, *suites: str) -> tuple[str, dict[str, tuple[int, int, int]]]:
    """litmus's output and summaries; run in ``cwd`` (it writes debug.log
    and child.log where it runs)."""
    assert LITMUS is not None
    env = {**os.environ, "TESTS": " ".join(suites)}
    done = subprocess.run(
        [LITMUS, "-k", url],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
        cwd=cwd,
    )
    out = done.stdout + done.stderr
    results = {m[0]: (int(m[1]), int(m[2]), int(m[3])) for m in _SUMMARY.findall(out)}
    return out, results


def test_litmus_locks_every_test_passes(dav_url: str, tmp_path: Path) -> None:
    out, results = run_litmus(dav_url, tmp_path, "locks")
    assert set(results) == {"locks"}, out
    run, passed, failed = results["locks"]
    assert run >= 40 and passed == run and failed == 0, out
    assert "FAIL" not in out and "WARNING" not in out, out
    # The parts of class 2 litmus reaches, by name.
    for name in (
        "lock_excl",
        "discover",
        "refresh",
        "notowner_modify",
        "notowner_lock",
        "owner_modify",
        "cond_put",
        "fail_cond_put",
        "cond_put_corrupt_token",
        "complex_cond_put",
        "fail_complex_cond_put",
        "lock_shared",
        "double_sharedlock",
        "lock_collection",
        "indirect_refresh",
        "unmapped_lock",
    ):
        assert re.search(rf"\b{name}\.*\s*pass\b", out), (name, out)


CADAVER = shutil.which("cadaver")


def cadaver(url: str, script: str, cwd: Path) -> str:
    assert CADAVER is not None
    done = subprocess.run(
        [CADAVER, url],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )
    return done.stdout + done.stderr


@pytest.mark.skipif(CADAVER is None, reason="cadaver is not installed (apt-get install cadaver)")
def test_cadaver_locks_a_file_another_session_is_refused(dav_url: str, tmp_path: Path) -> None:
    """cadaver (neon): LOCK, discover, a PUT with the token it holds, then a
    second session without it gets 423, then the first's lock is found by
    discover, and UNLOCK in a session that knows the token (the same
    cadaver session) frees it."""
    new = tmp_path / "new.txt"
    new.write_bytes(b"new content\n")
    out = cadaver(
        dav_url, f"put {new} a.txt\nlock a.txt\ndiscover a.txt\nput {new} a.txt\nquit\n", tmp_path
    )
    assert "Locking `a.txt': succeeded." in out, out
    token = re.search(r"Lock token <(urn:uuid:[0-9a-f-]{36})>", out)
    assert token is not None, out
    assert "Scope: exclusive  Type: write  Timeout: 3600 seconds" in out, out
    assert out.count("succeeded.") == 3, out  # put, lock, put with the token
    # Another session does not hold the token.
    out = cadaver(dav_url, f"put {new} a.txt\ndiscover a.txt\nquit\n", tmp_path)
    assert "423 Locked" in out, out
    assert token.group(1) in out, out
    # One session locking and unlocking: then a plain put succeeds.
    out = cadaver(dav_url, "lock b.txt\nunlock b.txt\ndiscover b.txt\nquit\n", tmp_path)
    assert "Unlocking `b.txt': succeeded." in out and "no locks found" in out, out
