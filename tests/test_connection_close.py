"""How a connection's socket is closed when its task ends."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

from serverio.net import emit as _connection
from serverio.wire import h1facts as _h1facts

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


def test_a_warm_connection_close_answer_is_the_kept_alive_head_plus_connection_close(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from serverio.fs import filecache as _filecache
    from serverio.wire.h1 import head_bytes

    monkeypatch.setattr(_filecache, "RACY_SECONDS", -3600.0)  # cache at once

    async def main() -> tuple[bytes, bytes]:
        async with running_server(make_config(root)) as (srv, port):
            kept = await connect(port)
            for _ in range(3):  # the memoised head exists from the second hit on
                got = await kept.get("/data.bin")
                assert got.status == 200
            await kept.stream.aclose()
            closing = await connect(port)
            await closing.stream.send_all(
                b"GET /data.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            raw = b""
            with trio.fail_after(10):
                while chunk := await closing.stream.receive_some(65536):
                    raw += chunk
            await closing.stream.aclose()
            await wait_until(lambda: not srv.connections)
            head, _, body = raw.partition(b"\r\n\r\n")
            assert body == (root / "data.bin").read_bytes()
            return head + b"\r\n\r\n", body

    head, _ = trio.run(main)
    lines = head.split(b"\r\n")[:-2]
    status = int(lines[0].split()[1])
    fields = [tuple(line.split(b": ", 1)) for line in lines[1:]]
    assert fields[-1] == (b"Connection", b"close")
    # Exactly what the head serialiser writes for a closing answer (every
    # field, nosniff first, is the plan's: the serialiser adds none).
    assert fields[0] == (b"X-Content-Type-Options", b"nosniff")
    plain = [(n.lower(), v) for n, v in fields[:-1]]
    assert head == head_bytes(status, plain, close=True, keep_alive_10=False)


@pytest.mark.parametrize(
    ("value", "tokens"),
    [
        (b"close", {b"close"}),
        (b"Close", {b"close"}),
        (b"keep-alive", {b"keep-alive"}),
        (b"Keep-Alive", {b"keep-alive"}),
        (b"close, keep-alive", {b"close", b"keep-alive"}),
        (b" close ,TE", {b"close", b"te"}),
        (b"upgrade", {b"upgrade"}),
    ],
)
def test_connection_field_tokens_are_split_and_lower_cased(
    value: bytes, tokens: set[bytes]
) -> None:
    assert set(_h1facts._tokens(value)) == tokens
