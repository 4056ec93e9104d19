"""The proxied request's fast path (docs/performance.md "Reverse proxy"):
a pooled exchange runs under one cancel scope (no connect deadline for a
pooled connection, the head deadline moved onto the exchange's scope),
a response chunk already read is taken without a deadline scope, an
address-literal upstream is connected without trio's resolver and
happy-eyeballs nursery, a request without content is one send, and a
send a plain socket takes whole skips trio's send_all.  The
deadlines they replace still hold, to the MockClock's tick
(trio.testing.MockClock over memory streams)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import h11
import pytest
import trio
import trio.testing

from serverio.config import ProxyRoute
from serverio.errors import HTTPError
from serverio.model import BodyCut
from serverio.observe.stats import ProxyStats
from serverio.proxy.client import UpstreamConn, UpstreamError, open_upstream

from .test_proxy_cancel import Harness, read_request


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[float]:
    """Count the calls of ``trio.<name>`` (a cancel-scope factory)."""
    calls: list[float] = []
    real: Callable[..., Any] = getattr(trio, name)

    def counted(*args: Any, **kw: Any) -> Any:
        calls.append(trio.current_time())
        return real(*args, **kw)

    monkeypatch.setattr(trio, name, counted)
    return calls


async def _answer(end: trio.abc.Stream, conn: h11.Connection | None, body: bytes) -> h11.Connection:
    """Read one request on ``end`` and answer 200 with ``body`` in one write."""
    if conn is None:
        conn = await read_request(end)
    else:
        conn.start_next_cycle()
        while not isinstance(event := conn.next_event(), h11.EndOfMessage):
            if event is h11.NEED_DATA:
                conn.receive_data(bytes(await end.receive_some(65536)))
    head = h11.Response(status_code=200, headers=[("content-length", str(len(body)))])
    await end.send_all(
        conn.send(head) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
    )
    return conn


async def test_a_pooled_exchange_opens_one_scope_and_a_buffered_body_none(
    root: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(root)
    async with trio.open_nursery() as nursery:

        async def upstream_side() -> None:
            while not h.ends:  # noqa: ASYNC110 - state the peer owns
                await trio.sleep(0.01)
            conn = await _answer(h.ends[0], None, b"one")
            await _answer(h.ends[0], conn, b"two")

        nursery.start_soon(upstream_side)
        _, body = await h.forward()  # a new connection: the connect deadline applies
        assert await body.source.next_chunk() == b"one" and await body.source.next_chunk() == b""
        assert len(h.pool.idle) == 1
        after = _counting(monkeypatch, "move_on_after")
        at = _counting(monkeypatch, "move_on_at")
        _, body = await h.forward()  # pooled: one scope for the exchange
        # ... and one for the watch grace of the head (serverio.proxy.service
        # WATCH_GRACE: the client is watched only past it; no watcher task).
        assert (len(after), len(at)) == (1, 1)
        await trio.sleep(0.1)  # the whole answer is in the connection's buffer
        assert await body.source.next_chunk() == b"two" and await body.source.next_chunk() == b""
        assert (len(after), len(at)) == (1, 1)  # no deadline scope for buffered events
        body.close()
    assert h.stats.reuses == 1 and h.pool.inflight == 0 and len(h.pool.idle) == 1


async def test_a_pooled_connection_still_meets_the_head_timeout(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root, proxy_head_timeout=4.0, proxy_total_timeout=60.0)
    async with trio.open_nursery() as nursery:

        async def upstream_side() -> None:
            while not h.ends:  # noqa: ASYNC110 - state the peer owns
                await trio.sleep(0.01)
            await _answer(h.ends[0], None, b"x")  # then never answers again

        nursery.start_soon(upstream_side)
        _, body = await h.forward()
        assert await body.source.next_chunk() == b"x" and await body.source.next_chunk() == b""
        start = trio.current_time()
        with pytest.raises(HTTPError) as err:
            await h.forward()
        assert err.value.status == 504 and trio.current_time() - start == pytest.approx(4.0)
        nursery.cancel_scope.cancel()
    assert h.stats.timeouts_head == 1 and h.stats.timeouts_total == 0
    assert h.pool.opened == 0 and h.pool.inflight == 0


async def test_a_total_shorter_than_the_head_timeout_is_the_total_timeout(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root, proxy_head_timeout=30.0, proxy_total_timeout=3.0)
    start = trio.current_time()
    with pytest.raises(HTTPError) as err:
        await h.forward()  # the upstream never answers
    assert err.value.status == 504 and trio.current_time() - start == pytest.approx(3.0)
    assert h.stats.timeouts_total == 1 and h.stats.timeouts_head == 0


async def test_a_body_that_stalls_after_buffered_chunks_meets_the_idle_timeout(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root, proxy_idle_timeout=2.0)
    async with trio.open_nursery() as nursery:

        async def upstream_side() -> None:
            while not h.ends:  # noqa: ASYNC110 - state the peer owns
                await trio.sleep(0.01)
            conn = await read_request(h.ends[0])
            head = h11.Response(status_code=200, headers=[("content-length", "10")])
            await h.ends[0].send_all(conn.send(head) + conn.send(h11.Data(data=b"abc")))

        nursery.start_soon(upstream_side)
        _, body = await h.forward()
        assert await body.source.next_chunk() == b"abc"  # buffered with the head
        start = trio.current_time()
        with pytest.raises(BodyCut):
            await body.source.next_chunk()
        assert trio.current_time() - start == pytest.approx(2.0)
        body.close()
    assert h.stats.timeouts_idle == 1 and h.pool.opened == 0 and h.pool.inflight == 0


async def test_an_address_literal_is_connected_without_the_resolver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def no_resolver(*args: object, **kw: object) -> trio.SocketStream:
        raise AssertionError("trio.open_tcp_stream used for an address literal")

    monkeypatch.setattr(trio, "open_tcp_stream", no_resolver)
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    with trio.fail_after(5):
        async with listener, trio.open_nursery() as nursery:

            async def accept_one() -> None:
                peer = await listener.accept()
                await peer.send_all(b"hello")
                await peer.aclose()

            nursery.start_soon(accept_one)
            stream = await open_upstream(ProxyRoute("/", "u", host="127.0.0.1", port=port))
            assert isinstance(stream, trio.SocketStream)
            assert await stream.receive_some(5) == b"hello"
            await stream.aclose()


async def test_a_refused_literal_is_a_connect_error_and_a_name_still_resolves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()  # nothing listens there now
    with trio.fail_after(5), pytest.raises(UpstreamError) as err:
        await open_upstream(ProxyRoute("/", "u", host="127.0.0.1", port=port))
    assert err.value.kind == "connect"
    names: list[str] = []

    async def resolver(host: str, port: int, **kw: object) -> trio.SocketStream:
        names.append(host)
        raise OSError("refused")

    monkeypatch.setattr(trio, "open_tcp_stream", resolver)
    with pytest.raises(UpstreamError):
        await open_upstream(ProxyRoute("/", "u", host="localhost", port=port))
    assert names == ["localhost"]


class _Recorder(trio.abc.Stream):
    """A stream that records every send_all (the upstream side of one exchange)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.sent.append(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        pass

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return b""

    async def aclose(self) -> None:
        pass


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_a_request_without_content_is_one_send_and_never_an_empty_one() -> None:
    rec = _Recorder()
    conn = UpstreamConn(rec)
    await conn.send_request(b"GET", b"/x", [(b"host", b"t")], None, ProxyStats())
    assert rec.sent == [b"GET /x HTTP/1.1\r\nhost: t\r\n\r\n"]
    rec = _Recorder()
    conn = UpstreamConn(rec)
    fields = [(b"host", b"t"), (b"content-length", b"4")]
    await conn.send_request(b"PUT", b"/x", fields, _chunks(b"ab", b"cd"), ProxyStats())
    assert rec.sent[1:] == [b"ab", b"cd"]  # no empty send for the (empty) end
    rec = _Recorder()
    conn = UpstreamConn(rec)
    fields = [(b"host", b"t"), (b"transfer-encoding", b"chunked")]
    await conn.send_request(b"PUT", b"/x", fields, _chunks(b"ab"), ProxyStats())
    assert rec.sent[1:] == [b"2\r\nab\r\n", b"0\r\n\r\n"]


async def _socket_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    """A connected loopback pair of trio SocketStreams (port 0)."""
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    async with listener:
        ours = await open_upstream(ProxyRoute("/", "u", host="127.0.0.1", port=port))
        theirs = await listener.accept()
    assert isinstance(ours, trio.SocketStream) and isinstance(theirs, trio.SocketStream)
    return ours, theirs


async def _read_all(stream: trio.SocketStream, size: int) -> bytes:
    got = b""
    while len(got) < size:
        got += await stream.receive_some(65536)
    return got


@pytest.mark.skipif(os.name != "posix", reason="the fd fast path is POSIX only")
async def test_a_request_to_a_plain_socket_is_written_without_trio_send_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    want = b"GET /x HTTP/1.1\r\nhost: t\r\n\r\n"
    with trio.fail_after(5):
        ours, theirs = await _socket_pair()
        sends: list[bytes] = []
        real_send_all = trio.SocketStream.send_all

        async def counted(self: trio.SocketStream, data: bytes | bytearray | memoryview) -> None:
            sends.append(bytes(data))
            await real_send_all(self, data)

        monkeypatch.setattr(trio.SocketStream, "send_all", counted)
        conn = UpstreamConn(ours)
        await conn.send_request(b"GET", b"/x", [(b"host", b"t")], None, ProxyStats())
        assert sends == [] and await _read_all(theirs, len(want)) == want
        # A partial write: the rest goes through send_all (with its waits).
        real_write = os.write
        monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data)[:5]))
        conn2 = UpstreamConn(ours)
        await conn2.send_request(b"GET", b"/x", [(b"host", b"t")], None, ProxyStats())
        monkeypatch.setattr(os, "write", real_write)
        assert sends == [want[5:]] and await _read_all(theirs, len(want)) == want
        conn.close()  # closes the socket: no fast path on a closed fd
        assert conn._sock is not None and conn._sock.fileno() == -1
        await theirs.aclose()


