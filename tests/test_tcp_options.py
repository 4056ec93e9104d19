"""The TCP options of an accepted plaintext connection (TCP_NODELAY, TCP_NOTSENT_LOWAT).

trio's SocketStream sets both when it is made.  A connection that is answered
in one small write and then closed makes none: Nagle's algorithm can only
hold a segment back while earlier data is unacknowledged, and the close sends
what is queued.  Every connection that writes more than that has both set
before its second write.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

from serverio.net import emit as _connection

from .conftest import connect, make_config, running_server, wait_until

_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", None)


def _spy_tcp_options(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(local port, option) of every IPPROTO_TCP setsockopt on a trio socket."""
    calls: list[tuple[int, int]] = []
    with socket.socket() as probe:
        cls = type(trio.socket.from_stdlib_socket(probe))
    real = cls.setsockopt

    def spy(self: trio.socket.SocketType, level: int, option: int, *args: object) -> None:
        if level == socket.IPPROTO_TCP:
            try:
                calls.append((int(self.getsockname()[1]), option))
            except OSError:
                calls.append((-1, option))
        real(self, level, option, *args)  # type: ignore[call-overload]

    monkeypatch.setattr(cls, "setsockopt", spy)
    return calls


def _server_side(calls: list[tuple[int, int]], port: int) -> list[int]:
    # The server's connection sockets have the listener's port as local port.
    return [option for local, option in calls if local == port]


def test_a_small_connection_close_answer_sets_no_tcp_options(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _connection.SOCKET_FD_IO:
        pytest.skip("the one-write answer is the POSIX socket path (SOCKET_FD_IO off here)")
    calls = _spy_tcp_options(monkeypatch)

    async def main() -> list[int]:
        async with running_server(make_config(root)) as (srv, port):
            for path in ("/data.bin", "/missing.txt"):
                client = await connect(port)
                got = await client.get(path, headers="Connection: close\r\n")
                assert got.status in (200, 404)
                with trio.fail_after(10):
                    assert await client.at_eof()
                await client.stream.aclose()
            await wait_until(lambda: not srv.connections)
            return _server_side(calls, port)

    assert trio.run(main) == []


def test_a_keep_alive_connection_has_nodelay_and_lowat_after_its_first_answer(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _spy_tcp_options(monkeypatch)

    async def main() -> tuple[int, int | None, list[int]]:
        async with running_server(make_config(root)) as (srv, port):
            client = await connect(port)
            got = await client.get("/data.bin")
            assert got.status == 200
            await wait_until(lambda: len(srv.connections) == 1)
            (conn,) = srv.connections
            sock = conn.stream.socket  # type: ignore[attr-defined]
            nodelay = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            lowat = None if _LOWAT is None else sock.getsockopt(socket.IPPROTO_TCP, _LOWAT)
            got = await client.get("/data.bin")
            assert got.status == 200
            await client.stream.aclose()
            await wait_until(lambda: not srv.connections)
            return nodelay, lowat, _server_side(calls, port)

    nodelay, lowat, options = trio.run(main)
    assert nodelay != 0
    assert lowat in (None, 16384)
    # Set once, before the first answer went out (not again per request).
    assert options.count(socket.TCP_NODELAY) == 1


def test_a_large_connection_close_answer_sets_the_tcp_options_first(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _spy_tcp_options(monkeypatch)

    async def main() -> list[int]:
        async with running_server(make_config(root)) as (srv, port):
            client = await connect(port)
            got = await client.get("/big.bin", headers="Connection: close\r\n")
            assert got.status == 200 and len(got.body) == 300_000
            await client.stream.aclose()
            await wait_until(lambda: not srv.connections)
            return _server_side(calls, port)

    options = trio.run(main)
    assert socket.TCP_NODELAY in options
    if _LOWAT is not None:
        assert _LOWAT in options
