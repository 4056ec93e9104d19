"""The HTTP/1.1 connection: the loop that ties its parts together.

One task per connection.  Its parts have one job each:

* :class:`~serverio.net.h1state.Lifetime`: the phase (one enum, its
  transitions in one table) and the lifetime cancel scope that carries the
  handshake, head and keep-alive deadlines;
* :class:`~serverio.net.h1head.HeadReader`: the next request head, under
  those deadlines, and the request facts built from it;
* :class:`~serverio.net.emit.Emitter`: the response's head and body onto
  the stream, under the write deadline;
* :class:`~serverio.net.h1body.H1Body`: a request's content, when its head
  declares some (Content-Length or chunked, chosen once by
  :func:`~serverio.wire.bodyframe.request_framing`), pulled by the handler
  and drained (bounded) after the answer so that keep-alive survives;
* :class:`ConnectionTask` (here): the loop — the TLS handshake, the
  request steps of :mod:`serverio.pipeline.request` (shared with HTTP/2),
  the wait for a step of the pipeline while watching the client, keep-alive and
  close (transitions of the lifetime's phase: BUSY goes on to the next
  request, LAST closes), the live-reload event stream, the switch to
  HTTP/2, the hand-over to a tunnel after a proxied 101
  (:mod:`serverio.net.h1tunnel`).

It is the only task that reads or writes its socket (the disconnect
watcher is its own child task) and it passes neither itself, its stream
nor its parser to anyone.  Deadlines are cancel scopes:

* head deadline: the whole request head must arrive within ``head_timeout``
  of the connection's start (first request) or of the first byte of the
  request (keep-alive requests) -> 408 and close (slowloris);
* keep-alive deadline: between requests, the first byte must arrive within
  ``keepalive_timeout`` -> silent close;
* write deadline: every write must make progress within ``write_timeout``
  -> abort;
* body deadlines: each pull of a request body within ``body_timeout``, the
  whole body within ``body_total_timeout`` -> 408 and close (the body's own
  cancel scopes, :class:`~serverio.net.reqbody.RequestBody`); the drain of
  an unread body within ``BodyPolicy.drain_timeout`` -> close.

Data flows one way: bytes -> h11 events -> :class:`RequestFacts` ->
handler (resolution, decision, follow-ups) -> :class:`Plan` -> bytes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Sequence

import h11
import trio

from ..errors import HTTPError
from ..fs.body import Body, StreamBody
from ..http.core import Plan
from ..observe.accesslog import AccessRecord
from ..observe.responses import record
from ..pipeline.driver import Io, drive
from ..pipeline.exchange import Exchange, Final, Need
from ..pipeline.handler import R
from ..pipeline.hooks import RawHead, TunnelBody
from ..pipeline.request import busy, client_for, failed
from ..pipeline.stages import begin
from ..wire.bodyframe import request_framing
from ..wire.fasthead import FastRequest
from ..wire.h1 import interim_bytes
from ..wire.h1facts import Facts, request_facts
from .emit import Abort, Emitter
from .env import ConnectionEnv, Switched, SwitchFactory
from .h1body import H1Body
from .h1events import serve_events
from .h1head import Head, HeadReader
from .h1state import BUSY, CLOSED, DRAIN, HANDSHAKE, IDLE, LAST, SWITCHED, Lifetime
from .h1tunnel import serve_tunnel
from .reqbody import BodyState, body_policy
from .tlsstream import TLSStream

__all__ = ["H2_PREFACE", "ConnectionTask"]

# RFC 9113 §3.4: the client connection preface.  h11 parses its first 18
# bytes as a request head "PRI * HTTP/2.0" with no fields; the rest
# ("SM\r\n\r\n") is left in its buffer.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_PREFACE_HEAD = H2_PREFACE[:18]


def _only_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        _, rest = exc.split(trio.Cancelled)
        return rest is None
    return False


async def _run_at_once(run: Callable[[], Awaitable[R]], watch_late: bool) -> R | None:
    """How a request with content waits for a step: just await it (the
    disconnect watcher would read the content as the next head)."""
    return await run()


def _content(event: Head, env: ConnectionEnv, emitter: Emitter, reader: HeadReader) -> H1Body:
    """The content a request head declares, read from the bytes past the
    head and then the stream.  Ambiguous framing raises the HTTPError
    :func:`request_framing` decides (400, or 501 for an unknown transfer
    coding; both close).  ``100 Continue`` is sent only when the handler
    pulls (RFC 9110 §10.1.1).  The request steps run with no disconnect
    watcher meanwhile (:func:`_run_at_once`): the bytes it would read are
    the content; a client that leaves is noticed by the next pull or write."""
    framing = request_framing(event.headers, event.http_version)
    body = H1Body(
        framing,
        body_policy(env.config),
        emitter.stream.receive_some,
        reader.leftover,
        send_continue=emitter.send,
    )
    if event.http_version == b"1.1":  # RFC 9110 §15.2: no 1xx to an HTTP/1.0 client

        async def interim(status: int, fields: Sequence[tuple[bytes, bytes]]) -> None:
            # Before the final response's head (the step still runs): the
            # connection's one writer is idle, nothing interleaves.
            await emitter.send(interim_bytes(status, fields))

        body.interim = interim
    return body


async def _drain(content: H1Body, life: Lifetime, reader: HeadReader) -> bool:
    """After the answer: read past what the handler left of the content
    (within ``BodyPolicy.drain_max`` bytes and ``drain_timeout`` seconds)
    so that the connection carries the next request, which starts from the
    bytes read past the content.  False: close.

    Cancellation handling: the drain is bounded by its own scope
    (:meth:`RequestBody.drain`); an outer cancellation (shutdown, abort)
    propagates and the connection closes.
    """
    life.to(DRAIN)
    if content.state is not BodyState.DONE and not await content.drain():
        return False
    life.to(BUSY)
    reader.resume(content.leftover)
    return True


def _raw(event: Head) -> RawHead:
    """The head as received, for the proxy hook (built only off the warm path)."""
    return RawHead(event.headers, event.http_version, None)


def _is_preface(event: Head, requests: int) -> bool:
    """h2c with prior knowledge (RFC 9113 §3.3): the preface as a first request."""
    return (
        event.http_version == b"2.0"
        and requests == 0
        and event.method == b"PRI"
        and event.target == b"*"
        and not event.headers
    )


# What an access-log line of a response needs besides its size: client,
# request head, status, start (trio time), start (wall clock), whether it
# is an HTTP/1.0 keep-alive (for the emit), user agent, referer, request id.
_LogFields = tuple[
    Callable[[], str], Head, int, float, float, bool, str | None, str | None, str | None
]
# The facts' access-log part when there are none (a head whose facts are an error).
_NO_FACTS: tuple[None, bool, None, None, None] = (None, False, None, None, None)
# What answering one request tells the loop besides the request count to
# go on with: close the connection, or (the unscoped first step) wait for
# the first head under the head deadline.
_CLOSE = -1
_WAIT = 0


def _log(env: ConnectionEnv, f: _LogFields, size: int, user: str = "", **kind: bool) -> None:
    """Log (and count, unless ``kind`` says not) a response: also one that
    did not end the ordinary way: cut off mid-body (``cut=True``: its bytes
    sent) or an event stream that ended (``counted=False``).  ``user``: the
    signed-in user the access hook named ("" for none)."""
    client, event, status, started, now, _, ua, referer, request_id = f
    record(
        env,
        client,
        event.method,
        event.target,
        event.http_version,
        status,
        size,
        started,
        now,
        ua,
        referer,
        request_id,
        user=user,
        **kind,
    )


class ConnectionTask:
    """One client connection.  Created by the server's accept loop."""

    __slots__ = (
        "_client",
        "_h2",
        "_stream_scope",
        "_switched",
        "_tls",
        "emitter",
        "env",
        "life",
        "reader",
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
        (see :attr:`Emitter.stream` and :meth:`Emitter.tune`)."""
        self.env = env
        cfg = env.config
        # HTTP/2 on this connection: the server's (None: off), unless its
        # listener serves HTTP/1.1 only (``--listen ADDR/h1``).
        self._h2: SwitchFactory | None = env.http2 if http2 else None
        self.life = Lifetime()
        self.emitter = Emitter(
            stream, env.stats, cfg.conn.write_timeout, cfg.files.sendfile, self.life.lift
        )
        self._client = client
        # Over TLS (the request facts say so: --hsts is sent on TLS only).
        self._tls = self.emitter.tls is not None
        self.reader = HeadReader(cfg, self.emitter, self.life, env.order, self._tls)
        self._stream_scope: trio.CancelScope | None = None  # an event stream's
        self._switched: Switched | None = None

    @property
    def stream(self) -> trio.abc.Stream:
        """The connection's stream (made around a bare socket on first use)."""
        return self.emitter.stream

    @property
    def in_flight(self) -> bool:
        """A request is being answered (or the connection streams events,
        or HTTP/2 serves it): a drain lets it finish."""
        return self.life.in_flight

    @property
    def client(self) -> str:
        """The peer address, looked up only when something (the access log)
        asks: a getpeername() per connection is a syscall the churn workload
        would otherwise pay for nothing."""
        if self._client is None:
            self._client = "-"
            sock = self.emitter.sock
            if sock is not None:
                try:
                    peer = sock.getpeername()
                except OSError:
                    pass
                else:
                    if isinstance(peer, tuple) and peer:
                        self._client = str(peer[0])
        return self._client

    def _peer(self) -> str:
        return self.client

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
        life = self.life
        if (
            life.scope is not None
            and not life.in_flight
            and (life.phase == IDLE or self.env.cut_fresh)
        ):
            life.scope.cancel()

    def _busy(self) -> None:
        """A request head is in: the answering phase (its read deadline is
        lifted lazily, :meth:`Lifetime.lift`)."""
        phase = self.life.phase
        if phase is not BUSY and phase is not LAST:
            self.life.to(BUSY)

    async def _read_deadline_expired(self) -> None:
        """The lifetime scope was cancelled: a read deadline or a drain
        (the server sets ``env.draining`` before it drains connections)."""
        env = self.env
        if env.draining:
            return
        if self.life.phase == IDLE:
            env.stats.timeouts.keepalive += 1
            return
        env.stats.timeouts.head += 1
        await self._send_error(HTTPError(408, "request head timeout", close=True))

    async def run(self) -> None:
        stats = self.env.stats.conns
        emitter = self.emitter
        try:
            tls = emitter.tls
            if tls is not None:
                if not await self._handshake():
                    return
                if self._h2 is not None and tls.selected_alpn_protocol() == "h2":
                    await self._switch(b"")  # RFC 9113 §3.2: ALPN "h2"
                    return
            # On a plain socket the first request, when its head is here at
            # once, is answered before the lifetime scope exists: nothing
            # waits for request bytes until then, so no read deadline can be
            # due, and a connection that closes after it never pays for the
            # scope (serverio.net.h1state, phase FIRST).
            requests: int | None = 0
            if emitter.fd >= 0:
                requests = await self._serve(0, unscoped=True)
            if requests is not None:
                with trio.CancelScope() as scope:
                    self.life.scope = scope
                    await self._serve(requests)
                self.life.scope = None
                if scope.cancelled_caught:
                    await self._read_deadline_expired()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            stats.resets += 1
        except Abort:
            pass
        except BaseException as exc:
            # Cancellation may arrive bare or wrapped in an exception group by
            # a nursery we were waiting in (the pooled-preparation watcher).
            if _only_cancelled(exc):
                stats.cancelled += 1
            raise
        finally:
            self.life.phase = CLOSED  # from any phase
            if not emitter.close_socket():
                await trio.aclose_forcefully(emitter.stream)

    async def _handshake(self) -> bool:
        """TLS handshake under the head deadline; False: close quietly.

        It is the read scope while it runs, so a drain closes a connection
        still in its handshake at once, like an idle one.
        """
        env = self.env
        stream = self.stream
        assert isinstance(stream, TLSStream)
        life = self.life
        with trio.CancelScope() as scope:
            life.scope = scope
            life.arm(HANDSHAKE, env.config.conn.head_timeout)
            if env.cut_fresh:
                scope.cancel()
            try:
                await stream.do_handshake()
            except trio.BrokenResourceError:
                # Not TLS (a plain HTTP request), a version or cipher
                # mismatch, or the peer went away mid-hello.
                env.stats.conns.tls_handshake_failures += 1
                return False
        life.scope = None
        if scope.cancelled_caught:
            if not env.draining:
                env.stats.timeouts.head += 1
            return False
        return True

    # ------------------------------------------------------------ serving

    async def _serve(self, requests: int, *, unscoped: bool = False) -> int | None:
        """Answer requests until the connection should close (then None).

        ``unscoped``: the first step of a new plain-socket connection, run
        before the lifetime scope exists.  Only a first request whose head
        is here after one non-blocking read is answered; otherwise, and
        after that answer if the connection stays open, the request count
        to go on with under the lifetime scope is returned.  Nothing in
        this step waits for request bytes, so no head or keep-alive
        deadline is due in it; a drain does not touch a connection with a
        request in flight either way.
        """
        peer = self._peer  # one bound method for the connection's requests
        while True:
            if unscoped and requests:
                return requests  # the next request, under the scope
            got = await self._answer(requests, peer, unscoped)
            if got <= 0:
                return None if got == _CLOSE else 0  # 0: wait under the head deadline
            requests = got

    async def _answer(self, requests: int, peer: Callable[[], str], unscoped: bool) -> int:
        """Read the next request and answer it: the connection's request
        count to go on with, :data:`_CLOSE`, or :data:`_WAIT` (``unscoped``:
        no whole head here yet).  ``peer``: the connection's address lookup.

        Reading and the exchange's first step are one stretch: a common
        head comes out of the parser with its request facts
        (:class:`~serverio.wire.fasthead.HeadParser`), and the exchange
        begins at once (:func:`~serverio.pipeline.stages.begin`: a warm
        file is a precomputed Final); then the phase moves to BUSY (nothing
        awaits in between).  A head h11 parsed, or whose facts are an
        error, builds them here (:meth:`_begin`).

        Whether the connection outlives the answer is the lifetime's phase
        (:mod:`serverio.net.h1state`): every reason to close moves BUSY to
        LAST as it becomes known, a 101 moves to TUNNEL; still BUSY after
        the response: keep-alive."""
        env = self.env
        reader = self.reader
        try:
            if unscoped:
                event = await reader.first_head(env.draining and env.cut_fresh)
            else:
                event = await reader.next_head(requests > 0, env.draining, env.cut_fresh)
        except HTTPError as exc:
            await self._send_error(exc)
            return _CLOSE
        t = type(event)
        if t is not FastRequest and t is not h11.Request:
            return _WAIT if event is h11.NEED_DATA else _CLOSE
        head: Head = event  # type: ignore[assignment]  # a head: tested just above
        if head.http_version == b"2.0" and self._h2 is not None and _is_preface(head, requests):
            # Hand over the bytes h11 parsed plus what it buffered after them.
            self._busy()
            await self._switch(_PREFACE_HEAD + reader.leftover)
            return _CLOSE
        requests += 1
        started = trio.current_time()
        now = time.time()
        facts = head.facts if type(head) is FastRequest else None
        content: H1Body | None = None
        client = peer
        try:
            if facts is not None:  # the common head (no content): facts came with it
                if env.config.site.proxy_networks:  # --trusted-proxies; else no call at all
                    client = client_for(env.config, peer, facts[0])
                state, out = begin(env, facts[0], now)
                self._busy()
            else:
                facts, client, content, state, out = self._begin(head, peer, now)
            if not facts[0].keep_alive or requests >= env.config.conn.max_requests:
                self.life.close_after()  # RFC 9112 §9.3 (close, HTTP/1.0), --max-requests
            if type(out) is Final:
                answer = out
            else:
                assert state is not None and isinstance(out, Need)
                if content is not None:
                    # The content is read without the disconnect watcher
                    # (it would read the content as the next head).
                    io = Io(client, _run_at_once, content, _raw(head))
                else:
                    io = Io(client, reader.wait_watching, None, _raw(head))
                done = await drive(state, out, io)
                if done is None:
                    env.stats.conns.cancelled += 1
                    return _CLOSE  # the client went away while we waited
                answer = done
            # Can the connection outlive the rest (RFC 9112 §9.3)?
            if content is not None and not content.keepable():
                self.life.close_after()
        except HTTPError as exc:
            self._busy()
            if facts is None:
                self.life.close_after()  # no request facts: the error is the last answer
            answer = failed(env, exc, now, head.method == b"HEAD")
        log = (client, head, answer.plan.status, started, now, *(facts or _NO_FACTS)[1:])
        return await self._respond(answer, log, content, requests)

    def _begin(
        self, event: Head, peer: Callable[[], str], now: float
    ) -> tuple[Facts, Callable[[], str], H1Body | None, Exchange | None, Need | Final]:
        """The facts of a head h11 parsed (or whose facts are an error: it
        is raised here), and the exchange's first step; a request with
        content gets its body, read without the disconnect watcher."""
        self._busy()
        env = self.env
        facts = request_facts(event, env.config, self._tls)
        req = facts[0]
        client = client_for(env.config, peer, req) if env.config.site.proxy_networks else peer
        if not req.has_body:  # (a fast head never has content)
            return (facts, client, None, *begin(env, req, now))
        content = _content(event, env, self.emitter, self.reader)
        self.life.lift()  # the body's own deadlines apply from here
        return (facts, client, content, *begin(env, req, now, True))

    async def _respond(
        self, answer: Final, log: _LogFields, content: H1Body | None, requests: int
    ) -> int:
        """Send ``answer`` and log it; the request count to go on with (keep-alive)
        or :data:`_CLOSE`.  The body is closed in every case (a literal body
        owns nothing: its close would do nothing)."""
        env = self.env
        life = self.life
        reader = self.reader
        plan, body, ticket = answer
        user = ticket.user if ticket is not None else ""
        try:
            if plan.stream:
                if await self._stream(plan, log):
                    return _CLOSE
                # Past --watch-max-streams (decided by the reserved-paths
                # stage, serverio.pipeline.stages.streamed; this is its
                # safety net): a 503, sent and recorded like any other.
                plan, body, _ = busy(env, ticket, log[4])
                log = (log[0], log[1], plan.status, *log[3:])
            event = log[1]
            chunked = event.http_version == b"1.1"
            if (
                plan.close
                or env.draining
                # Half-closed, nothing pipelined: this is the last (RFC 9112 §9.6).
                or (reader.peer_eof and not reader.leftover)
                # A streamed body of unknown length to HTTP/1.0: close-delimited.
                or (type(body) is StreamBody and body.length is None and not chunked)
            ):
                life.close_after()
            try:
                if type(body) is TunnelBody:  # a 101: BUSY or LAST -> TUNNEL
                    sent = await serve_tunnel(self.emitter, life, plan, body, reader.leftover)
                else:
                    close = life.phase is LAST
                    sent = await self._send(plan, body, close, log[5] and not close, chunked)
            except BaseException:  # cut off (client gone, write deadline, abort): logged "cut"
                _log(env, log, self.emitter.progress, user, cut=True)
                raise
        finally:
            if body.fd >= 0 or type(body) is not Body:
                body.close()
        _log(env, log, sent, user)
        if life.phase is not BUSY:
            return _CLOSE  # LAST (close) or TUNNEL (the tunnel ended): no next request
        if content is not None and not await _drain(content, life, reader):
            return _CLOSE
        return requests  # keep-alive

    async def _send(self, plan: Plan, body: Body, close: bool, ka10: bool, chunked: bool) -> int:
        """Write the answer; the bytes of its body sent."""
        if type(body) is not StreamBody:
            return await self.emitter.emit(plan, body, close=close, ka10=ka10)
        # A streamed body (an archive, a proxied response): the one
        # streamed-body path (Emitter.emit_stream: Content-Length, chunked
        # for HTTP/1.1, close-delimited for HTTP/1.0).
        return await self.emitter.emit_stream(plan, body, close=close, ka10=ka10, chunked=chunked)

    async def _stream(self, plan: Plan, log: _LogFields) -> bool:
        """The live-reload event stream (:func:`~serverio.net.h1events.serve_events`);
        False past ``--watch-max-streams`` (nothing was sent: the caller
        answers 503).  A drain cancels it through :attr:`_stream_scope`."""

        def scoped(scope: trio.CancelScope | None) -> None:
            self._stream_scope = scope

        logged = functools.partial(_log, self.env, log)
        return await serve_events(self.env, self.emitter, self.life, self, plan, logged, scoped)

    async def _switch(self, initial: bytes) -> None:
        """Serve the rest of the connection as HTTP/2.

        The lifetime scope stays around it (shutdown and abort reach it as
        for HTTP/1.1) with its read deadline lifted: the HTTP/2 connection
        keeps its own deadlines.  A drain is forwarded to it from now on.
        """
        assert self._h2 is not None
        life = self.life
        life.disarm()
        life.to(SWITCHED)
        self._switched = self._h2(self.env, self.stream, lambda: self.client, initial)
        try:
            await self._switched.run()
        finally:
            # It holds a closure over this task (the client's address): no
            # cycle between the two outlives the connection.
            self._switched = None

    async def _send_error(self, exc: HTTPError) -> None:
        """Answer a request we could not parse, then close.

        The plan is finished like every other answer (``failed``: the
        site's rules for responses without a request, as HTTP/2 does for
        the same error), so the two protocols send the same fields."""
        self._busy()
        self.life.lift()  # the read deadline must not cut the error response
        stats = self.env.stats.responses
        plan, body, _ = failed(self.env, exc, time.time(), False)
        try:
            await self.emitter.emit(plan, body, close=True, ka10=False)
        except (trio.BrokenResourceError, trio.ClosedResourceError, Abort):
            return
        stats.completed += 1
        if plan.status >= 500:
            stats.server_errors += 1
        else:
            stats.client_errors += 1
        if self.env.access_log.enabled:
            size = sum(map(len, body.pieces))
            self.env.access_log.write(
                AccessRecord(self.client, "-", "-", "1.1", plan.status, size, 0.0),
                time.time(),
            )
