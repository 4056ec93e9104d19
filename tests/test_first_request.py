"""A new connection's first request over a real loopback socket.

A first head that is complete at the first read is answered before the
connection's lifetime cancel scope exists; every other case (a head in
pieces, a silent client, pipelined and keep-alive requests after it) goes
on under that scope with the usual deadlines.
"""

from __future__ import annotations

from pathlib import Path

import trio

from .conftest import make_config, running_server, wait_until

_GET = b"GET /data.bin HTTP/1.1\r\nHost: x\r\n\r\n"


async def _read_response(stream: trio.SocketStream) -> bytes:
    """One whole response: its head, then Content-Length bytes of body."""
    got = b""
    with trio.fail_after(10):
        while b"\r\n\r\n" not in got:
            chunk = await stream.receive_some(65536)
            assert chunk, "EOF before a whole head"
            got += chunk
        head, _, body = got.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"\r\ncontent-length: ", 1)[1].split(b"\r\n", 1)[0])
        while len(body) < length:
            chunk = await stream.receive_some(65536)
            assert chunk, "EOF before the whole body"
            body += chunk
    return head + b"\r\n\r\n" + body


async def _open(port: int) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", port)


def _exchange(root: Path, sent: bytes, **config: float) -> tuple[bytes, int]:
    """Open one connection, send ``sent`` (may be empty), read until the
    server closes it, and wait until the server holds no connection; what
    was read and the server's head-timeout count."""

    async def main() -> tuple[bytes, int]:
        async with running_server(make_config(root, **config)) as (srv, port):
            stream = await _open(port)
            if sent:
                await stream.send_all(sent)
            got = b""
            with trio.fail_after(10):
                while chunk := await stream.receive_some(65536):
                    got += chunk
            await stream.aclose()
            await wait_until(lambda: not srv.connections)
            return got, srv.stats.timeouts.head

    return trio.run(main)


def test_a_first_head_in_two_pieces_is_answered_and_the_connection_kept(root: Path) -> None:
    async def main() -> tuple[bytes, bytes]:
        async with running_server(make_config(root)) as (srv, port):
            stream = await _open(port)
            await stream.send_all(_GET[:10])
            await trio.sleep(0.2)  # the server's first read finds a part only
            await stream.send_all(_GET[10:])
            first = await _read_response(stream)
            await stream.send_all(_GET)
            second = await _read_response(stream)
            await stream.aclose()
            await wait_until(lambda: not srv.connections)
            return first, second

    first, second = trio.run(main)
    assert first.startswith(b"HTTP/1.1 200 ") and first.endswith((root / "data.bin").read_bytes())
    assert second.startswith(b"HTTP/1.1 200 ")


def test_a_first_head_that_never_completes_gets_408(root: Path) -> None:
    got, timeouts = _exchange(root, b"GET /data.bin HTTP/1.1\r\nHo", head_timeout=0.3)
    assert got.startswith(b"HTTP/1.1 408 ")
    assert timeouts == 1


def test_a_silent_new_connection_gets_408_after_the_head_timeout(root: Path) -> None:
    got, timeouts = _exchange(root, b"", head_timeout=0.3)
    assert got.startswith(b"HTTP/1.1 408 ")
    assert timeouts == 1


def test_two_pipelined_first_requests_are_both_answered(root: Path) -> None:
    closing = _GET.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
    got, _ = _exchange(root, _GET + closing)
    assert got.count(b"HTTP/1.1 200 ") == 2
    assert got.count(b"Connection: close\r\n") == 1


def test_a_malformed_first_request_gets_400_and_a_close(root: Path) -> None:
    got, _ = _exchange(root, b"GET /data.bin HTTP/1.1\r\nHost x\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 400 ") and b"Connection: close\r\n" in got
