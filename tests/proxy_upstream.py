"""A small upstream for the reverse-proxy tests: trio + h11, loopback, port 0.

It records what reaches it (every request head and its content, every
connection and how it ended), so a test can prove what the proxy sent, and
what it did *not* send.  Routes (the path after any prefix):

* ``/json``: 200, a JSON echo of the request (method, target, fields, body size);
* ``/stream?n=N&size=S&pause=P``: 200, chunked, N chunks of S bytes, P s apart;
* ``/length?size=S``: 200 with Content-Length S;
* ``/slow?delay=D``: the head after D seconds;
* ``/reset``: a head with Content-Length 100000, 10 bytes, then a TCP reset;
* ``/badframe``: a response with two different Content-Lengths (h11 refuses it);
* ``/clte``: a head with both Content-Length: 5 and Transfer-Encoding: chunked,
  a 2-byte chunked body, then waits on the connection (a request that
  arrives on it counts in ``Upstream.after_clte``);
* ``/never``: reads the request and never answers;
* ``/status?code=C``: status C with a short text body (or none for 204/304);
* anything else: 404 with ``upstream 404``.
"""

from __future__ import annotations

import functools
import json
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import h11
import trio


@dataclass
class Seen:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k == name.lower():
                return v
        return None

    def all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k == name.lower()]


@dataclass
class Upstream:
    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0  # accepted
    closed_by_peer: int = 0  # the proxy closed (EOF or reset) — not us
    open_now: int = 0
    started: trio.Event = field(default_factory=trio.Event)  # a /never or /slow request arrived
    after_clte: int = 0  # requests sent on a connection after its /clte answer


def _reset_close(stream: trio.SocketStream) -> None:
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


async def _serve(up: Upstream, stream: trio.SocketStream) -> None:
    up.connections += 1
    up.open_now += 1
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            req: h11.Request | None = None
            body = bytearray()
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        up.closed_by_peer += 1
                        return
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    req = event
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    up.closed_by_peer += 1
                    return
            assert req is not None
            seen = Seen(
                req.method.decode(),
                req.target.decode(),
                [(k.decode(), v.decode("latin-1")) for k, v in req.headers],
                bytes(body),
            )
            up.seen.append(seen)
            if not await _respond(up, conn, stream, seen):
                return
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
        up.closed_by_peer += 1
    finally:
        up.open_now -= 1
        if stream.socket.fileno() >= 0:
            stream.socket.close()


async def _send(conn: h11.Connection, stream: trio.SocketStream, event: h11.Event) -> None:
    if isinstance(event, h11.Data) and _head(conn):
        return  # a HEAD's response has no content
    data = conn.send(event)
    if data:
        await stream.send_all(data)


async def _respond(
    up: Upstream, conn: h11.Connection, stream: trio.SocketStream, seen: Seen
) -> bool:
    url = urlsplit(seen.target)
    q = {k: v[0] for k, v in parse_qs(url.query).items()}
    path = url.path.rstrip("/").rsplit("/", 1)[-1]
    if path == "json" or path == "echo":
        payload = json.dumps(
            {
                "method": seen.method,
                "target": seen.target,
                "headers": seen.headers,
                "size": len(seen.body),
            }
        ).encode()
        await _send(
            conn,
            stream,
            h11.Response(
                status_code=200,
                headers=[
                    ("Content-Type", "application/json"),
                    ("Content-Length", str(len(payload))),
                    ("Connection", "x-private"),
                    ("X-Private", "hop"),
                    ("Keep-Alive", "timeout=5"),
                    ("Server", "upstream"),
                ],
            ),
        )
        await _send(conn, stream, h11.Data(data=payload))
        await _send(conn, stream, h11.EndOfMessage())
        return True
    if path == "stream":
        n, size, pause = (
            int(q.get("n", "5")),
            int(q.get("size", "1000")),
            float(q.get("pause", "0")),
        )
        await _send(
            conn, stream, h11.Response(status_code=200, headers=[("Content-Type", "text/plain")])
        )
        for i in range(n):
            if pause:
                await trio.sleep(pause)
            await _send(conn, stream, h11.Data(data=bytes([65 + i % 26]) * size))
        await _send(conn, stream, h11.EndOfMessage())
        return True
    if path == "length":
        size = int(q.get("size", "100"))
        await _send(
            conn, stream, h11.Response(status_code=200, headers=[("Content-Length", str(size))])
        )
        await _send(conn, stream, h11.Data(data=b"x" * size))
        await _send(conn, stream, h11.EndOfMessage())
        return True
    if path == "slow":
        up.started.set()
        await trio.sleep(float(q.get("delay", "10")))
        await _send(conn, stream, h11.Response(status_code=200, headers=[("Content-Length", "4")]))
        await _send(conn, stream, h11.Data(data=b"slow"))
        await _send(conn, stream, h11.EndOfMessage())
        return True
    if path == "reset":
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n0123456789")
        await trio.sleep(0.05)
        _reset_close(stream)
        return False
    if path == "badframe":
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"
        )
        return False
    if path == "clte":
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"2\r\nab\r\n0\r\n\r\n"
        )
        try:
            if await stream.receive_some(65536):
                up.after_clte += 1  # the proxy reused the connection
        except trio.BrokenResourceError:
            pass
        up.closed_by_peer += 1
        return False
    if path == "never":
        up.started.set()
        try:
            while await stream.receive_some(65536):
                pass  # never answers; notices the proxy closing
        except trio.BrokenResourceError:
            pass
        up.closed_by_peer += 1
        return False
    if path == "status":
        code = int(q.get("code", "200"))
        if code in (204, 304):
            await _send(conn, stream, h11.Response(status_code=code, headers=[]))
        else:
            await _send(
                conn, stream, h11.Response(status_code=code, headers=[("Content-Length", "6")])
            )
            await _send(conn, stream, h11.Data(data=b"status"))
        await _send(conn, stream, h11.EndOfMessage())
        return True
    await _send(conn, stream, h11.Response(status_code=404, headers=[("Content-Length", "12")]))
    await _send(conn, stream, h11.Data(data=b"upstream 404"))
    await _send(conn, stream, h11.EndOfMessage())
    return True


def _head(conn: h11.Connection) -> bool:
    return getattr(conn, "_request_method", None) == b"HEAD"


@asynccontextmanager
async def upstream() -> AsyncIterator[Upstream]:
    """The upstream on 127.0.0.1, port 0, for the duration of the block."""
    up = Upstream()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, lambda s: _serve(up, s), 0, host="127.0.0.1")
        )
        up.port = listeners[0].socket.getsockname()[1]
        try:
            yield up
        finally:
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def unix_upstream(path: str) -> AsyncIterator[Upstream]:
    """The same upstream on a Unix socket at ``path``."""
    up = Upstream()
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.bind(path)
    sock.listen(16)
    listener = trio.SocketListener(sock)
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, lambda s: _serve(up, s), [listener])
        try:
            yield up
        finally:
            nursery.cancel_scope.cancel()
