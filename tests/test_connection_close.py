"""How a connection's socket is closed when its task ends."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

from serverio.net import connection as _connection

from .conftest import connect, make_config, running_server, wait_until


async def _serve_then_count(root: Path, calls: list[object]) -> tuple[int, int]:
    """notify_closing calls for the server's connection sockets: after two
    connections ended, and after five more that reused their fd numbers."""
    async with running_server(make_config(root)) as (srv, port):

        def server_side() -> int:
            # Client sockets end at the port, connection sockets start there.
            return sum(1 for local in calls if local == port)

        expected = (root / "data.bin").read_bytes()
        # One connection that closes after its answer, one that waits for a
        # next request (so its fd was registered with trio's epoll) and then
        # sees the client go away.
        closing = await connect(port)
        got = await closing.get("/data.bin", headers="Connection: close\r\n")
        assert got.status == 200 and got.body == expected
        with trio.fail_after(10):
            assert await closing.at_eof()
        await closing.stream.aclose()
        waiting = await connect(port)
        got = await waiting.get("/data.bin")
        assert got.status == 200
        await wait_until(lambda: len(srv.connections) == 1)
        await waiting.stream.aclose()
        await wait_until(lambda: not srv.connections)
        during = server_side()
        # The fd numbers are reused by the next connections: each is served.
        for _ in range(5):
            again = await connect(port)
            got = await again.get("/data.bin")
            assert got.status == 200 and got.body == expected
            await again.stream.aclose()
        await wait_until(lambda: not srv.connections)
        return during, server_side()


def test_a_finished_connection_closes_its_fd_without_trio_notify_closing(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _connection.SOCKET_FD_IO:
        pytest.skip("the raw-fd close is the POSIX socket path (SOCKET_FD_IO off here)")
    calls: list[object] = []
    real = trio.lowlevel.notify_closing

    def counting(handle: socket.socket) -> None:
        try:
            calls.append(handle.getsockname()[1])
        except OSError:
            calls.append(None)
        real(handle)

    monkeypatch.setattr(trio.lowlevel, "notify_closing", counting)
    during, after = trio.run(_serve_then_count, root, calls)
    assert during == 0 and after == 0
