"""The admin listener: ``GET /metrics`` and ``GET /healthz``.

A separate listener (``--admin-bind``), never the public port: metrics tell
an attacker how loaded the server is, and health checks must keep answering
while the public listener is closed for a drain.  It is deliberately tiny:
one request per connection, a short deadline, a small head limit, h11 for
parsing; nothing here touches the filesystem or the pools.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import h11
import trio

from ._config import parse_host_port
from ._errors import reason_phrase
from ._server import _bind

__all__ = ["PROMETHEUS_TYPE", "AdminHandler", "open_admin_listener", "serve_admin", "text"]

log = logging.getLogger("serverio")

_DEADLINE = 5.0  # seconds for one whole admin exchange
_MAX_HEAD = 8192
_MAX_CONNECTIONS = 64  # a scraper and a health checker need a handful
PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# (status, content type, body) for a path; the caller passes its own.
AdminHandler = Callable[[str], Awaitable[tuple[int, str, bytes]]]


async def open_admin_listener(spec: str) -> trio.SocketListener:
    """Bind ``HOST:PORT`` for the admin endpoint."""
    host, port = parse_host_port(spec, "--admin-bind")
    return await _bind(host, port)


async def serve_admin(
    listener: trio.SocketListener,
    handler: AdminHandler,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the admin endpoint until cancelled.

    Cancellation handling: cancelling this task closes the listener and every
    admin connection at once; nothing is left half-done (no side effects).
    """
    limit = trio.CapacityLimiter(_MAX_CONNECTIONS)
    async with listener, trio.open_nursery() as nursery:
        task_status.started()
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                log.error("admin accept failed: %s", exc)
                await trio.sleep(0.1)
                continue
            if limit.available_tokens == 0:
                await trio.aclose_forcefully(stream)
                continue
            nursery.start_soon(_one, stream, handler, limit)


async def _one(
    stream: trio.SocketStream, handler: AdminHandler, limit: trio.CapacityLimiter
) -> None:
    async with limit:
        try:
            with trio.move_on_after(_DEADLINE):
                await _exchange(stream, handler)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)


async def _exchange(stream: trio.SocketStream, handler: AdminHandler) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD)
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError:
            await _respond(stream, 400, "text/plain; charset=utf-8", b"bad request\n", False)
            return
        if event is h11.NEED_DATA:
            data = await stream.receive_some(_MAX_HEAD)
            if not data:
                return
            conn.receive_data(bytes(data))
            continue
        if isinstance(event, h11.Request):
            break
        return
    method = event.method
    path = event.target.split(b"?", 1)[0].decode("ascii", "replace")
    if method not in (b"GET", b"HEAD"):
        await _respond(stream, 405, "text/plain; charset=utf-8", b"GET or HEAD\n", False)
        return
    status, ctype, body = await handler(path)
    await _respond(stream, status, ctype, body, method == b"HEAD")


async def _respond(
    stream: trio.SocketStream, status: int, ctype: str, body: bytes, head: bool
) -> None:
    out = (
        b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
        b"Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n"
        % (status, reason_phrase(status), ctype.encode("ascii"), len(body))
    )
    await stream.send_all(out if head else out + body)
    try:
        await stream.send_eof()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass


def text(status: int, body: str) -> tuple[int, str, bytes]:
    return status, "text/plain; charset=utf-8", body.encode()
