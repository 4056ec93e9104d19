"""Real sockets on 127.0.0.1 port 0: sendfile, admission, graceful shutdown."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
import trio

from serverio import Server
from testkit import simulation

from .conftest import connect, make_config, open_fd_count, running_server, wait_until


async def test_sendfile_for_large_bodies(root: Path) -> None:
    big = (root / "big.bin").read_bytes()
    async with running_server(make_config(root)) as (srv, port):
        client = await connect(port)
        r = await client.get("/big.bin")
        small = await client.get("/data.bin")
        rng = await client.get("/big.bin", "Range: bytes=100000-299999\r\n")
        await client.stream.aclose()
    assert r.body == big and small.status == 200 and rng.body == big[100000:]
    if simulation.WINDOWS_SHAPED:  # no os.sendfile: the portable buffered path
        sent = srv.stats.responses
        assert (sent.sendfile_responses, sent.buffered_responses) == (0, 2)
    else:
        assert srv.stats.responses.sendfile_responses == 2  # data.bin is small: sent with the head


async def test_buffered_fallback_same_bytes(root: Path) -> None:
    big = (root / "big.bin").read_bytes()
    async with running_server(make_config(root, sendfile=False)) as (srv, port):
        client = await connect(port)
        r = await client.get("/big.bin")
        await client.stream.aclose()
    assert r.body == big
    sent = srv.stats.responses
    assert sent.sendfile_responses == 0 and sent.buffered_responses == 1


async def test_admission_503_and_recovery(root: Path) -> None:
    async with running_server(make_config(root, max_connections=2)) as (srv, port):
        a = await connect(port)
        b = await connect(port)
        assert (await a.get("/hello.txt")).status == 200
        assert (await b.get("/hello.txt")).status == 200
        c = await connect(port)
        with trio.fail_after(5):
            rejected = await c.read_response()
            assert await c.at_eof()
        assert rejected.status == 503
        assert rejected.header("retry-after") == "1"
        assert rejected.header("connection") == "close"
        # The pure layer's 503 (error_plan), canned once: its common fields
        # too, Date current (RFC 9110 §6.6.1), the fixed status text.
        assert rejected.header("x-content-type-options") == "nosniff"
        assert rejected.header("date") is not None
        assert rejected.body == b"503 Service Unavailable\n"
        await a.stream.aclose()
        await wait_until(lambda: len(srv.connections) == 1)
        d = await connect(port)
        assert (await d.get("/hello.txt")).status == 200
        for s in (b, c, d):
            await s.stream.aclose()
    assert srv.stats.conns.rejected == 1


async def test_graceful_shutdown_order(root: Path) -> None:
    """Idle connections close at once, the in-flight response completes with
    Connection: close, and nothing new is accepted."""
    (root / "huge.bin").write_bytes(b"x" * 8_000_000)
    cfg = make_config(root, shutdown_timeout=30, host="127.0.0.1", port=0)
    srv = Server(cfg)
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.serve)
        port = srv.addresses()[0][1]
        idle = await connect(port)
        await idle.get("/hello.txt")
        busy = await connect(port)
        await busy.send_raw(b"GET /huge.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        first = await busy.stream.receive_some(1)  # the response has started
        assert first
        await wait_until(lambda: any(c.in_flight for c in srv.connections))
        srv.shutdown()
        with trio.fail_after(5):
            assert await idle.at_eof()
        # The listener is closed: new connections are refused.
        await wait_until(lambda: srv.listeners[0].socket.fileno() == -1)
        refused = socket.socket()
        try:
            assert refused.connect_ex(("127.0.0.1", port)) != 0
        finally:
            refused.close()
        busy.conn.receive_data(bytes(first))
        r = await busy.read_response()
        # Complete and intact; its head went out before the signal, so the
        # close comes right after the body instead of in a header.
        assert r.body == b"x" * 8_000_000
        with trio.fail_after(5):
            assert await busy.at_eof()
        await idle.stream.aclose()
        await busy.stream.aclose()
    assert srv.stats.conns.cancelled == 0


async def test_shutdown_deadline_cancels_stragglers(root: Path) -> None:
    (root / "huge.bin").write_bytes(b"x" * 32_000_000)
    cfg = make_config(root, shutdown_timeout=0.5, write_timeout=60, host="127.0.0.1", port=0)
    srv = Server(cfg)
    fds = open_fd_count()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(srv.serve)
            port = srv.addresses()[0][1]
            stuck = await connect(port)
            await stuck.send_raw(b"GET /huge.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            await wait_until(lambda: any(c.in_flight for c in srv.connections))
            srv.shutdown()  # the client never reads: cut at the deadline
    await stuck.stream.aclose()
    assert srv.stats.conns.cancelled == 1
    assert open_fd_count() == fds


async def test_symlink_swap_race_never_escapes(root: Path, strategy: str) -> None:
    """A thread flips a symlink between an inside and an outside target while
    requests run: the outside file is never served."""
    link = root / "flip"
    inside = root / "hello.txt"
    outside = root.parent / "outside" / "secret.txt"
    link.symlink_to(inside)  # here, not in the thread: where links cannot be made, skipped
    stop = threading.Event()

    def flipper() -> None:
        tmp = root / "flip.tmp"
        while not stop.is_set():
            for target in (inside, outside):
                tmp.unlink(missing_ok=True)
                tmp.symlink_to(target)
                tmp.replace(link)

    t = threading.Thread(target=flipper, daemon=True)
    statuses: set[int] = set()
    async with running_server(make_config(root)) as (_, port):
        t.start()
        try:
            client = await connect(port)
            for _ in range(400):
                r = await client.get("/flip")
                assert b"OUTSIDE" not in r.body
                statuses.add(r.status)
            await client.stream.aclose()
        finally:
            stop.set()
            t.join()
    assert statuses <= {200, 404}


async def test_a_bug_in_one_connection_does_not_stop_the_server(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from serverio.http.core import route as real
    from serverio.pipeline import exchange as _exchange

    calls = 0

    def flaky_route(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("injected bug")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_exchange, "route", flaky_route)
    async with running_server(make_config(root)) as (srv, port):
        broken = await connect(port)
        await broken.send_raw(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        assert await broken.at_eof()
        fine = await connect(port)
        assert (await fine.get("/hello.txt")).status == 200
        for c in (broken, fine):
            await c.stream.aclose()
    assert srv.stats.conns.internal_errors == 1
    assert "injected bug" in caplog.text
