"""The admin listener: ``GET /metrics``, ``GET /healthz``, ``POST /shutdown``.

A separate listener (``--admin-bind``), never the public port: metrics tell
an attacker how loaded the server is, and health checks must keep answering
while the public listener is closed for a drain.  It is deliberately tiny:
one request per connection, a short deadline, a small head limit, h11 for
parsing; nothing here touches the filesystem or the pools.  It belongs to
the composition root, not to the transports: what it answers (its paths,
its 400 and 405, who may POST) is the application's decision, and the
public transports (:mod:`serverio.net`) know nothing of it.

Admission is its own: public connections never count against it (nor admin
connections against ``--max-connections``).  The request head must arrive
within ``_HEAD_DEADLINE``; when all ``_MAX_CONNECTIONS`` slots are taken, a
new connection evicts the oldest one still waiting for its head (an idle
connection holds a slot only until someone needs it), and only when every
slot is busy answering does the newcomer get a 503.  So idle connections
cannot lock a health checker out: it gets in as long as it sends its
request within the head deadline.

``POST /shutdown`` stops the server, so it is refused (403) to anything a
web page could send: a request that carries ``Origin`` or a
``Sec-Fetch-*`` field (browsers send them with every cross-origin and
same-origin ``POST``, including a ``no-cors`` form post), or whose ``Host``
is not an IP literal or a loopback name (a DNS-rebinding page).  A script,
curl or a service manager sends none of them.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

import h11
import trio

from ..config import parse_host_port
from ..http.core import Plan, common_fields, error_plan
from ..http.hosts import HostRule, host_allowed
from ..net.admission import reject_at_once as _reject_at_once
from ..net.listen import _bind
from ..wire.h1 import Canned, head_bytes

__all__ = [
    "PROMETHEUS_TYPE",
    "AdminHandler",
    "AdminPostHandler",
    "open_admin_listener",
    "serve_admin",
    "text",
]

log = logging.getLogger("serverio")

_DEADLINE = 5.0  # seconds for one whole admin exchange
_HEAD_DEADLINE = 2.0  # seconds for the request head to arrive
_MAX_HEAD = 8192
_MAX_CONNECTIONS = 16  # a scraper and a health checker need a handful
PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# (status, content type, body) for a path; the caller passes its own.
AdminHandler = Callable[[str], Awaitable[tuple[int, str, bytes]]]
# The same for a POST; None: POST is refused (405) like any other method.
AdminPostHandler = Callable[[str], tuple[int, str, bytes]]


async def open_admin_listener(spec: str) -> trio.SocketListener:
    """Bind ``HOST:PORT`` for the admin endpoint; one warning line when
    ``HOST`` is not a loopback address (:func:`public_admin_warning`)."""
    host, port = parse_host_port(spec, "--admin-bind")
    listener = await _bind(host, port)
    warning = public_admin_warning(host)
    if warning is not None:
        log.warning("%s", warning)
    return listener


def public_admin_warning(host: str) -> str | None:
    """The start-up warning for an admin endpoint bound to ``host``, or
    None for loopback (``localhost``, 127.0.0.0/8, ``::1``).  The endpoint
    has no authentication: anyone who reaches it reads the load figures
    (/metrics) and can watch a drain (/healthz); a wildcard or a
    hostname counts as reachable."""
    if host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        pass
    return (
        f"--admin-bind {host} is not a loopback address: /metrics and /healthz "
        "answer anyone who reaches it, without authentication"
    )


async def serve_admin(
    listener: trio.SocketListener,
    handler: AdminHandler,
    *,
    on_post: AdminPostHandler | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the admin endpoint until cancelled.  ``on_post`` answers POST
    requests (the caller decides which paths and from which listeners).

    Cancellation handling: cancelling this task closes the listener and every
    admin connection at once; nothing is left half-done (no side effects).
    """
    budget = AdminBudget(_MAX_CONNECTIONS)
    async with listener, trio.open_nursery() as nursery:
        task_status.started()
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                log.error("admin accept failed: %s", exc)
                await trio.sleep(0.1)
                continue
            slot = budget.admit()
            if slot is None:
                # Every slot is answering (each for at most _DEADLINE): a
                # 503 in one non-blocking write, no task, no linger.
                _reject_at_once(stream.socket)
                await trio.aclose_forcefully(stream)
                continue
            nursery.start_soon(_one, stream, handler, budget, slot, on_post)


class _Slot:
    __slots__ = ("evicted", "scope")

    def __init__(self) -> None:
        self.scope = trio.CancelScope(deadline=trio.current_time() + _DEADLINE)
        self.evicted = False


