"""--shutdown-delay: the lame-duck drain load balancers need.

The ordering runs on trio's MockClock (the 30-second delay takes no real
time) over loopback sockets; one subprocess test checks the real signal
path, alone and with --workers.
"""

from __future__ import annotations

import functools
import http.client
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
import trio
import trio.testing

from serverio import Server
from serverio.ops.run import make_admin_handler
from testkit import simulation

from .conftest import connect, make_config, wait_until
from .fleet import request


def _refused(port: int) -> bool:
    s = socket.socket()
    try:
        return s.connect_ex(("127.0.0.1", port)) != 0
    finally:
        s.close()


async def test_lame_duck_keeps_accepting_for_the_delay_then_closes(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cfg = make_config(root, shutdown_delay=30, shutdown_timeout=5, host="127.0.0.1", port=0)
    srv = Server(cfg)
    health = make_admin_handler(srv, lambda: False)
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.serve)
        port = srv.addresses()[0][1]
        idle = await connect(port)
        first = await idle.get("/hello.txt")
        assert first.status == 200 and first.header("connection") is None
        assert (await health("/healthz"))[0] == 200
        other = await connect(port)
        assert (await other.get("/hello.txt")).status == 200
        t0 = trio.current_time()
        srv.shutdown()
        await wait_until(lambda: srv.draining)
        # At once: health 503; a request on an idle keep-alive connection
        # is still answered, and ends its connection.
        assert (await health("/healthz"))[0] == 503
        again = await other.get("/hello.txt")
        assert again.status == 200 and again.header("connection") == "close"
        with trio.fail_after(1):
            assert await other.at_eof()
        assert trio.current_time() - t0 < 1
        # Well inside the delay: still accepting, each response closes.
        await trio.sleep(20)
        assert not _refused(port)
        late = await connect(port)
        r = await late.get("/hello.txt")
        assert r.status == 200 and r.body == b"hello world\n"
        assert r.header("connection") == "close"
        with trio.fail_after(1):
            assert await late.at_eof()
        # A client that connected but has not sent yet is still answered
        # after the listener closes: it was accepted.
        await trio.sleep(9.5)
        quiet = await connect(port)
        await wait_until(lambda: srv.listeners[0].socket.fileno() == -1, limit=60)
        closed_after = trio.current_time() - t0
        assert 30 <= closed_after < 31
        assert _refused(port)
        # The idle keep-alive connection was closed when the delay ended.
        with trio.fail_after(1):
            assert await idle.at_eof()
        answer = await quiet.get("/hello.txt")
        assert answer.status == 200 and answer.header("connection") == "close"
        for c in (idle, other, late, quiet):
            await c.stream.aclose()
    assert srv.stats.conns.cancelled == 0


async def test_abort_during_the_delay_stops_at_once(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cfg = make_config(root, shutdown_delay=30, host="127.0.0.1", port=0)
    srv = Server(cfg)
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.serve)
        t0 = trio.current_time()
        srv.shutdown()
        await trio.sleep(1)
        srv.abort()
    assert trio.current_time() - t0 < 2


async def test_without_delay_the_listener_closes_at_once(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cfg = make_config(root, host="127.0.0.1", port=0)
    srv = Server(cfg)
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.serve)
        port = srv.addresses()[0][1]
        fresh = await connect(port)  # connected, nothing sent: cut at once
        await wait_until(lambda: len(srv.connections) == 1)
        t0 = trio.current_time()
        srv.shutdown()
        await wait_until(lambda: srv.listeners[0].socket.fileno() == -1)
        assert trio.current_time() - t0 < 0.1 and _refused(port)
        with trio.fail_after(1):
            assert await fresh.at_eof()
        await fresh.stream.aclose()


