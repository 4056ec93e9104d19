"""The connection task: h11 + socket + sendfile, and nothing else.

One task per connection reads request heads, turns them into facts, asks the
request handler (:class:`~serverio.pipeline.handler.Handler`) for the
response, and writes the plan's bytes.  It is the only task that reads or
writes its socket (the disconnect watcher is its own child task) and it
passes neither itself, its stream nor its parser to anyone.  Deadlines are
cancel scopes:

* head deadline: the whole request head must arrive within ``head_timeout``
  of the connection's start (first request) or of the first byte of the
  request (keep-alive requests) -> 408 and close (slowloris);
* keep-alive deadline: between requests, the first byte must arrive within
  ``keepalive_timeout`` -> silent close;
* write deadline: every write must make progress within ``write_timeout``
  -> abort.

Data flows one way: bytes -> h11 events -> :class:`RequestFacts` ->
handler (resolution, decision, follow-ups) -> :class:`Plan` -> bytes.  The
response head is serialised by :mod:`serverio.http.wire` (see its
docstring for why not ``h11.Connection.send``).  One parser per request
cycle, handed the bytes left over from the previous one (pipelining):
the common head is read by a strict fast path (:mod:`serverio.http.fasthead`)
that gives exactly h11's result or defers to h11, which decides everything
else, every rejection included.
"""

from __future__ import annotations

import errno
import math
import os
import time
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import partial
from typing import Final, Protocol

import h11
import trio

from ..config import Config
from ..errors import HTTPError
from ..fs.body import Body
from ..fs.prepare import Prepared
from ..fs.reads import pread
from ..http.core import FileSpan, Plan, RequestFacts, http_error_plan
from ..http.fasthead import FastRequest, HeadParser
from ..http.fields import scan_fields
from ..http.target import parse_target
from ..http.wire import head_bytes
from ..observe.accesslog import AccessLog, AccessRecord
from ..observe.histogram import Histogram
from ..observe.stats import Stats
from ..pipeline.handler import Deferred, Handler
from ..pipeline.livereload import LiveReload
from ..pipeline.request import Waiting, client_for, complete, failed, finish, record, start
from ..pipeline.site import Site
from .order import ServeOrder

__all__ = ["H2_PREFACE", "ConnectionEnv", "ConnectionTask", "Switched"]

RECV_SIZE = 16384
SENDFILE_CHUNK = 1 << 20  # one sendfile call at most, then let others run
BUFFER_CHUNK = 65536  # buffered path: user-space bytes per transfer at most
SEND_PIECE = 16384  # non-socket streams: progress granularity of the write deadline
# A write this small goes out before the TCP options are set (see
# ConnectionTask._tune): trio's TCP_NOTSENT_LOWAT (16 KiB) cannot limit it.
_UNTUNED_WRITE_MAX = 16384
_CLOSE_END = b"Connection: close\r\n\r\n"

_HAS_SENDFILE = hasattr(os, "sendfile")
# Sockets are file descriptors on POSIX, so the fast paths read and write
# them with os.read/os.write/os.writev; on Windows a socket is not a C
# runtime descriptor and everything goes through trio's socket methods.
SOCKET_FD_IO: Final = os.name == "posix"


def _no_sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
    raise OSError(errno.ENOSYS, "sendfile is not available")


def _write_joined(fd: int, pieces: Sequence[bytes]) -> int:
    return os.write(fd, b"".join(pieces))


# Looked up once: Windows has neither (macOS and FreeBSD have both; their
# sendfile reports a partial send on a non-blocking socket as a count,
# which the loop below handles like Linux's).
_os_sendfile: Final[Callable[[int, int, int, int], int]] = getattr(os, "sendfile", _no_sendfile)
_os_writev: Final[Callable[[int, Sequence[bytes]], int]] = getattr(os, "writev", _write_joined)


# RFC 9113 §3.4: the client connection preface.  h11 parses its first 18
# bytes as a request head "PRI * HTTP/2.0" with no fields; the rest
# ("SM\r\n\r\n") is left in its buffer.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_PREFACE_HEAD = H2_PREFACE[:18]


class Switched(Protocol):
    """A connection served by another protocol (HTTP/2) from now on."""

    async def run(self) -> None: ...

    def drain(self) -> None: ...


# (env, stream, peer address lookup, bytes already read) -> the switched
# connection; the server supplies serverio.net.h2conn.H2Connection.
SwitchFactory = Callable[["ConnectionEnv", trio.abc.Stream, Callable[[], str], bytes], Switched]


# What the lifetime scope's deadline currently guards.
_BUSY, _KEEPALIVE, _HEAD = 0, 1, 2


class _Abort(Exception):
    """The response cannot be completed; close the connection now."""


# A request head: from the fast path (serverio.http.fasthead) or from h11.
Head = h11.Request | FastRequest




def _only_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        _, rest = exc.split(trio.Cancelled)
        return rest is None
    return False


def _head(event: object) -> Head | None:
    """The event if it is a request head (else the connection closes)."""
    t = type(event)
    if t is FastRequest or t is h11.Request:
        return event  # type: ignore[return-value]  # checked just above
    return None


