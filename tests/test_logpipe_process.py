"""A real serverio process with its stderr on a pipe nobody reads (issue 41
item 11): it keeps answering, counts the lines it dropped in ``/metrics``, and
stops within a bound.  Before the fix, every access-log line was a blocking
write on the event loop: once the pipe was full (64 KiB on Linux, ~60 of
these lines) the server stopped answering, and a stop request was never
even read.

Only the command line and HTTP are used here (no new module), so that
these tests run, and fail within their bounds, against the code before the
fix too.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from testkit import simulation

pytestmark = pytest.mark.slow


@contextmanager
def _stalled_server(root: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[bytes], str, str]]:
    """serverio with its stderr on a pipe this test never reads (until the
    process ended): the URL and the admin URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "serverio", "0", "-d", str(root), "--admin-bind", "127.0.0.1:0",
         "--shutdown-timeout", "2", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    lines: queue.Queue[bytes] = queue.Queue()
    stdout = proc.stdout
    assert stdout is not None

    def read() -> None:  # readline with a bound: a server that never starts fails
        for line in iter(stdout.readline, b""):
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        serving = lines.get(timeout=30).decode()
        admin = lines.get(timeout=30).decode()
        assert " at http://127.0.0.1:" in serving, serving
        yield proc, serving.split(" at ", 1)[1].strip(), admin.split(" at ", 1)[1].strip()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        reader.join(timeout=10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _requests(url: str, count: int, *, seconds: float) -> None:
    """``count`` GETs with a long query (a long access-log line), 500 per
    keep-alive connection (under --max-requests), each answer bounded to
    5 s, all within ``seconds``."""
    host, port = url.removeprefix("http://").strip("/").rsplit(":", 1)
    deadline = time.monotonic() + seconds
    query = "q=" + "z" * 1000
    for first in range(0, count, 500):
        with socket.create_connection((host, int(port)), timeout=5) as s, s.makefile("rb") as f:
            for i in range(first, min(first + 500, count)):
                assert time.monotonic() < deadline, f"only {i} requests in {seconds} s"
                s.sendall(f"GET /hello.txt?{query}&n={i} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
                try:
                    head = f.readline()
                    while f.readline() not in (b"\r\n", b""):
                        pass
                    body = f.read(12)
                except TimeoutError:
                    raise AssertionError(f"request {i} not answered within 5 s") from None
                assert head.startswith(b"HTTP/1.1 200") and body == b"hello world\n", (i, head)


def _metric(admin: str, name: str) -> float:
    with urllib.request.urlopen(admin, timeout=10) as resp:
        text = resp.read().decode()
    [value] = re.findall(rf"^{name} (\S+)$", text, re.M)
    return float(value)


_LINE = re.compile(
    rb'^127\.0\.0\.1 - - \[[^]]+\] "GET /hello\.txt\?q=z{1000}&n=\d+ HTTP/1\.1" 200 12$'
)


def test_stderr_nobody_reads_does_not_stop_the_server(root: Path) -> None:
    # 3,000 lines of ~1.1 KB: far more than the pipe (64 KiB on Linux) and
    # the log pipe's buffer (512 KiB, one write in flight as much again).
    with _stalled_server(root) as (proc, url, admin):
        _requests(url, 3000, seconds=120)
        dropped = _metric(admin, "serverio_log_lines_dropped_total")
        assert dropped > 0
        # Stopping: POST /shutdown (every platform), with stderr still stuck.
        stop = urllib.request.Request(admin.removesuffix("metrics") + "shutdown", method="POST")
        with urllib.request.urlopen(stop, timeout=10) as resp:
            assert resp.status == 202
        # Drain (nothing in flight) plus the bounded flush, not forever.
        assert proc.wait(timeout=20) == 0
        assert proc.stderr is not None
        err = proc.stderr.read()
    lines = err.splitlines()
    # Whole lines only, each one written by one write of whole lines.
    assert lines and all(_LINE.match(line) for line in lines), lines[:3]
    assert len(lines) + dropped <= 3000


def test_workers_with_stderr_nobody_reads_keep_serving_and_stop(root: Path) -> None:
    if simulation.windows_refuses_workers(root) or os.name == "nt":
        return
    with _stalled_server(root, "--workers", "2") as (proc, url, admin):
        _requests(url, 3000, seconds=120)
        assert _metric(admin, "serverio_log_lines_dropped_total") > 0
        proc.send_signal(signal.SIGTERM)  # the supervisor's draining line: stuck too
        assert proc.wait(timeout=30) == 0


def test_a_stop_request_with_stderr_stuck_exits_within_a_bound(root: Path) -> None:
    # 240 lines of ~1.1 KB, pipelined on 4 connections: more than the pipe
    # holds (the writer's thread is then stuck in write(2)), less than the
    # log pipe's buffer.  Before the fix the event loop itself was stuck in
    # that write: no answer, no stop request read, no exit.
    with _stalled_server(root) as (proc, url, admin):
        host, port = url.removeprefix("http://").strip("/").rsplit(":", 1)
        query = "q=" + "z" * 1000
        conns = []
        for c in range(4):
            s = socket.create_connection((host, int(port)), timeout=5)
            conns.append(s)
            reqs = (
                f"GET /hello.txt?{query}&n={c * 60 + i} HTTP/1.1\r\nHost: t\r\n\r\n"
                for i in range(60)
            )
            s.sendall("".join(reqs).encode())
        answered = 0
        for s in conns:
            with suppress(TimeoutError), s.makefile("rb") as f:
                for _ in range(60):
                    while (line := f.readline()) and not line.startswith(b"HTTP/1.1 200"):
                        pass
                    answered += bool(line)
        stop = urllib.request.Request(admin.removesuffix("metrics") + "shutdown", method="POST")
        try:
            with urllib.request.urlopen(stop, timeout=5) as resp:
                stopped = resp.status
        except OSError as exc:  # the admin endpoint shares the stuck loop
            stopped = str(exc)
        for s in conns:
            s.close()
        assert (answered, stopped) == (240, 202)
        # The drain (nothing in flight) and the bounded flush, not forever.
        assert proc.wait(timeout=20) == 0
