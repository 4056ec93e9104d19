"""An HTTP/1.1 client on h11 over trio streams, with a pool per upstream.

One :class:`UpstreamConn` is one upstream connection and its own
``h11.Connection`` (client role): the request is serialised by h11 from
fields (never bytes copied from the client), the response is parsed by
h11, and whatever h11 refuses (bad framing, a bad head, a body that ends
short of its Content-Length), and a head with both Content-Length and
Transfer-Encoding (RFC 9112 §6.3: an error for a proxy), is an
:class:`UpstreamError` of kind ``framing``; a connection that fails or
closes under it is ``reset``.

:class:`Pool` is one upstream's connections: at most ``max_inflight``
exchanges at once (:meth:`Pool.acquire`: past it a request waits, first
come first served, at most ``queue`` of them and each at most
``--proxy-queue-timeout``; a request that cannot wait is answered 503 by
the caller), and up to ``keep`` idle keep-alive connections,
each put back only after a complete exchange whose both sides h11 says are
DONE (:meth:`Pool.checkin`).  A connection is never pooled mid-response:
anything else closes it (:meth:`UpstreamConn.close`, synchronous, so that a
``finally`` or a body's ``close`` can do it without an await).
"""

from __future__ import annotations

import collections
import functools
import ipaddress
import os
import re
import socket
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable
from typing import Final

import h11
import trio

from ..config import ProxyRoute
from ..observe.stats import ProxyStats
from ..wire.fastresponse import DEFER, FastResponse, ResponseReader

__all__ = [
    "RECV_SIZE",
    "Connect",
    "Head",
    "Pool",
    "UpstreamConn",
    "UpstreamError",
    "exchange",
    "only_cancelled",
    "open_upstream",
]

RECV_SIZE: Final = 65536
# Plain sockets take os.write on POSIX (the upstream send's fast path, as
# the client side's in net/emit.py); elsewhere trio's send_all does it all.
_FD_IO: Final = os.name == "posix"

# What h11 checks of a request line (RFC 9112 §3: a method is a token, a
# request-target visible characters), for the head serverio writes itself
# (UpstreamConn.start_request): the same grammar as h11's own
# (h11._abnf.method, request_target).
_METHOD: Final = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_TARGET: Final = re.compile(rb"[\x21-\x7e]+")
# Fields that make a request more than a plain head for h11's state machine
# (framing, a protocol switch, an expectation, the connection's persistence):
# a request with one of them is serialised by h11.
_STATEFUL: Final = frozenset(
    {b"content-length", b"transfer-encoding", b"upgrade", b"connection", b"expect", b"te"}
)

# A response head: from the fast reader or from h11.
Head = h11.Response | h11.InformationalResponse | FastResponse

# How the pool opens a connection to a route's upstream (tests hand in
# memory streams).
Connect = Callable[[ProxyRoute], Awaitable[trio.abc.Stream]]


def only_cancelled(exc: BaseException) -> bool:
    """``exc`` is a cancellation, bare or grouped by a nursery."""
    if isinstance(exc, trio.Cancelled):
        return True
    return isinstance(exc, BaseExceptionGroup) and exc.split(trio.Cancelled)[1] is None