# The Connection values nearly every client sends, as received: their token
# sets without the split (what _tokens computes for them).
_SINGLE_TOKENS: Final[dict[bytes, frozenset[bytes]]] = {
    b"close": frozenset({b"close"}),
    b"keep-alive": frozenset({b"keep-alive"}),
}
_NO_TOKENS: Final[frozenset[bytes]] = frozenset()


def _tokens(value: bytes) -> AbstractSet[bytes]:
    """The Connection field's tokens, lower-cased (RFC 9110 §7.6.1)."""
    known = _SINGLE_TOKENS.get(value)
    if known is not None:
        return known
    return {t.strip().lower() for t in value.split(b",")}


@dataclass(slots=True, eq=False)
class ConnectionEnv:
    """What every connection of one server shares: the policy, the request
    handler, and where counts and log lines go.  ``draining`` is set by the
    server when graceful shutdown begins.  A connection gets this, never the
    server itself.  ``http2`` serves a connection that negotiated HTTP/2
    (None: HTTP/1.1 only)."""

    config: Config
    handler: Handler
    stats: Stats
    access_log: AccessLog
    response_times: Histogram
    live: LiveReload | None = None  # --watch: the event streams' broadcaster
    draining: bool = False
    # Set once nothing is accepted any more without a lame-duck period
    # (--shutdown-delay): then a drain also closes connections still
    # waiting for their first request; before, they are served.
    cut_fresh: bool = False
    http2: SwitchFactory | None = None
    site: Site | None = None  # the site rules; None when none are configured
    # The order ready keep-alive connections are served in (serverio.net.order);
    # None: trio's batch order.
    order: ServeOrder | None = None


