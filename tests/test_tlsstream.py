"""serverio.net.tlsstream: the server's TLS stream, against trio's client.

The server end is a :class:`TLSStream` over one end of a socket pair, the
client a :class:`trio.SSLStream` over the other (trustme certificates), so
every record crosses a real socket; the HTTP-level tests run the whole
server on 127.0.0.1 (port 0).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trustme

from serverio.net.tlsstream import TLSStream

from .conftest import make_config, running_server, wait_until


def _server_context(cert_files: tuple[Path, Path]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*map(str, cert_files))
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    return ctx


def _client_context(ca: trustme.CA, *, alpn: list[str] | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx


@asynccontextmanager
async def _pair(
    ca: trustme.CA,
    cert_files: tuple[Path, Path],
    *,
    https_compatible: bool = True,
    handshake: bool = True,
) -> AsyncIterator[tuple[TLSStream, trio.SSLStream[trio.SocketStream]]]:
    """A server TLSStream and a client SSLStream on a socket pair, both
    through the handshake (unless ``handshake`` is False)."""
    a, b = socket.socketpair()
    server = TLSStream(
        trio.SocketStream(trio.socket.from_stdlib_socket(a)), _server_context(cert_files)
    )
    tcp = trio.SocketStream(trio.socket.from_stdlib_socket(b))
    client = trio.SSLStream(
        tcp,
        _client_context(ca, alpn=["http/1.1"]),
        server_hostname="127.0.0.1",
        https_compatible=https_compatible,
    )
    try:
        if handshake:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server.do_handshake)
                nursery.start_soon(client.do_handshake)
        yield server, client
    finally:
        await trio.aclose_forcefully(server)
        await trio.aclose_forcefully(tcp)


async def test_handshake_alpn_and_bytes_both_ways(
    ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    async with _pair(ca, cert_files) as (server, client):
        assert server.selected_alpn_protocol() == "http/1.1"
        await client.send_all(b"ping")
        assert await server.receive_some(100) == b"ping"
        # A small write goes out at once: nothing left pending, no wait.
        assert server.send_nowait(b"pong") is True
        assert server.pending == 0
        assert await client.receive_some(100) == b"pong"
        await server.send_all(b"again")
        assert await client.receive_some(100) == b"again"


async def test_records_openssl_holds_are_read_without_a_socket_wake_up(
    ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    """One socket read takes many records, one decryption gives at most
    what was asked: the rest must be readable without the socket waking
    the reader again (it never will: the bytes are out of the kernel)."""
    data = bytes(range(256)) * 400  # 100 KiB: seven records
    async with _pair(ca, cert_files) as (server, client):
        await client.send_all(data)
        got = bytearray()
        with trio.fail_after(5):
            while len(got) < len(data):
                # The HTTP/1.1 head reader's loop with part of a head in
                # hand: wait until more can be read, then read it.
                await server.wait_readable()
                piece = server.receive_nowait(1000)
                if piece is None:
                    continue
                assert piece
                got += piece
        assert bytes(got) == data


async def test_a_full_socket_keeps_the_rest_pending_in_order(
    ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    """A write the socket cannot take whole stays pending; flush writes it,
    reporting progress, and a later write follows it in order."""
    first = b"a" * (8 << 20)
    second = b"b" * 1000
    received = bytearray()
    moves = 0

    def progress() -> None:
        nonlocal moves
        moves += 1

    async with _pair(ca, cert_files) as (server, client):
        assert server.send_nowait(first) is False  # the client is not reading yet
        assert server.pending > 0

        async def read_all() -> None:
            while len(received) < len(first) + len(second):
                received.extend(await client.receive_some(65536))

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_all)
                await server.flush(progress)
                assert server.pending == 0
                await server.send_all(second)
    assert moves >= 1
    assert bytes(received) == first + second


async def test_receiving_while_another_task_flushes(
    ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    """A watcher task reads while the answering task waits to write (the
    HTTP/1.1 client watcher): both go on, and the bytes stay in order."""
    big = b"x" * (4 << 20)
    async with _pair(ca, cert_files) as (server, client):
        heard = bytearray()

        async def watcher() -> None:
            heard.extend(await server.receive_some(100))

        async def reader() -> None:
            got = 0
            while got < len(big) + 3:
                got += len(await client.receive_some(65536))

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watcher)
                server.send_nowait(big)
                nursery.start_soon(server.flush)
                await trio.testing.wait_all_tasks_blocked()
                await client.send_all(b"hey")
                nursery.start_soon(reader)
                await trio.testing.wait_all_tasks_blocked()
                await server.send_all(b"end")
        assert bytes(heard) == b"hey"


async def test_a_transport_eof_without_close_notify_is_an_eof(
    ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    async with _pair(ca, cert_files) as (server, client):
        await client.send_all(b"last")
        # A TCP FIN without close_notify (a browser's way); send_eof, as a
        # close with the server's session tickets unread would be a reset.
        await client.transport_stream.send_eof()
        assert await server.receive_some(100) == b"last"
        with trio.fail_after(5):
            assert await server.receive_some(100) == b""


async def test_the_peers_close_notify_is_an_eof(
    ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    async with _pair(ca, cert_files) as (server, client):
        # The client reads first (and with it the server's session tickets:
        # a close with bytes unread would be a reset, not a FIN).
        await server.send_all(b"bye")
        assert await client.receive_some(100) == b"bye"
        await client.aclose()
        with trio.fail_after(5):
            assert await server.receive_some(100) == b""


async def test_aclose_sends_close_notify_then_refuses_use(
    ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    # A client that is not https_compatible raises on an EOF without
    # close_notify: a clean b"" shows the server sent it.
    async with _pair(ca, cert_files, https_compatible=False) as (server, client):
        await server.aclose()
        with trio.fail_after(5):
            assert await client.receive_some(100) == b""
        with pytest.raises(trio.ClosedResourceError):
            server.send_nowait(b"late")
        with pytest.raises(trio.ClosedResourceError):
            await server.receive_some(100)
        await server.aclose()  # twice is fine


async def test_plain_http_to_the_handshake_is_a_broken_stream_with_the_ssl_error(
    ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    async with _pair(ca, cert_files, handshake=False) as (server, client):
        await client.transport_stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        with trio.fail_after(5), pytest.raises(trio.BrokenResourceError) as caught:
            await server.do_handshake()
        assert isinstance(caught.value.__cause__, ssl.SSLError)


async def test_a_peer_that_leaves_mid_handshake(
    ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    async with _pair(ca, cert_files, handshake=False) as (server, client):
        await client.transport_stream.aclose()
        with trio.fail_after(5), pytest.raises(trio.BrokenResourceError) as caught:
            await server.do_handshake()
        assert isinstance(caught.value.__cause__, ssl.SSLEOFError)


async def test_a_cancelled_receive_loses_no_bytes(
    ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    async with _pair(ca, cert_files) as (server, client):
        with trio.move_on_after(0.05) as scope:
            await server.receive_some(100)  # nothing comes: cancelled while waiting
        assert scope.cancelled_caught
        await client.send_all(b"after")
        with trio.fail_after(5):
            assert await server.receive_some(100) == b"after"


# ---------------------------------------------------------------- HTTP


async def _tls_client(port: int, ca: trustme.CA) -> trio.SSLStream[trio.SocketStream]:
    tcp = await trio.open_tcp_stream("127.0.0.1", port)
    stream = trio.SSLStream(
        tcp, _client_context(ca), server_hostname="127.0.0.1", https_compatible=True
    )
    await stream.do_handshake()
    return stream


async def test_pipelined_requests_over_tls_are_all_answered(
    root: Path, ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    """1,000 requests in one write (about 70 KiB: five records, more than
    one read of the head reader decrypts): every one is answered, the
    last with the connection's close."""
    certfile, keyfile = cert_files
    cfg = make_config(root, certfile=str(certfile), keyfile=str(keyfile), max_requests=1000)
    request = b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 30 + b"\r\n\r\n"
    async with running_server(cfg) as (_srv, port):
        stream = await _tls_client(port, ca)
        await stream.send_all(request * 1000)
        got = bytearray()
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                got += chunk
        await stream.aclose()
    assert got.count(b"HTTP/1.1 200 OK\r\n") == 1000
    assert got.count(b"hello world\n") == 1000