class UpstreamError(Exception):
    """The exchange with the upstream failed; ``kind`` is ``connect``,
    ``reset`` or ``framing`` (the Stats counter it moves)."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


async def open_upstream(route: ProxyRoute) -> trio.abc.Stream:
    """A new connection to ``route``'s upstream (TCP, or a Unix socket).

    Cancellation handling: a cancelled connect leaves nothing open (trio's
    own ``open_tcp_stream`` closes its attempts)."""
    try:
        if route.unix:
            return await trio.open_unix_socket(route.unix)
        family = _literal_family(route.host)
        if family is not None:
            return await _connect_literal(family, route.host, route.port)
        return await trio.open_tcp_stream(route.host, route.port)
    except OSError as exc:
        raise UpstreamError("connect", str(exc)) from None


@functools.lru_cache(maxsize=64)
def _literal_family(host: str) -> int | None:
    """AF_INET or AF_INET6 for an address literal; None for a name."""
    try:
        version = ipaddress.ip_address(host).version
    except ValueError:
        return None
    return socket.AF_INET6 if version == 6 else socket.AF_INET


async def _connect_literal(family: int, host: str, port: int) -> trio.SocketStream:
    """One TCP connect to an address literal: what ``trio.open_tcp_stream``
    does for a single address, without its resolver call and its
    happy-eyeballs nursery (a new upstream connection costs less).

    Cancellation handling: a cancelled connect closes the socket."""
    sock = trio.socket.socket(family, socket.SOCK_STREAM)
    try:
        await sock.connect((host, port))
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


def close_stream(stream: trio.abc.Stream) -> None:
    """Close ``stream`` now, without an await (a socket, or the memory
    streams of tests); the peer sees EOF or a reset."""
    if isinstance(stream, trio.SocketStream):
        stream.socket.close()
        return
    for part in (
        stream,
        getattr(stream, "send_stream", None),
        getattr(stream, "receive_stream", None),
    ):
        close = getattr(part, "close", None)
        if callable(close):
            close()


class UpstreamConn:
    """One upstream connection (one task uses it at a time)."""

    __slots__ = (
        "_eof",
        "_fast",
        "_fresh",
        "_sock",
        "_tried",
        "_unsent",
        "closed",
        "h11",
        "once",
        "received",
        "reused",
        "stream",
    )

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        # A plain socket's trio socket, for the send fast path (None: TLS,
        # memory streams, platforms without os.write on sockets).
        self._sock = stream.socket if _FD_IO and isinstance(stream, trio.SocketStream) else None
        self.h11 = h11.Connection(h11.CLIENT)
        self.reused = False
        self.received = 0  # bytes read in the current exchange
        self.closed = False
        self.once = False  # never pooled (a request that asked to switch protocols)
        self._eof = False
        self._tried = False  # head_soon's read found nothing: the first read waits first
        # The response's fast reader (serverio.wire.fastresponse) until it
        # defers to h11; None: h11 reads it all.
        self._fast: ResponseReader | None = None
        # Bytes read for the fast reader and not yet handed to it: they go
        # to it where its next event is read (buffered_event), so that a
        # read costs one visit to the reader, not two.
        self._fresh: bytes | None = None
        # A request head written without h11 (start_request's plain GET):
        # what h11 is told, should its reader take over (_handoff); None:
        # h11 sent the request, or none was sent.
        self._unsent: tuple[bytes, bytes, list[tuple[bytes, bytes]]] | None = None

    async def _send(self, data: bytes) -> None:
        """``data`` to the upstream.  Fast path: one non-blocking write of a
        plain socket that takes it all needs no wait and no checkpoint
        (trio's ``send_all`` ends with one, a scheduling round per send);
        the rest, if any, goes through ``send_all`` with its waits.
        Cancellation handling: as :meth:`send_request`."""
        if self._sock is not None and (fd := self._sock.fileno()) >= 0:  # -1 once closed
            try:
                n = os.write(fd, data)
            except BlockingIOError:
                n = 0
            if n == len(data):
                return
            data = data[n:]
        await self.stream.send_all(data)

    async def send_request(
        self,
        method: bytes,
        target: bytes,
        fields: list[tuple[bytes, bytes]],
        content: AsyncIterable[bytes] | None,
        stats: ProxyStats,
        checked: bool = False,
    ) -> None:
        """The request head and its content, framed by h11 as ``fields`` say
        (Content-Length or chunked).  Cancellation handling: a cancelled
        send leaves the connection half-written; the caller closes it."""
        if content is None:
            rest = self.start_request(method, target, fields, checked)
            if rest:
                await self.send_rest(rest)
            return
        conn = self.h11
        self.received = 0
        self._fast = None
        self._fresh = None
        self._unsent = None
        self._tried = False
        try:
            head = conn.send(h11.Request(method=method, target=target, headers=fields))
            await self._send(head)
            async for chunk in content:
                out = conn.send(h11.Data(data=chunk))
                if out:
                    await self._send(out)
                stats.bytes_up += len(chunk)
            end = conn.send(h11.EndOfMessage())  # the last chunk of chunked, or nothing
            if end:
                await self._send(end)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise UpstreamError("reset", str(exc)) from None
        except h11.LocalProtocolError as exc:
            # The content did not match its declared length (the client's
            # H2Body / H1Body check that first; this is the last guard).
            raise UpstreamError("framing", str(exc)) from None

    def start_request(
        self,
        method: bytes,
        target: bytes,
        fields: list[tuple[bytes, bytes]],
        checked: bool = False,
    ) -> bytes:
        """A request without content, serialised by h11 (the head and its
        end in one piece: one write) and written as far as the socket
        takes it now, without a wait or a checkpoint; returns what is left
        to send (``b""``: all of it, the usual case), for
        :meth:`send_rest`.  Raises :class:`UpstreamError` (``reset``) when
        the socket is gone.

        ``checked``: every field name and value is known to match h11's
        grammar (the caller's proof: parsed under it, or plain), so h11
        skips its own field regexes (``_parsed``: what h11's reader does
        with what it parsed); it still checks the method, the target and
        the framing fields."""
        self.received = 0
        self._fresh = None
        self._tried = False
        data = _plain_head(method, target, fields) if checked and method == b"GET" else None
        if data is not None:
            # A plain GET: the head h11 would write (Host first), written
            # without h11, whose state stays IDLE; the response is the
            # fast reader's (h11 is told of the request only if the fast
            # reader hands over to it, _handoff).
            self._unsent = (method, target, fields)
            self._fast = ResponseReader()
        else:
            data = self._h11_request(method, target, fields, checked)
        if self._sock is None or (fd := self._sock.fileno()) < 0:  # -1 once closed
            return data
        try:
            n = os.write(fd, data)
        except BlockingIOError:
            return data
        except OSError as exc:
            raise UpstreamError("reset", str(exc)) from None
        return data[n:]

    def _h11_request(
        self, method: bytes, target: bytes, fields: list[tuple[bytes, bytes]], checked: bool
    ) -> bytes:
        """A request without content serialised by h11 (``checked``: see
        :meth:`start_request`); the fast reader reads its response when
        h11 would frame it by its own fields (not HEAD, no switch asked)."""
        conn = self.h11
        self._fast = None
        self._unsent = None
        try:
            request = h11.Request(method=method, target=target, headers=fields, _parsed=checked)
            data = conn.send(request) + conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:
            raise UpstreamError("framing", str(exc)) from None
        if method != b"HEAD" and conn.our_state is h11.DONE:
            self._fast = ResponseReader()
        return data

    async def send_rest(self, data: bytes) -> None:
        """What :meth:`start_request` left, with trio's waits.
        Cancellation handling: as :meth:`send_request`."""
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise UpstreamError("reset", str(exc)) from None

    def buffered_event(self) -> h11.Event | FastResponse | None:
        """The next h11 event of the response if the bytes already read hold
        it, else None (no I/O, no checkpoint)."""
        fast = self._fast
        if fast is not None:
            fresh = self._fresh
            if fresh is not None:
                self._fresh = None
                fast.feed(fresh)
            event = fast.event()
            if event is not DEFER:
                return event  # type: ignore[return-value]  # FastResponse, Data, EndOfMessage, None
            self._handoff(fast)
        conn = self.h11
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            kind = "reset" if conn.their_state is h11.ERROR and self._eof else "framing"
            raise UpstreamError(kind, str(exc)) from None
        if event is h11.NEED_DATA:
            return None
        if event is h11.PAUSED:
            # Only after a 101 (read_head returns it first) or a
            # pipelining misuse: either way not an event to read on.
            raise UpstreamError("framing", "paused")
        assert not isinstance(event, type)
        return event

    def _handoff(self, fast: ResponseReader) -> None:
        """The fast reader declined: h11 reads the rest (a fresh h11 for a
        body's rest: the connection is then never reused)."""
        self._fast = None
        unsent = self._unsent
        if unsent is not None:
            # The request went out without h11: told now (its bytes are
            # already sent), so that h11 frames the response by it.
            self._unsent = None
            method, target, fields = unsent
            request = h11.Request(method=method, target=target, headers=fields, _parsed=True)
            self.h11.send(request)
            self.h11.send(h11.EndOfMessage())
        self.h11, fresh = fast.handoff(self.h11)
        if fresh:
            self.once = True

    async def next_event(self) -> h11.Event | FastResponse:
        """The next event of the response, reading as needed.
        Cancellation handling: as :meth:`send_request`."""
        while True:
            # A fast reader that was handed nothing yet has no event to
            # give (it is new with each exchange): straight to the read.
            if self.received or self._eof or self._fast is None:
                event = self.buffered_event()
                if event is not None:
                    return event
            data: bytes | bytearray
            try:
                if self.received == 0 and self._sock is not None and not self._eof:
                    data = await self._first_read(self._sock, self._tried)
                else:
                    data = await self.stream.receive_some(RECV_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise UpstreamError("reset", str(exc)) from None
            self._take(data)

    def _take(self, data: bytes | bytearray) -> None:
        """Bytes read from the upstream (``b""``: its EOF), for the reader."""
        self.received += len(data)
        if not data:
            self._eof = True
        fast = self._fast
        if fast is not None:
            # Handed to the reader by the next buffered_event (every read
            # is followed by one); a second read before it joins the first,
            # and the EOF is said after what came before it.
            fresh = self._fresh
            if data:
                self._fresh = bytes(data) if fresh is None else fresh + data
            else:
                self._fresh = None
                if fresh is not None:
                    fast.feed(fresh)
                fast.feed(b"")
        else:
            self.h11.receive_data(bytes(data))

    async def head_soon(self) -> Head | None:
        """The response head if it is here after one scheduling round (the
        other ready connections run meanwhile; under load the upstream has
        usually answered by then): one checkpoint and one non-blocking
        ``os.read``, no wait.  None: not (all) here yet, or not a plain
        POSIX socket; :meth:`read_head` then goes on from what was read,
        under the caller's deadlines.  Nothing waits here, so no deadline
        can be due: the caller needs no cancel scope for this step.
        Raises :class:`UpstreamError` as :meth:`read_head` does.
        Cancellation handling: a cancelled checkpoint reads nothing."""
        sock = self._sock
        if sock is None or self.received or self._eof:
            return None
        await trio.lowlevel.checkpoint()
        try:
            data = self._read_now(sock)
        except (trio.ClosedResourceError, OSError) as exc:
            raise UpstreamError("reset", str(exc)) from None
        if data is None:
            self._tried = True  # the first read waits first: no second try
            return None
        self._take(data)
        while (event := self.buffered_event()) is not None:
            head = self._final(event)
            if head is not None:
                return head
        return None

    @staticmethod
    async def _first_read(sock: trio.socket.SocketType, tried: bool = False) -> bytes:
        """The first bytes of a response on a plain socket.  The request was
        just written without a checkpoint, so first one scheduling round
        (the other ready connections run meanwhile: with many of them,
        the upstream has usually answered by then), then one ``os.read``,
        and only if nothing is there yet a wait for it.  Under load that
        skips the epoll registration a wait costs (trio's one-shot
        ``epoll_ctl``) and its wake-up; with one connection it costs one
        read that finds nothing.  Later reads of the response use
        ``receive_some``, whose checkpoint on every read keeps a long body
        from holding the event loop.  ``tried``: :meth:`head_soon` did
        the round and the read that found nothing: wait at once.
        Cancellation handling: a cancelled checkpoint or wait takes no bytes."""
        if tried:
            await trio.lowlevel.wait_readable(sock)
        else:
            await trio.lowlevel.checkpoint()
        while (data := UpstreamConn._read_now(sock)) is None:
            await trio.lowlevel.wait_readable(sock)
        return data

    @staticmethod
    def _read_now(sock: trio.socket.SocketType) -> bytes | None:
        """One non-blocking ``os.read`` of a plain socket; None: nothing
        there yet.  Raises ``trio.ClosedResourceError`` for a socket
        closed under it, ``OSError`` for a reset."""
        fd = sock.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the upstream socket was closed")
        try:
            return os.read(fd, RECV_SIZE)
        except BlockingIOError:
            return None

    async def read_head(self) -> Head:
        """The final response head (1xx informational heads are skipped),
        or the ``101 Switching Protocols`` that accepts a protocol switch
        this connection's request asked for (h11 then holds both sides in
        SWITCHED_PROTOCOL: the bytes past the head are :attr:`trailing`)."""
        while True:
            head = self._final(await self.next_event())
            if head is not None:
                return head

    def _final(self, event: h11.Event | FastResponse) -> Head | None:
        """``event`` if it is the head :meth:`read_head` returns, None for
        an informational head to skip; :class:`UpstreamError` for anything
        else (the upstream closed, or sent no head)."""
        if isinstance(event, (h11.Response, FastResponse)):
            if type(event) is h11.Response and _both_framings(event.headers):
                # RFC 9112 §6.3 item 3: Transfer-Encoding overrides
                # Content-Length, and such a message "ought to be handled as
                # an error" (a sign of response splitting).  h11 reads it by
                # the chunked coding; passed on, the Content-Length would
                # frame a body of another length downstream.  502, and the
                # connection is closed, never pooled (the caller discards it
                # on this error).  The fast reader never accepts both (it
                # defers to h11), so only h11's heads are looked at.
                raise UpstreamError("framing", "Content-Length with Transfer-Encoding")
            return event
        if isinstance(event, h11.InformationalResponse):
            if event.status_code == 101 and self.switched:
                return event
            return None
        raise UpstreamError("reset" if isinstance(event, h11.ConnectionClosed) else "framing")

    @property
    def switched(self) -> bool:
        """h11 says both sides switched protocols (after a 101)."""
        return self.h11.our_state is h11.SWITCHED_PROTOCOL

    @property
    def trailing(self) -> bytes:
        """The bytes read past the 101's head (the new protocol's first)."""
        return bytes(self.h11.trailing_data[0])

    @property
    def reusable(self) -> bool:
        """Both sides of the exchange complete and keep-alive (RFC 9112 §9.3),
        and the request did not ask to switch protocols (an upstream that
        declined may still hold state for it: such a connection is used once)."""
        if self.once:
            return False
        fast = self._fast
        if self._unsent is not None:  # a plain GET h11 never saw: the fast reader's
            return fast is not None and fast.reusable
        conn = self.h11
        if conn.our_state is not h11.DONE:
            return False
        if fast is None:
            return conn.their_state is h11.DONE
        return fast.reusable  # read to its end, nothing past it, keep-alive

    def next_cycle(self) -> None:
        """Ready for the next exchange (after a :attr:`reusable` one): h11's
        next cycle, or a new h11 when the fast reader read the response
        (h11 never saw it)."""
        if self._unsent is not None:
            # h11 never saw the exchange: still IDLE, ready as it is.
            self._unsent = None
            self._fast = None
            self._fresh = None
        elif self._fast is not None:
            self._fast = None
            self._fresh = None
            self.h11 = h11.Connection(h11.CLIENT)
        else:
            self.h11.start_next_cycle()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            close_stream(self.stream)


def _plain_head(method: bytes, target: bytes, fields: list[tuple[bytes, bytes]]) -> bytes | None:
    """The head h11 writes for a request without content (its request line,
    Host first, the other fields in order, the blank line; the request's
    end adds nothing), when h11's state machine has nothing to note in it:
    one Host, no field of :data:`_STATEFUL`; else None (h11 serialises it).
    The fields' names and values are the caller's proof (``checked``: h11's
    grammar, lowercase names); the request line is checked here as h11
    checks it."""
    host = None
    for name, value in fields:
        if name == b"host":
            if host is not None:
                return None  # h11's 400 for a second Host
            host = value
        elif name in _STATEFUL:
            return None
    if host is None or _METHOD.fullmatch(method) is None or _TARGET.fullmatch(target) is None:
        return None
    lines = [b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method, target, host)]
    lines += [b"%s: %s\r\n" % field for field in fields if field[0] != b"host"]
    lines.append(b"\r\n")
    return b"".join(lines)


def _both_framings(fields: Iterable[tuple[bytes, bytes]]) -> bool:
    """A response head has both Content-Length and Transfer-Encoding."""
    names = {name for name, _ in fields}
    return b"content-length" in names and b"transfer-encoding" in names


async def exchange(
    conn: UpstreamConn,
    request: tuple[bytes, bytes, list[tuple[bytes, bytes]]],
    content: AsyncIterable[bytes] | None,
    stats: ProxyStats,
    head_timeout: float,
) -> Head | None:
    """Send ``request`` (method, target, fields) and its content, and read
    the response head: None when it did not come within ``head_timeout``
    of the request's end.

    Without content: send, then read.  With content, both at once, so
    that an upstream may answer before it has read the whole body (a 413,
    a 401; RFC 9110 §15.5.14, RFC 9112 §9.5): the head that arrives first
    stops the sending (the connection is then never pooled: h11's side
    of the request is not DONE) and is the answer.  The content is pulled
    one chunk at a time as the upstream socket takes it (backpressure, at
    most one chunk in hand).  The head deadline starts once the content is
    all sent (a slow upload is the body deadlines' business).

    Cancellation handling: cancelled, both tasks end and the connection is
    left half-written; the caller closes it.
    """
    method, target, fields = request
    if content is None:
        await conn.send_request(method, target, fields, None, stats)
        with trio.move_on_after(head_timeout):
            return await conn.read_head()
        return None
    heads: list[Head] = []
    errors: list[UpstreamError] = []
    failed: list[Exception] = []
    with trio.CancelScope() as waiting:  # its deadline is set once all is sent

        async def send(everything: trio.CancelScope) -> None:
            try:
                await conn.send_request(method, target, fields, content, stats)
            except UpstreamError as exc:
                errors.append(exc)
                if exc.kind == "framing":
                    everything.cancel()  # the client's content broke its framing
                return  # a reset: the upstream may have answered and closed
            except Exception as exc:  # the client's content failed (408, 413, 400)
                failed.append(exc)  # re-raised bare, as from a plain send
                everything.cancel()
                return
            waiting.deadline = trio.current_time() + head_timeout

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, nursery.cancel_scope)
            try:
                heads.append(await conn.read_head())
            except UpstreamError as exc:
                errors.insert(0, exc)
            nursery.cancel_scope.cancel()  # an early answer (or none): stop sending
    if failed:
        raise failed[0]
    if heads:
        return heads[0]
    framing = [e for e in errors if e.kind == "framing"]
    if framing or errors:
        raise (framing or errors)[0]
    return None  # the head deadline


class _Waiter:
    """A request waiting for a slot (:meth:`Pool.acquire`): its wait's
    cancel scope, and whether :meth:`Pool.release` handed it one."""

    __slots__ = ("granted", "scope")

    def __init__(self, scope: trio.CancelScope) -> None:
        self.scope = scope
        self.granted = False


class Pool:
    """One upstream's connections and its in-flight budget."""

    __slots__ = (
        "_connect",
        "_live",
        "_stats",
        "_waiters",
        "idle",
        "inflight",
        "keep",
        "max_inflight",
        "queue",
        "route",
    )

    def __init__(
        self,
        route: ProxyRoute,
        max_inflight: int,
        keep: int,
        stats: ProxyStats,
        connect: Connect,
        queue: int = 0,
    ) -> None:
        self.route = route
        self.max_inflight = max_inflight
        self.keep = keep
        self.queue = queue  # requests that may wait for a slot at once
        self._stats = stats
        self._connect = connect
        self.inflight = 0
        # The requests waiting for a slot, oldest first (a freed slot is
        # handed to the oldest: no newcomer overtakes a waiter), each by
        # its wait's cancel scope: release() hands a slot over by
        # cancelling it, so a waiter can wait for something else meanwhile
        # in its own task (the client going away: acquire's ``wait``).
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self.idle: list[UpstreamConn] = []
        self._live: set[UpstreamConn] = set()  # open, idle or in use

    @property
    def opened(self) -> int:
        """Connections open now, idle or in use."""
        return len(self._live)

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot now."""
        return len(self._waiters)

    def try_acquire(self) -> bool:
        """Take an in-flight slot if one is free (no wait, no checkpoint)."""
        if self.inflight >= self.max_inflight:
            return False
        self.inflight += 1
        return True

    async def acquire(
        self, patience: float, wait: Callable[[], Awaitable[object]] = trio.sleep_forever
    ) -> bool:
        """Take an in-flight slot: at once if one is free; else wait for
        one, behind the requests already waiting, at most ``patience``
        seconds (``--proxy-queue-timeout``).  False (the caller's 503) when
        ``queue`` requests already wait or the time is up.  A slot handed
        over (:meth:`release`) is the caller's even if the time is up as
        it is handed.  ``wait`` runs in this task while the request waits
        (the pipeline's ``client_gone``: it reads the client's socket and
        raises when the client goes, with no helper task); it may raise,
        and if it returns the request waits on without it.

        Cancellation handling: cancelled (or ``wait`` raising) while
        waiting, the request leaves the queue holding no slot; if the slot
        was handed over as that happened, it is given on here before the
        exception goes on, so the caller never holds it."""
        if self.inflight < self.max_inflight:
            self.inflight += 1
            return True
        if len(self._waiters) >= self.queue:
            self._stats.busy += 1
            return False
        self._stats.queued += 1
        waiter = _Waiter(trio.CancelScope(deadline=trio.current_time() + patience))
        self._waiters.append(waiter)
        try:
            with waiter.scope:
                await wait()
                await trio.sleep_forever()
        except BaseException:
            if waiter.granted:
                self.release()  # handed over as the request left: given on
            else:
                self._waiters.remove(waiter)
            raise
        if waiter.granted:
            return True  # release() handed its slot over: inflight unchanged
        self._waiters.remove(waiter)
        self._stats.busy += 1
        return False

    def release(self) -> None:
        """Give a slot back: to the oldest waiting request, else free."""
        if self._waiters:
            waiter = self._waiters.popleft()
            waiter.granted = True
            waiter.scope.cancel()
        else:
            self.inflight -= 1

    def reuse(self) -> UpstreamConn | None:
        """The most recently pooled idle connection, or None (no wait)."""
        if not self.idle:
            return None
        conn = self.idle.pop()
        conn.reused = True
        self._stats.reuses += 1
        return conn

    async def checkout(self, fresh: bool = False) -> UpstreamConn:
        """An idle keep-alive connection (most recent first), or a new one
        (``fresh``: always new).  Cancellation handling: a cancelled connect
        leaves nothing open."""
        if not fresh and (conn := self.reuse()) is not None:
            return conn
        stream = await self._connect(self.route)
        self._stats.connects += 1
        conn = UpstreamConn(stream)
        self._live.add(conn)
        return conn

    def checkin(self, conn: UpstreamConn) -> None:
        """After the exchange: pooled when complete and keep-alive, and the
        pool has room; closed otherwise."""
        if not conn.closed and conn.reusable and len(self.idle) < self.keep:
            conn.next_cycle()
            self.idle.append(conn)
            return
        self.discard(conn)

    def discard(self, conn: UpstreamConn) -> None:
        """Close ``conn`` (never pooled again)."""
        conn.close()
        self._live.discard(conn)

    def close_idle(self) -> None:
        """Close the idle connections (at shutdown)."""
        for conn in self.idle:
            self.discard(conn)
        self.idle.clear()