async def test_ready_chunk_hands_over_what_was_read_and_never_waits(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # The head, body and end in one write: the body is in hand (the
    # transport sends it with the head), then the end, which pools the
    # connection, all without an await.
    h = Harness(root)
    async with trio.open_nursery() as nursery:

        async def upstream_side() -> None:
            while not h.ends:  # noqa: ASYNC110 - state the peer owns
                await trio.sleep(0.01)
            await _answer(h.ends[0], None, b"one")

        nursery.start_soon(upstream_side)
        _, body = await h.forward()
    source = body.source
    assert source.ready_chunk() == b"one"  # type: ignore[attr-defined]
    assert source.ready_chunk() == b"" and len(h.pool.idle) == 1  # type: ignore[attr-defined]
    assert await source.next_chunk() == b"" and h.stats.bytes_down == 3
    assert h.pool.inflight == 0


async def test_ready_chunk_is_none_when_the_body_is_still_to_come(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root)
    async with trio.open_nursery() as nursery:

        async def upstream_side() -> None:
            while not h.ends:  # noqa: ASYNC110 - state the peer owns
                await trio.sleep(0.01)
            conn = await read_request(h.ends[0])
            head = h11.Response(status_code=200, headers=[("content-length", "3")])
            await h.ends[0].send_all(conn.send(head))
            await trio.sleep(1)
            await h.ends[0].send_all(
                conn.send(h11.Data(data=b"two")) + conn.send(h11.EndOfMessage())
            )

        nursery.start_soon(upstream_side)
        _, body = await h.forward()
        assert body.source.ready_chunk() is None  # type: ignore[attr-defined]
        assert await body.source.next_chunk() == b"two"
        assert await body.source.next_chunk() == b""
    assert len(h.pool.idle) == 1 and h.pool.inflight == 0


@pytest.mark.skipif(os.name != "posix", reason="the os.read fast path is POSIX's")
async def test_a_first_read_takes_what_is_there_after_one_checkpoint_else_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The upstream answered while the other tasks ran: read without a wait
    # for readability; nothing there yet: wait, then read.
    waits: list[int] = []
    real = trio.lowlevel.wait_readable

    async def counted(sock: Any) -> None:
        waits.append(1)
        await real(sock)

    monkeypatch.setattr(trio.lowlevel, "wait_readable", counted)
    a, b = trio.socket.socketpair()
    with a, b:
        await b.send(b"HTTP/1.1 200 OK\r\n")
        assert await UpstreamConn._first_read(a) == b"HTTP/1.1 200 OK\r\n"
        assert waits == []
        async with trio.open_nursery() as nursery:

            async def later() -> None:
                await trio.sleep(0.01)
                await b.send(b"late")

            nursery.start_soon(later)
            with trio.fail_after(5):
                assert await UpstreamConn._first_read(a) == b"late"
        assert waits == [1]
        a.close()
        with pytest.raises(trio.ClosedResourceError):
            await UpstreamConn._first_read(a)


class _SocketHarness(Harness):
    """Harness whose upstream connections are socket pairs (the os.read
    fast path of a plain POSIX socket)."""

    async def _connect(self, route: object) -> trio.abc.Stream:
        ours, theirs = trio.socket.socketpair()
        self.ends.append(trio.SocketStream(theirs))
        return trio.SocketStream(ours)

    async def close(self) -> None:
        self.svc.close_idle()
        for end in self.ends:
            await end.aclose()

    async def answer(self, i: int, data: bytes) -> trio.abc.Stream:
        """The ``i``-th upstream connection, once the proxy has made it and
        sent its request on it, answered with ``data``."""
        while len(self.ends) <= i:  # noqa: ASYNC110 - state the proxy owns
            await trio.sleep(0.001)
        await read_request(self.ends[i])
        await self.ends[i].send_all(data)
        return self.ends[i]


_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n"


@pytest.mark.skipif(os.name != "posix", reason="the os.read fast path is POSIX's")
async def test_a_head_there_after_one_round_needs_no_cancel_scope(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pooled, and the answer is in the socket when the proxy reads after
    # its one scheduling round (written here before the request, which
    # the proxy does not notice): no deadline scope at all.  Half a head
    # then: one scope (_quick_head) for the rest, as before.
    h = _SocketHarness(root)
    up = h.ends
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(h.answer, 0, _OK + b"one")
            _, body = await h.forward()
            assert await body.source.next_chunk() == b"one"
            assert await body.source.next_chunk() == b""
        at = _counting(monkeypatch, "move_on_at")
        await up[0].send_all(_OK + b"two")
        _, body = await h.forward()
        assert at == []  # no cancel scope: the head was there
        assert await body.source.next_chunk() == b"two"
        assert await body.source.next_chunk() == b""
        await up[0].send_all(_OK[:20])
        async with trio.open_nursery() as nursery:

            async def rest() -> None:
                await trio.sleep(0.01)
                await up[0].send_all(_OK[20:] + b"end")

            nursery.start_soon(rest)
            _, body = await h.forward()
        assert len(at) == 1  # _quick_head's, for the rest of the head
        assert await body.source.next_chunk() == b"end"
        assert await body.source.next_chunk() == b""
    assert h.stats.reuses == 2 and len(h.ends) == 1 and h.pool.inflight == 0
    await h.close()


@pytest.mark.skipif(os.name != "posix", reason="the os.read fast path is POSIX's")
async def test_a_pooled_connection_closed_before_the_round_is_retried(root: Path) -> None:
    # The upstream closed its idle pooled connection: head_soon reads EOF
    # before any byte, and the request goes once more on a new connection.
    h = _SocketHarness(root)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def answers() -> None:
                await (await h.answer(0, _OK + b"one")).aclose()
                await h.answer(1, _OK + b"two")

            nursery.start_soon(answers)
            _, body = await h.forward()
            assert await body.source.next_chunk() == b"one"
            assert await body.source.next_chunk() == b""
            await trio.sleep(0.01)  # the close is in
            _, body = await h.forward()
            assert await body.source.next_chunk() == b"two"
            assert await body.source.next_chunk() == b""
    assert h.stats.reuses == 1 and h.stats.connects == 2
    await h.close()