async def test_a_client_that_stops_reading_over_tls_meets_the_write_deadline(
    root: Path, ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    certfile, keyfile = cert_files
    (root / "huge.bin").write_bytes(b"z" * (16 << 20))
    cfg = make_config(root, certfile=str(certfile), keyfile=str(keyfile), write_timeout=0.5)
    async with running_server(cfg) as (srv, port):
        stream = await _tls_client(port, ca)
        await stream.send_all(b"GET /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        # Never read: the server's writes stop making progress.
        with trio.fail_after(15):
            await wait_until(lambda: srv.stats.timeouts.write == 1)
        await trio.aclose_forcefully(stream)


class _EndlessRecords:
    """A simulated peer (fake socket): records arrive as fast as they are
    read, forever."""

    def __init__(self) -> None:
        self.reads = 0

    def recv(self, n: int) -> bytes:
        self.reads += 1
        assert self.reads < 1000, "receive_nowait never stopped reading"
        return b"\x17" * 100


class _NoApplicationData:
    """A simulated OpenSSL object (fake): every record read so far carries
    no application data (what key updates or empty records give)."""

    def read(self, n: int) -> bytes:
        raise ssl.SSLWantReadError("no application data")

    def pending(self) -> int:
        return 0


async def test_simulated_records_without_data_give_the_loop_a_round(
    ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    """A peer whose records carry no application data, sent as fast as
    they are read, does not keep one call reading: it reports nothing yet
    after a bounded number of socket reads, and the caller's wait is a
    scheduling round."""
    from serverio.net import tlsstream

    async with _pair(ca, cert_files) as (server, _client):
        peer = _EndlessRecords()
        real = (server._sock, server._obj, server._in)
        server._sock = peer  # type: ignore[assignment]
        server._obj = _NoApplicationData()  # type: ignore[assignment]
        server._in = ssl.MemoryBIO()  # what the fake peer sends piles up here
        try:
            assert server.receive_nowait(100) is None
        finally:
            # The real ones back, so that the pair closes its socket.
            server._sock, server._obj, server._in = real
        assert peer.reads == tlsstream._READS