class AdminBudget:
    """The admin listener's own connection slots.

    ``idle`` holds, oldest first, the slots whose connection still waits for
    its request head: those may be evicted for a newcomer.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.active = 0
        self.idle: dict[_Slot, None] = {}
        self.evicted = 0

    def admit(self) -> _Slot | None:
        """A slot for a new connection, evicting the oldest idle one if all
        are taken; None if every slot is busy answering."""
        if self.active >= self.size:
            if not self.idle:
                return None
            oldest = next(iter(self.idle))
            self.evict(oldest)
        slot = _Slot()
        self.active += 1
        self.idle[slot] = None
        return slot

    def evict(self, slot: _Slot) -> None:
        del self.idle[slot]
        slot.evicted = True
        slot.scope.cancel()
        self.active -= 1
        self.evicted += 1

    def busy(self, slot: _Slot) -> None:
        """The head is in: no longer evictable."""
        self.idle.pop(slot, None)

    def release(self, slot: _Slot) -> None:
        if not slot.evicted:
            self.idle.pop(slot, None)
            self.active -= 1


async def _one(
    stream: trio.abc.HalfCloseableStream,
    handler: AdminHandler,
    budget: AdminBudget,
    slot: _Slot,
    on_post: AdminPostHandler | None = None,
) -> None:
    """Cancellation handling: an eviction or the deadline cancels the slot's
    scope; the stream is closed either way and the slot given back once."""
    try:
        with slot.scope:
            await _exchange(stream, handler, budget, slot, on_post)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        budget.release(slot)
        await trio.aclose_forcefully(stream)


async def _exchange(
    stream: trio.abc.HalfCloseableStream,
    handler: AdminHandler,
    budget: AdminBudget,
    slot: _Slot,
    on_post: AdminPostHandler | None = None,
) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD)
    with trio.move_on_after(_HEAD_DEADLINE) as head_scope:
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:
                await _send(stream, _BAD_REQUEST.at(time.time()))
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
    if head_scope.cancelled_caught:
        return  # no head within _HEAD_DEADLINE: close
    assert isinstance(event, h11.Request)
    budget.busy(slot)
    method = event.method
    path = event.target.split(b"?", 1)[0].decode("ascii", "replace")
    if method == b"POST" and on_post is not None:
        if _from_a_page(event.headers):
            await _send(stream, _FORBIDDEN.at(time.time()))
            return
        # The request body, if any, is not read: the answer ends the exchange.
        status, ctype, body = on_post(path)
        await _respond(stream, status, ctype, body, False)
        return
    if method not in (b"GET", b"HEAD"):
        not_allowed = _NOT_ALLOWED_POST if on_post is not None else _NOT_ALLOWED
        await _send(stream, not_allowed.at(time.time()))
        return
    status, ctype, body = await handler(path)
    await _respond(stream, status, ctype, body, method == b"HEAD")


def _from_a_page(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Could a web page have sent this POST (module doc)?  ``Origin`` or a
    ``Sec-Fetch-*`` field (the Fetch standard's request metadata), or a
    ``Host`` other than an IP literal or a loopback name."""
    host: str | None = None
    for name, value in headers:
        if name == b"origin" or name.startswith(b"sec-fetch-"):
            return True
        if name == b"host":
            host = value.decode("latin-1")
    return not host_allowed(_LOOPBACK_ONLY, host)


# No names besides IP literals and localhost (serverio.http.hosts).
_LOOPBACK_ONLY = HostRule()

# The endpoint's own errors, from the pure layer's error plan (the common
# fields included), serialised once.  The 405 names what this endpoint
# allows (RFC 9110 §15.5.6), which is not the file server's list.
_BAD_REQUEST = Canned(error_plan(400, 0.0, close=True))
_FORBIDDEN = Canned(error_plan(403, 0.0, close=True))
_NOT_ALLOWED = Canned(error_plan(405, 0.0, close=True, allow=b"GET, HEAD"))
# Where POST /shutdown is served (a loopback --admin-bind).
_NOT_ALLOWED_POST = Canned(error_plan(405, 0.0, close=True, allow=b"GET, HEAD, POST"))


def _answer_plan(status: int, ctype: str, body: bytes, now: float, *, head: bool) -> Plan:
    """The endpoint's answer as a plan: the common fields, then its own
    (never cached: metrics change on every scrape)."""
    fields = (
        *common_fields(now),
        (b"content-type", ctype.encode("ascii")),
        (b"content-length", b"%d" % len(body)),
        (b"cache-control", b"no-store"),
    )
    return Plan(status, fields, (body,), send_body=not head, close=True)


async def _respond(
    stream: trio.abc.HalfCloseableStream, status: int, ctype: str, body: bytes, head: bool
) -> None:
    plan = _answer_plan(status, ctype, body, time.time(), head=head)
    out = head_bytes(plan.status, plan.headers, close=True, keep_alive_10=False)
    await _send(stream, out if head else out + body)


async def _send(stream: trio.abc.HalfCloseableStream, out: bytes) -> None:
    """Send a whole response, then FIN (the connection closes after it)."""
    await stream.send_all(out)
    try:
        await stream.send_eof()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass


def text(status: int, body: str) -> tuple[int, str, bytes]:
    return status, "text/plain; charset=utf-8", body.encode()