def _serve(root: Path, *extra: str) -> tuple[subprocess.Popen[str], str, str]:
    argv = [sys.executable, "-m", "serverio", "0", "-d", str(root), "-q"]
    proc = subprocess.Popen(
        [*argv, "--admin-bind", "127.0.0.1:0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().split(" at ", 1)[1].strip()
    admin = proc.stdout.readline().split(" at ", 1)[1].strip().removesuffix("metrics")
    return proc, url, admin


def _post(admin: str, path: str) -> tuple[int, bytes]:
    parts = urllib.parse.urlsplit(admin)
    assert parts.hostname is not None and parts.port is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("POST", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stop", "workers"), [("SIGTERM", 1), ("SIGTERM", 2), ("POST /shutdown", 1)]
)
def test_stop_with_delay_health_fails_first_and_requests_still_succeed(
    root: Path, stop: str, workers: int
) -> None:
    """The drain, started by SIGTERM or by the admin endpoint's shutdown
    request (the way to stop gracefully on Windows, which has no external
    SIGTERM)."""
    if stop == "SIGTERM" and simulation.REAL_WINDOWS:
        pytest.skip(
            "needs an external SIGTERM: on Windows send_signal(SIGTERM) is "
            "TerminateProcess (exit 1 at once); the POST /shutdown case drains there"
        )
    if workers > 1 and simulation.windows_refuses_workers(root, "--shutdown-delay", "1.5"):
        return
    proc, url, admin = _serve(root, "--shutdown-delay", "1.5", "--workers", str(workers))
    try:
        assert request(admin, "/healthz")[0] == 200
        keep = request(url, "/hello.txt")
        assert keep[0] == 200 and keep[1].get("connection") != "close"
        if stop == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        else:
            assert _post(admin, "/shutdown") == (202, b"draining\n")
        sent = time.monotonic()
        while request(admin, "/healthz")[0] != 503:
            assert time.monotonic() - sent < 0.5
            time.sleep(0.01)
        # With --workers the supervisor's health turns at its own signal;
        # each worker gets the forwarded signal a moment later.  Wait until
        # several requests in a row end their connections (bounded), then
        # every later one must.
        in_a_row = 0
        while in_a_row < 2 * workers + 2:
            assert time.monotonic() - sent < 0.5
            status, hs, body = request(url, "/hello.txt")
            assert (status, body) == (200, b"hello world\n")
            in_a_row = in_a_row + 1 if hs.get("connection") == "close" else 0
        served = 0
        while time.monotonic() - sent < 1.2:
            status, hs, body = request(url, "/hello.txt")
            assert (status, body) == (200, b"hello world\n")
            assert hs.get("connection") == "close"
            served += 1
        assert served > 5
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - sent >= 1.5
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


async def test_shutdown_request_only_where_the_admin_listener_allows_it(root: Path) -> None:
    """POST /shutdown is served only with an ``on_post`` handler, which
    run_server passes for a loopback admin address only; elsewhere, and for
    any other path, nothing stops."""
    from serverio.app.admin import open_admin_listener, serve_admin
    from serverio.ops.run import _is_loopback

    assert _is_loopback("127.0.0.1") and _is_loopback("::1") and _is_loopback("127.8.9.10")
    assert not _is_loopback("0.0.0.0") and not _is_loopback("::") and not _is_loopback("10.0.0.1")
    srv = Server(make_config(root, host="127.0.0.1", port=0))
    posts: list[str] = []

    def on_post(path: str) -> tuple[int, str, bytes]:
        posts.append(path)
        return 202, "text/plain", b"ok\n"

    async def exchange(port: int, head: bytes) -> bytes:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(head)
            data = b""
            with trio.fail_after(10):
                while chunk := await stream.receive_some(4096):
                    data += chunk
            return data

    post = b"POST /shutdown HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"
    handler = make_admin_handler(srv, lambda: False)
    async with trio.open_nursery() as nursery:
        without = await open_admin_listener("127.0.0.1:0")
        await nursery.start(serve_admin, without, handler)
        answer = await exchange(without.socket.getsockname()[1], post)
        assert answer.startswith(b"HTTP/1.1 405 ") and posts == []
        with_post = await open_admin_listener("127.0.0.1:0")
        await nursery.start(functools.partial(serve_admin, on_post=on_post), with_post, handler)
        answer = await exchange(with_post.socket.getsockname()[1], post)
        assert answer.startswith(b"HTTP/1.1 202 ") and posts == ["/shutdown"]
        # What a web page can send never stops it: a cross-origin or
        # same-origin form POST (Origin, Sec-Fetch-*), a rebinding Host.
        port = with_post.socket.getsockname()[1]
        for extra in (
            b"Origin: https://attacker.example\r\n",
            b"Origin: null\r\n",
            b"Sec-Fetch-Site: cross-site\r\n",
            b"Host: attacker.example\r\n",
        ):
            head = post.replace(b"Host: 127.0.0.1\r\n", b"") if b"Host" in extra else post
            head = head.replace(b"\r\n\r\n", b"\r\n" + extra + b"\r\n", 1)
            answer = await exchange(port, head)
            assert answer.startswith(b"HTTP/1.1 403 "), (extra, answer[:40])
        assert posts == ["/shutdown"]
        nursery.cancel_scope.cancel()