class ConnectionTask:
    """One client connection.  Created by the server's accept loop."""

    __slots__ = (
        "_armed",
        "_client",
        "_drained",
        "_fd",
        "_fed",
        "_h2",
        "_lazy_stream",
        "_phase",
        "_sock",
        "_stream_scope",
        "_switched",
        "_tls",
        "_turn",
        "env",
        "in_flight",
        "peer_eof",
        "read_scope",
        "use_sendfile",
    )

    def __init__(
        self,
        env: ConnectionEnv,
        stream: trio.abc.Stream | trio.socket.SocketType,
        client: str | None = None,
        *,
        http2: bool = True,
    ) -> None:
        """``stream`` is the connection's stream, or a freshly accepted trio
        socket: then the :class:`trio.SocketStream` around it (and the TCP
        options its constructor sets) is made only when something needs it
        (see :attr:`stream` and :meth:`_tune`)."""
        self.env = env
        # HTTP/2 on this connection: the server's (None: off), unless its
        # listener serves HTTP/1.1 only (``--listen ADDR/h1``).
        self._h2 = env.http2 if http2 else None
        if isinstance(stream, trio.socket.SocketType):
            self._sock: trio.socket.SocketType | None = stream
            self._lazy_stream: trio.abc.Stream | None = None
        else:
            self._lazy_stream = stream
            self._sock = stream.socket if isinstance(stream, trio.SocketStream) else None
        self._client = client
        # Over TLS (the request facts say so: --hsts is sent on TLS only).
        self._tls = isinstance(self._lazy_stream, trio.SSLStream)
        self.read_scope: trio.CancelScope | None = None
        self.in_flight = False
        # The client half-closed (EOF while we answered): answer what was
        # received, then close; nothing more can arrive.
        self.peer_eof = False
        self._drained = False
        self._phase = _BUSY
        self._armed = False  # the lifetime scope holds a read deadline
        self._fed = 0
        self._stream_scope: trio.CancelScope | None = None  # an event stream's
        self._switched: Switched | None = None
        order = env.order
        self._turn = order.new_turn() if order is not None else 0
        # One decision per connection: zero-copy when the stream is a plain
        # socket and the platform has sendfile; otherwise the buffered path
        # (TLS streams, memory streams in tests, other platforms).
        is_socket = self._sock is not None
        # The raw fd for the fast paths (non-blocking read/write without
        # trio's socket machinery); -1 for streams that are not sockets.
        self._fd = self._sock.fileno() if self._sock is not None and SOCKET_FD_IO else -1
        self.use_sendfile = env.config.sendfile and _HAS_SENDFILE and is_socket

    @property
    def stream(self) -> trio.abc.Stream:
        """The connection's stream; around a bare socket it is made on first
        use (a slow path: a cold file's watcher, an event stream, HTTP/2),
        which also sets trio's TCP options on it."""
        stream = self._lazy_stream
        if stream is None:
            assert self._sock is not None
            stream = self._lazy_stream = trio.SocketStream(self._sock)
        return stream

    def _tune(self) -> None:
        """Set the TCP options a :class:`trio.SocketStream` sets (TCP_NODELAY,
        TCP_NOTSENT_LOWAT where the platform has it), by making the stream.

        Due before any write that can follow an earlier write on the
        connection: Nagle's algorithm holds a small segment back only while
        earlier data is unacknowledged, so the first write of a connection
        that closes right after it (a ``Connection: close`` answer in one
        ``writev``; the close sends whatever is queued, with the FIN) goes
        out the same with or without them, and skips two setsockopt calls.
        """
        _ = self.stream

    @property
    def client(self) -> str:
        """The peer address, looked up only when something (the access log)
        asks: a getpeername() per connection is a syscall the churn workload
        would otherwise pay for nothing."""
        if self._client is None:
            self._client = "-"
            if self._sock is not None:
                try:
                    peer = self._sock.getpeername()
                except OSError:
                    pass
                else:
                    if isinstance(peer, tuple) and peer:
                        self._client = str(peer[0])
        return self._client

    def drain(self) -> None:
        """Graceful shutdown: a connection waiting for a request closes now;
        one with a request in flight finishes it (with Connection: close);
        a live-reload event stream, which never finishes, closes now.
        After a lame-duck period (``env.cut_fresh`` not set) only an idle
        keep-alive connection closes: one still waiting for its first
        request (or TLS handshake) was just accepted and is served.  An
        HTTP/2 connection drains its own way (GOAWAY, in-flight streams
        finish)."""
        if self._switched is not None:
            self._switched.drain()
            return
        if self._stream_scope is not None:
            self._stream_scope.cancel()
        if (
            self.read_scope is not None
            and not self.in_flight
            and (self._phase == _KEEPALIVE or self.env.cut_fresh)
        ):
            self._drained = True
            self.read_scope.cancel()

    def _busy(self) -> None:
        """A request head is in: no read deadline while we answer it.

        Lazily: the head or keep-alive deadline stays on the lifetime scope
        until something could wait (:meth:`ensure_busy`, called before every
        await of the answering phase).  A deadline can only cancel at a
        checkpoint, and a warm response written in one non-blocking
        ``write`` has none; the next :meth:`_wait_request` then sets the
        next read deadline directly — one deadline move per request instead
        of two (each move is ~1.7 us of trio bookkeeping).
        """
        self._phase = _BUSY

    def ensure_busy(self) -> None:
        """Lift the read deadline before the answering phase waits for anything.

        Cancellation handling: every await between a request head and the
        next read (pooled preparation, follow-ups, a write that blocks, the
        pipelining checkpoint) is preceded by this, so a read deadline never
        cuts a response in progress.
        """
        if self._armed:
            self._armed = False
            if self.read_scope is not None:
                self.read_scope.deadline = math.inf

    async def _read_deadline_expired(self) -> None:
        """The lifetime scope was cancelled: a read deadline or a drain."""
        env = self.env
        if self._drained or env.draining:
            return
        if self._phase == _KEEPALIVE:
            env.stats.timeouts_keepalive += 1
            return
        env.stats.timeouts_head += 1
        await self._send_error(HTTPError(408, "request head timeout", close=True))

    async def run(self) -> None:
        stats = self.env.stats
        try:
            tls = self._lazy_stream
            if isinstance(tls, trio.SSLStream):
                if not await self._handshake():
                    return
                if self._h2 is not None and tls.selected_alpn_protocol() == "h2":
                    await self._switch(b"")  # RFC 9113 §3.2: ALPN "h2"
                    return
            # One cancel scope for the connection's whole life carries the
            # head and keep-alive deadlines: moving its deadline costs a
            # fraction of entering a fresh scope per request (measured: a
            # CancelScope with a deadline is ~8 us of a ~100 us request).
            # On a plain socket the first request, when its head is here at
            # once, is answered before that scope exists: nothing waits for
            # request bytes until then, so no read deadline can be due, and
            # a connection that closes after it never pays for the scope.
            first = self._new_parser(b"")
            state: tuple[HeadParser, int] | None = (first, 0)
            if self._fd >= 0:
                state = await self._serve(first, 0, unscoped=True)
            if state is not None:
                parser, requests = state
                with trio.CancelScope() as scope:
                    self.read_scope = scope
                    await self._serve(parser, requests)
                self.read_scope = None
                if scope.cancelled_caught:
                    await self._read_deadline_expired()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            stats.resets += 1
        except _Abort:
            pass
        except BaseException as exc:
            # Cancellation may arrive bare or wrapped in an exception group by
            # a nursery we were waiting in (the pooled-preparation watcher).
            if _only_cancelled(exc):
                stats.cancelled += 1
            raise
        finally:
            if self._sock is not None and self._fd >= 0:
                # Every task that used this fd ran inside _serve and is done,
                # so no task waits on it and trio's I/O manager keeps no
                # registration for it (it drops one with its last waiter):
                # the fd is closed directly, without notify_closing, whose
                # EPOLL_CTL_DEL would only fail with ENOENT (the kernel
                # removes a closed socket from an epoll or kqueue set itself).
                os.close(self._sock.detach())
            elif self._sock is not None:
                # A plain socket closes synchronously (what SocketStream.aclose
                # does, minus its checkpoint); aclose_forcefully would also
                # enter a cancel scope, per connection, for nothing.
                self._sock.close()
            else:
                await trio.aclose_forcefully(self.stream)

    async def _handshake(self) -> bool:
        """TLS handshake under the head deadline; False: close quietly.

        It is the read scope while it runs, so a drain closes a connection
        still in its handshake at once, like an idle one.
        """
        env = self.env
        assert isinstance(self.stream, trio.SSLStream)
        with trio.CancelScope(deadline=trio.current_time() + env.config.head_timeout) as scope:
            self.read_scope = scope
            if env.cut_fresh:
                scope.cancel()
            try:
                await self.stream.do_handshake()
            except trio.BrokenResourceError:
                # Not TLS (a plain HTTP request), a version or cipher
                # mismatch, or the peer went away mid-hello.
                env.stats.tls_handshake_failures += 1
                return False
        self.read_scope = None
        if scope.cancelled_caught:
            if not env.draining:
                env.stats.timeouts_head += 1
            return False
        return True

    # ------------------------------------------------------------ reading

    def _new_parser(self, leftover: bytes) -> HeadParser:
        """This request cycle's parser, holding the bytes left over from the
        previous one (pipelining).  The common head is parsed by the strict
        fast path; anything else goes to an h11 parser created only then."""
        self._fed = len(leftover)
        return HeadParser(self.env.config.max_head_size, leftover)

    def _parse(self, parser: HeadParser) -> object:
        """The next event (a request head, h11.NEED_DATA or another h11
        event), with protocol errors mapped to HTTPError."""
        try:
            event = parser.next_event()
        except h11.RemoteProtocolError as exc:
            raise HTTPError(exc.error_status_hint, str(exc), close=True) from None
        t = type(event)
        if t is FastRequest or t is h11.Request:
            max_head = self.env.config.max_head_size
            if self._fed > max_head:
                # h11 only limits *incomplete* heads; a whole oversized head
                # in one read gets through, so count what it consumed.
                if self._fed - len(parser.trailing_data[0]) > max_head:
                    raise HTTPError(431, "request head too large", close=True)
        return event

    async def _next_request(self, parser: HeadParser, idle: bool) -> Head | None:
        """The next request head, or None when the connection should close
        quietly (EOF, keep-alive timeout, drain)."""
        env = self.env
        if env.draining and (idle or env.cut_fresh):
            return None
        if self._fd >= 0 and self._fed and idle:
            # Fast path, when the head is probably here already: bytes left
            # over from the previous request (pipelining).  No cancel scope,
            # no trio socket machinery; one checkpoint keeps the loop fair to
            # other connections.  After a response to a client that waits
            # for it, the next request is not here yet: trying a read first
            # would only cost an EAGAIN syscall, so we go straight to
            # waiting.  (A new connection's first read is :meth:`_serve`'s
            # unscoped step; when it did not bring the whole head, the head
            # deadline starts at once, as below.)
            event = self._head_now(parser)
            if event is None:
                return None
            if event is not h11.NEED_DATA:
                self.ensure_busy()
                await trio.lowlevel.checkpoint()
                return _head(event)
        return await self._wait_request(parser, idle)

    def _head_now(self, parser: HeadParser) -> object:
        """The next event from what is buffered plus at most one
        non-blocking read (plain sockets): a head or another h11 event,
        h11.NEED_DATA (not all here yet), or None at EOF."""
        event: object = self._parse(parser) if self._fed else h11.NEED_DATA
        if event is h11.NEED_DATA:
            try:
                data = os.read(self._fd, RECV_SIZE)
            except BlockingIOError:
                return event
            except OSError as exc:
                raise trio.BrokenResourceError from exc
            if not data:
                return None
            self._fed += len(data)
            parser.receive_data(data)
            event = self._parse(parser)
        return event

    async def _wait_request(self, parser: HeadParser, idle: bool) -> Head | None:
        """Slow path of :meth:`_next_request`: wait under the deadlines.

        Between requests the keep-alive deadline runs until the first byte;
        if that read does not complete the head, the head deadline starts
        (a complete head in one read, the common case, skips that step).
        A deadline cancels the lifetime scope; :meth:`run` then answers 408
        (head) or closes quietly (keep-alive).
        """
        cfg = self.env.config
        scope = self.read_scope
        assert scope is not None
        keepalive = idle and self._fed == 0
        self._armed = True
        if keepalive:
            self._phase = _KEEPALIVE
            scope.deadline = trio.current_time() + cfg.keepalive_timeout
        else:
            self._phase = _HEAD
            scope.deadline = trio.current_time() + cfg.head_timeout
        fd = self._fd
        event: object = self._parse(parser) if self._fed else h11.NEED_DATA
        if event is h11.NEED_DATA and self.peer_eof:
            return None  # half-closed: no more requests can arrive
        order = self.env.order
        # Between requests with many connections open, take our turn first
        # (serverio.net.order) and only then read: a busy server comes back
        # to a connection about one round later, and by then its next
        # request is usually here, so no epoll registration is needed.
        turn_first = keepalive and fd >= 0 and order is not None and order.engaged
        while event is h11.NEED_DATA:
            if fd >= 0:
                if turn_first:
                    turn_first = False
                    assert order is not None
                    self._turn = await order.wait_turn(self._turn)
                else:
                    # Wait, then read once: trio's receive_some would first
                    # try a recv that we know returns EAGAIN.
                    await trio.lowlevel.wait_readable(fd)
                try:
                    data: bytes | bytearray = os.read(fd, RECV_SIZE)
                except BlockingIOError:
                    continue  # not here yet (or a spurious wake-up): wait for it
                except OSError as exc:
                    raise trio.BrokenResourceError from exc
            else:
                data = await self.stream.receive_some(RECV_SIZE)
                if data and keepalive and order is not None and order.engaged:
                    # The next request is arriving: take our turn among the
                    # connections that became ready with us.
                    self._turn = await order.wait_turn(self._turn)
            if not data:
                return None
            self._fed += len(data)
            parser.receive_data(data)
            event = self._parse(parser)
            if keepalive and event is h11.NEED_DATA:
                # First bytes of the next request, but not the whole head:
                # the head deadline starts now.
                self._phase = _HEAD
                scope.deadline = trio.current_time() + cfg.head_timeout
            keepalive = False
        self._busy()
        return _head(event)

    def _facts(self, event: Head) -> tuple[RequestFacts, bool, str | None, str | None, str | None]:
        """Request facts, whether it is an HTTP/1.0 keep-alive, user agent,
        referer, request id (X-Request-Id, for the access log only)."""
        version = event.http_version
        if version != b"1.1" and version != b"1.0":
            raise HTTPError(505, "unsupported HTTP version", close=True)
        target = parse_target(event.method, event.target, max_size=self.env.config.max_target_size)
        # The field mapping is shared with HTTP/2 (serverio.http.fields);
        # framing and Connection tokens are HTTP/1.1's own.
        f = scan_fields(event.headers)
        has_body = f.nonzero_length
        if f.chunked:
            if f.content_length:
                # RFC 9112 §6.1: both framings at once is how requests get
                # smuggled; refuse rather than pick one.
                raise HTTPError(400, "Content-Length with Transfer-Encoding", close=True)
            has_body = True
        connection = f.connection
        tokens = _tokens(connection) if connection is not None else _NO_TOKENS
        if version == b"1.1":
            keep_alive = b"close" not in tokens
            ka10 = False
        else:
            keep_alive = b"keep-alive" in tokens and b"close" not in tokens
            ka10 = keep_alive
        facts = RequestFacts(
            method=event.method,
            target=target,
            keep_alive=keep_alive and not has_body,
            has_body=has_body,
            tls=self._tls,
            **f.values,
        )
        return facts, ka10, f.user_agent, f.referer, f.request_id

    # ------------------------------------------------------------ serving

    async def _serve(
        self, parser: HeadParser, requests: int, *, unscoped: bool = False
    ) -> tuple[HeadParser, int] | None:
        """Answer requests until the connection should close (then None).

        ``unscoped``: the first step of a new plain-socket connection, run
        before the lifetime scope exists.  Only a first request whose head
        is here after one non-blocking read is answered; otherwise, and
        after that answer if the connection stays open, the (parser,
        request count) to go on with under the lifetime scope is returned.
        Nothing in this step waits for request bytes, so no head or
        keep-alive deadline is due in it; a drain does not touch a
        connection with a request in flight either way.
        """
        env = self.env
        cfg = env.config
        peer = self._peer
        while True:
            if unscoped:
                if requests:
                    return parser, requests  # the next request, under the scope
                if env.draining and env.cut_fresh:
                    return None
                try:
                    got = self._head_now(parser)
                except HTTPError as exc:
                    await self._send_error(exc)
                    return None
                if got is h11.NEED_DATA:
                    return parser, requests  # wait for it under the head deadline
                # A new connection's first request needs no yield for
                # fairness: its task has only just been scheduled, and what
                # it runs before its next checkpoint is bounded by this one
                # request.  Cancellation (abort, a cut connection nursery)
                # is still honoured here, without the scheduling round of a
                # full checkpoint.
                await trio.lowlevel.checkpoint_if_cancelled()
                event = _head(got)
            else:
                try:
                    event = await self._next_request(parser, idle=requests > 0)
                except HTTPError as exc:
                    await self._send_error(exc)
                    return None
            if event is None:
                return None
            if (
                event.http_version == b"2.0"
                and requests == 0
                and self._h2 is not None
                and event.method == b"PRI"
                and event.target == b"*"
                and not event.headers
            ):
                # h2c with prior knowledge (RFC 9113 §3.3): hand over the
                # bytes h11 parsed plus what it buffered after them.
                await self._switch(_PREFACE_HEAD + parser.trailing_data[0])
                return None
            requests += 1
            self.in_flight = True
            started = trio.current_time()
            now = time.time()
            ka10 = False
            ua = referer = request_id = None
            keep = False
            body: Body | None = None
            client = peer
            # The request steps are the pipeline's (serverio.pipeline.request),
            # shared with HTTP/2; facts, the wait, the emit and keep-alive
            # are this connection's.
            try:
                try:
                    req, ka10, ua, referer, request_id = self._facts(event)
                    if cfg.proxy_networks:  # --trusted-proxies; else no call at all
                        client = client_for(cfg, peer, req)
                    keep = req.keep_alive and requests < cfg.max_requests
                    got = start(env, req, now)
                    if type(got) is Waiting:
                        answer = await complete(
                            env, got, now, client, partial(self._wait_watching, parser=parser)
                        )
                        if answer is None:
                            env.stats.cancelled += 1
                            return None  # the client went away while we waited
                    else:
                        assert type(got) is tuple
                        answer = got
                except HTTPError as exc:
                    answer = failed(env, exc, now, event.method == b"HEAD")
                plan, body, ticket = answer
                if plan.stream:
                    if await self._stream(plan):
                        return None
                    # Past --watch-max-streams: a 503 instead, sent and
                    # recorded like any other answer.
                    assert env.live is not None
                    plan, body, _ = finish(env, env.live.busy_plan(now), ticket)
                close = not keep or plan.close or env.draining
                if self.peer_eof and not parser.trailing_data[0]:
                    close = True  # half-closed, nothing pipelined: this is the last
                sent = await self._emit(plan, body, close=close, ka10=ka10 and not close)
            finally:
                if body is not None:
                    body.close()
                self.in_flight = False
            record(
                env,
                client,
                event.method,
                event.target,
                event.http_version,
                plan.status,
                sent,
                started,
                now,
                ua,
                referer,
                request_id,
            )
            if close:
                return None
            parser = self._new_parser(parser.trailing_data[0])

    def _peer(self) -> str:
        return self.client

    async def _stream(self, plan: Plan) -> bool:
        """A long-lived streaming body (the live-reload event stream);
        False when ``--watch-max-streams`` streams are open already (nothing
        was sent: the caller answers 503).

        The stream takes a slot of the live-reload budget
        (:class:`~serverio.concurrency.broadcast.StreamSlots`) for as long
        as it runs: the connection then no longer counts toward
        ``--max-connections`` (the server's admission leaves slot holders
        out), so open event streams never shut ordinary clients out.
        The head goes out with ``Connection: close`` (the body ends when the
        connection does), then the broadcaster writes through :meth:`_send`
        (its write deadline applies: a client that stops reading is closed
        ``write_timeout`` after a write stalls, the heartbeat comment every
        15 s being the write that notices) until the client goes away, a
        write fails, or graceful shutdown cancels the stream scope
        (:meth:`drain`).  No read deadline runs meanwhile: the stream is
        exempt from the keep-alive timeout; the watcher task below only
        notices the client leaving.

        Cancellation handling: the slot is given back in every case.
        """
        live = self.env.live
        head = head_bytes(plan.status, plan.headers, close=True, keep_alive_10=False)
        if live is None or not plan.send_body:
            await self._send(head)
            return True
        if not live.slots.take(self):
            return False
        try:
            self.ensure_busy()
            stream = self.stream

            async def watch(scope: trio.CancelScope) -> None:
                try:
                    while await stream.receive_some(RECV_SIZE):
                        pass  # an event stream's client has nothing to say
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                scope.cancel()

            failure: _Abort | trio.BrokenResourceError | trio.ClosedResourceError | None = None
            with trio.CancelScope() as scope:
                self._stream_scope = scope
                if self.env.draining:
                    scope.cancel()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(watch, nursery.cancel_scope)
                    # A write that fails (the deadline: _Abort; a reset) ends
                    # the stream; it leaves the nursery bare, not wrapped in
                    # an exception group, so that run() closes the
                    # connection quietly as after any failed write.
                    try:
                        await live.serve_client(self._send, head)
                    except (_Abort, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                        failure = exc
                        nursery.cancel_scope.cancel()
            self._stream_scope = None
            if failure is not None:
                raise failure
        finally:
            live.slots.give(self)
        self.env.stats.completed += 1
        return True

    async def _switch(self, initial: bytes) -> None:
        """Serve the rest of the connection as HTTP/2.

        The lifetime scope stays around it (shutdown and abort reach it as
        for HTTP/1.1) with its read deadline lifted: the HTTP/2 connection
        keeps its own deadlines.  A drain is forwarded to it from now on.
        """
        assert self._h2 is not None
        self._armed = False
        if self.read_scope is not None:
            self.read_scope.deadline = math.inf
        self.in_flight = True
        self._switched = self._h2(self.env, self.stream, lambda: self.client, initial)
        await self._switched.run()

    async def _send_error(self, exc: HTTPError) -> None:
        """Answer a request we could not parse, then close."""
        self._busy()
        self.ensure_busy()  # the read deadline must not cut the error response
        stats = self.env.stats
        plan = http_error_plan(exc, time.time())
        try:
            await self._emit(plan, Body.of(plan), close=True, ka10=False)
        except (trio.BrokenResourceError, trio.ClosedResourceError, _Abort):
            return
        stats.completed += 1
        if plan.status >= 500:
            stats.server_errors += 1
        else:
            stats.client_errors += 1
        if self.env.access_log.enabled:
            self.env.access_log.write(
                AccessRecord(self.client, "-", "-", "1.1", plan.status, len(plan.body[0]), 0.0),
                time.time(),
            )

    async def _wait_watching(self, deferred: Deferred, parser: HeadParser) -> Prepared | None:
        """Await the handler's deferred step while watching the client.

        Returns None when the client went away meanwhile (the step was
        cancelled, or its result closed here).

        One helper task (the watcher) reads the socket while this task
        waits, so a client that hangs up is noticed now, not when the work
        is done.  Pipelined bytes go to h11's buffer; past one head's worth
        the watcher stops reading (backpressure).  It never writes.

        Only a reset (or a closed stream) means the client is gone.  EOF is
        a half-close: ``nc -N``, socat and scripted HTTP/1.0 clients send
        the request, then ``shutdown(SHUT_WR)``, and still read the answer
        (RFC 9112 §9.6 lets the client close its sending side first).  The
        watcher then stops reading and marks the connection, which closes
        after what it already received has been answered.

        Cancellation handling: when the client goes away the watcher
        cancels the nursery, which cancels the step (the handler closes
        what it held; an abandoned pool hop is late-closed); a result that
        arrived anyway is closed here.  Exceptions from the step (such as
        PoolSaturated) are re-raised only if the client is still there.
        The deferred step is closed in every case, so nothing it held can
        leak even if it never ran.
        """
        self.ensure_busy()
        result: Prepared | None = None
        error: Exception | None = None
        gone = False
        limit = self.env.config.max_head_size
        stream = self.stream

        async def watch(scope: trio.CancelScope) -> None:
            nonlocal gone
            try:
                while self._fed <= limit and not self.peer_eof:
                    data = await stream.receive_some(RECV_SIZE)
                    if not data:
                        self.peer_eof = True
                        break
                    self._fed += len(data)
                    parser.receive_data(data)
                await trio.sleep_forever()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            gone = True
            scope.cancel()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, nursery.cancel_scope)
                try:
                    result = await deferred.run()
                except Exception as exc:  # PoolSaturated and friends: re-raised below
                    error = exc
                nursery.cancel_scope.cancel()
        finally:
            deferred.close()
        if gone:
            if result is not None:
                result.close()
            return None
        if error is not None:
            raise error
        return result

    # ------------------------------------------------------------ writing

    async def _send(self, data: bytes | memoryview) -> None:
        """Write ``data`` under the write deadline ("time without progress").

        Fast path: one non-blocking ``write`` that takes everything (the
        common case for heads and small bodies) needs no scope and no wait.
        Otherwise, on a plain socket we drive ``sock.send`` ourselves so every
        partial send pushes the deadline forward.  Other streams (TLS,
        memory) only report completion, so we hand them SEND_PIECE bytes at
        a time and push the deadline after each piece.
        """
        if self._lazy_stream is None:
            self._tune()
        view = memoryview(data)
        if self._fd >= 0:
            try:
                n = os.write(self._fd, view)
            except BlockingIOError:
                n = 0
            except OSError as exc:
                raise trio.BrokenResourceError from exc
            if n == len(view):
                return
            view = view[n:]
        self.ensure_busy()
        timeout = self.env.config.write_timeout
        with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
            if self._sock is not None:
                while view:
                    try:
                        n = await self._sock.send(view)
                    except OSError as exc:
                        # EPIPE/ECONNRESET from the raw socket: the same
                        # "peer went away" as the stream API reports.
                        raise trio.BrokenResourceError from exc
                    view = view[n:]
                    scope.deadline = trio.current_time() + timeout
            else:
                while view:
                    await self.stream.send_all(view[:SEND_PIECE])
                    view = view[SEND_PIECE:]
                    scope.deadline = trio.current_time() + timeout
        if scope.cancelled_caught:
            self.env.stats.timeouts_write += 1
            raise _Abort

    async def _emit(self, plan: Plan, body: Body, *, close: bool, ka10: bool) -> int:
        """Write the plan's head and its body source (which the caller
        closes).  Returns the number of body bytes sent.

        Literal pieces are coalesced with the head into as few writes as
        possible; each file span is flushed before it and streamed itself.
        """
        head = plan.head
        if head is None or ka10:
            head = head_bytes(plan.status, plan.headers, close=close, keep_alive_10=ka10)
        elif close:
            # A memoised head is head_bytes(close=False, keep_alive_10=False):
            # the close variant is the same fields with Connection: close
            # last, before the blank line (what head_bytes(close=True) writes).
            head = head[:-2] + _CLOSE_END
        stats = self.env.stats
        literal = body.pieces
        if len(literal) == 1 and self._fd >= 0:
            piece = literal[0]
            if type(piece) is bytes:
                # The common answer (a warm cached file, an error page): the
                # head and one in-memory piece in one non-blocking writev,
                # without the piece list and the coroutine of the general
                # path below.
                total = len(head) + len(piece)
                if self._lazy_stream is None and (not close or total > _UNTUNED_WRITE_MAX):
                    # Only the one small write of a connection that closes
                    # after it goes out before the TCP options are set.
                    self._tune()
                try:
                    n = _os_writev(self._fd, (head, piece))
                except BlockingIOError:
                    n = 0
                except OSError as exc:
                    raise trio.BrokenResourceError from exc
                if n < total:
                    await self._send_rest(head, piece, n)
                stats.bytes_sent += total
                return len(piece)
        sent = 0
        pieces = [head]
        if body.pieces:
            used_file = False
            for piece in body.pieces:
                if isinstance(piece, FileSpan):
                    assert body.fd >= 0
                    used_file = True
                    await self._send_pieces(pieces)
                    pieces = []
                    if self.use_sendfile:
                        await self._sendfile(body.fd, piece)
                    else:
                        await self._send_buffered(body.fd, piece)
                else:
                    pieces.append(piece)
                sent += len(piece)
            if used_file:
                if self.use_sendfile:
                    stats.sendfile_responses += 1
                else:
                    stats.buffered_responses += 1
        if pieces:
            await self._send_pieces(pieces)
        stats.bytes_sent += len(head) + sent
        return sent

    async def _send_rest(self, head: bytes, piece: bytes, n: int) -> None:
        """What a partial writev of ``head`` and ``piece`` left after ``n``
        bytes, through :meth:`_send` (a shared piece is sliced as a view,
        never copied)."""
        if n < len(head):
            await self._send(memoryview(head)[n:] if n else head)
            await self._send(piece)
        else:
            await self._send(memoryview(piece)[n - len(head) :])

    async def _send_pieces(self, pieces: list[bytes]) -> None:
        """Write the pieces in order: one ``writev`` when it takes them all.

        Gathering the head and an in-memory body in the kernel saves joining
        them in user space — a 64 KiB copy per request for a cached file.

        Memory: a body piece may be shared by every connection (a
        compression-cache or warm-file-cache entry), so what a partial write
        leaves is sent as ``memoryview`` slices of the pieces themselves,
        never a joined copy: a client that stops reading pins O(socket
        buffer) bytes of its own, not O(body).
        """
        if self._lazy_stream is None:
            self._tune()
        if len(pieces) > 1:
            if self._fd >= 0:
                try:
                    n = _os_writev(self._fd, pieces)
                except BlockingIOError:
                    n = 0
                except OSError as exc:
                    raise trio.BrokenResourceError from exc
                if n == sum(map(len, pieces)):
                    return
                # Rare (a full socket buffer): the rest through the slow path.
                for piece in pieces:
                    if n >= len(piece):
                        n -= len(piece)
                        continue
                    await self._send(memoryview(piece)[n:] if n else piece)
                    n = 0
                return
            if sum(map(len, pieces)) <= BUFFER_CHUNK:
                # Other streams (TLS): one write, so a small response goes
                # out as one record; the copy is bounded by BUFFER_CHUNK.
                await self._send(b"".join(pieces))
                return
            for piece in pieces:
                await self._send(piece)
        elif pieces:
            await self._send(pieces[0])

    async def _sendfile(self, fd: int, span: FileSpan) -> None:
        """Zero-copy: ``os.sendfile`` on the non-blocking socket.

        Waits with ``wait_writable`` on EAGAIN; the write deadline is pushed
        forward on every call that moves bytes ("time without progress").
        A file that shrank under us makes sendfile return 0 before the span
        is done: we abort rather than pad or finish short.
        """
        if self._lazy_stream is None:
            self._tune()
        sock = self._sock
        assert sock is not None
        sockfd = sock.fileno()
        offset, remaining = span.offset, span.length
        self.ensure_busy()
        timeout = self.env.config.write_timeout
        with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
            while remaining:
                try:
                    n = _os_sendfile(sockfd, fd, offset, min(remaining, SENDFILE_CHUNK))
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(sock)
                    continue
                except OSError as exc:
                    raise trio.BrokenResourceError from exc
                if n == 0:
                    self.env.stats.truncated += 1
                    raise _Abort
                offset += n
                remaining -= n
                scope.deadline = trio.current_time() + timeout
                if n == SENDFILE_CHUNK:
                    # The socket took a whole chunk without blocking: let
                    # other tasks run before the next one (fairness).
                    await trio.lowlevel.checkpoint()
        if scope.cancelled_caught:
            self.env.stats.timeouts_write += 1
            raise _Abort

    async def _send_buffered(self, fd: int, span: FileSpan) -> None:
        """Through user space, at most BUFFER_CHUNK bytes at a time."""
        offset, remaining = span.offset, span.length
        while remaining:
            try:
                data = pread(fd, min(remaining, BUFFER_CHUNK), offset)
            except OSError:
                # EIO from a failing disk mid-body: the head is out, so the
                # only honest answer is to cut the response short.
                self.env.stats.read_errors += 1
                raise _Abort from None
            if not data:
                self.env.stats.truncated += 1
                raise _Abort
            await self._send(data)
            offset += len(data)
            remaining -= len(data)
