"""HTTP/2 connections (RFC 9113): the loop that ties their parts together.

A connection that negotiated HTTP/2 (ALPN ``h2`` over TLS, or the client
preface on a cleartext port: h2c with prior knowledge) is handed over by
:class:`~serverio.net.connection.ConnectionTask` to an :class:`H2Connection`.
The ``h2`` library (sans-I/O, like h11) keeps the protocol state.  The
parts have one job each:

* :mod:`serverio.net.h2adapter`: every use of h2's private API (the
  server-side h2 connection, the direct frame path, the content-length
  check left to serverio), with the h2 versions it supports;
* :class:`~serverio.net.h2read.FrameReader`: bytes -> h2 events, under the
  flood budgets (resets, control frames, the WINDOW_UPDATE allowance,
  header-block size); sans-I/O;
* :class:`~serverio.net.h2write.Writer`: the only code that writes the
  socket: HEADERS (one field builder,
  :func:`~serverio.net.h2write.response_fields`), bodies framed round-robin
  within the flow-control windows, the write deadlines and the
  window-progress rule;
* :class:`~serverio.net.h2state.Stream`: one stream, its state one enum
  whose transitions live in one table;
* :class:`~serverio.net.h2answer.StreamAnswer`: a stream's answer, the
  request steps of :mod:`serverio.pipeline.request` (shared with HTTP/1.1)
  under the cap on body descriptors (``--h2-max-open-files``);
* :class:`~serverio.net.h2events.EventStreams`: live-reload event streams;
* :class:`H2Connection` (here): the loop — reading the socket under the
  idle deadline and backpressure, starting, refusing and resetting
  streams, answering in the reader a stream that needs no wait, one task
  per other stream, drain and close.

Tasks, all in the connection's nursery::

    reader (the connection task)   socket -> FrameReader -> streams; the
                                   idle deadline
    writer (Writer.run)            h2 output -> socket, under the write
                                   deadline; fills DATA frames round-robin
    one task per stream            RequestFacts -> route / Handler -> Plan;
                                   HEADERS, then waits while the writer
                                   sends its body
                                   (none for a stream the client ended whose
                                   answer awaits nothing and goes out whole
                                   at once: the reader answers it,
                                   _answer_now, as HTTP/1.1 answers a warm
                                   request inline)

Only the reader reads the socket and only the writer writes it; every h2
call happens on the trio thread between checkpoints, so the state machine
needs no lock.

Cancellation handling: each stream task runs in its own cancel scope (a
stream the reader answers awaits nothing: there is nothing to cancel).
``RST_STREAM`` from the client cancels exactly that scope: the handler call
in progress is cancelled as for an HTTP/1.1 client that went away (the
need is closed, an abandoned pool hop is late-closed), the stream stops
being a body source before its ``Body`` is closed, once.  Shutdown
(:meth:`H2Connection.drain`) sends GOAWAY with the last stream id handed to
the handler, refuses later streams, and lets the in-flight ones finish;
the server cancels what remains after ``--shutdown-timeout``.

Memory per connection is bounded regardless of file sizes and stream count
(docs/features.md "HTTP/2" states the budget).  Deadlines:

* idle: with no stream in flight, the next request must start within
  ``head_timeout`` (the first) or ``keepalive_timeout`` (later ones), else
  GOAWAY and close; PINGs and partial header blocks do not extend it;
* write (connection and stream): see :mod:`serverio.net.h2write`;
* descriptors: at most ``h2_max_open_files`` bodies streamed from files
  at once (:meth:`StreamAnswer.answer`); after the client's EOF a body
  its windows cannot finish is dropped at once.

Error model: h2's own inbound header validation is off (it would end the
connection for a malformed request); :mod:`serverio.wire.h2head` checks
each header block and a malformed one is a stream error (RST_STREAM
PROTOCOL_ERROR), as is DATA that disagrees with ``content-length``
(RFC 9113 §8.1.1).  A stream past ``h2_max_streams`` gets REFUSED_STREAM.

Request bodies: a stream whose HEADERS do not end it gets an
:class:`~serverio.net.h2body.H2Body` that its DATA feeds; the connection
acknowledges DATA (``acknowledge_received_data``: WINDOW_UPDATE) only as
the stream's handler consumes it, so flow control is the backpressure and
a client never has more than the stream window buffered per stream.  DATA
for a stream nobody reads (refused, reset, answered) is acknowledged at
once, so the connection window is never starved.  A body left unread at
answer time is abandoned: the response goes out, then RST_STREAM NO_ERROR
(RFC 9113 §8.1: "stop sending", the request was answered in full); no
drain, since HTTP/2 needs none to keep the connection.
What h2 still reports as a connection error (``ProtocolError``: a broken
frame, HPACK decoding failure, a header block over the HPACK size cap,
more than 64 CONTINUATION frames, frames on a stream in the wrong state
at the connection level) ends the connection with the GOAWAY h2 queued.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Literal

import h2.events
import h2.exceptions
import trio
from h2.errors import ErrorCodes
from hyperframe.frame import GoAwayFrame

from ..fs.body import Body, StreamBody
from ..fs.reads import pread
from ..pipeline.request import busy, record
from ..wire.fields import Fields
from ..wire.h2head import MalformedRequest, RequestHeads
from ..wire.hpackfast import FieldEncoder
from .env import ConnectionEnv
from .h1head import RECV_SIZE
from .h2adapter import FRAME_CHUNK, direct_ok, frames_for, release, server_connection
from .h2answer import Started, StreamAnswer
from .h2body import H2Body
from .h2events import EventStreams
from .h2phase import BROKEN, CLOSED, DRAINING, FINISHING, OPEN, ConnPhase, check
from .h2read import FrameReader
from .h2state import ANSWERING, DONE, STOPPED, Stream
from .h2stream import send_stream
from .h2write import OUT_BUDGET, OUT_HIGH, ROUND_QUANTUM, Preadv, Writer, at_once
from .reqbody import body_policy
from .tlsstream import TLSStream

__all__ = ["FRAME_CHUNK", "OUT_BUDGET", "OUT_HIGH", "ROUND_QUANTUM", "H2Connection"]

log = logging.getLogger("serverio")

ENCODER_TABLE_MAX = 4096  # bytes of HPACK dynamic table for response fields
# The frame path and the reads the writer uses (module globals, looked up
# when a connection starts).
_direct_ok = direct_ok
_PREADV: Preadv | None = getattr(os, "preadv", None)


class H2Connection:
    """One HTTP/2 connection.  Created by the connection task that detected
    it, with the bytes it already read; :meth:`run` serves until the end.
    It is its :class:`~serverio.net.h2read.FrameReader`'s sink."""

    def __init__(
        self,
        env: ConnectionEnv,
        stream: trio.abc.Stream,
        client: Callable[[], str],
        initial: bytes,
    ) -> None:
        self.env = env
        self.stream = stream
        self._client = client
        self._initial = initial
        cfg = env.config
        encoder = FieldEncoder(cap=ENCODER_TABLE_MAX)
        conn = server_connection(cfg.h2.h2_max_streams, cfg.conn.max_head_size, encoder)
        self._conn = conn
        self._streams: dict[int, Stream] = {}
        self._heads = RequestHeads()  # the header blocks' checks (remembered)
        self._reader = FrameReader(
            conn,
            self,
            env.stats,
            max_resets=cfg.h2.h2_max_resets,
            max_control=cfg.h2.h2_max_control,
            block_cap=2 * cfg.conn.max_head_size,
        )
        self._writer = writer = Writer(
            conn,
            frames_for(conn, encoder, _direct_ok(conn)),
            self._streams,
            self._reader.allowance,
            env.stats,
            cfg.conn.write_timeout,
            pread=pread,
            preadv=_PREADV,
        )
        self._answers = StreamAnswer(env, client, isinstance(stream, TLSStream))
        self._events = EventStreams(env, writer)
        self._read_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._idle_deadline = math.inf
        self._last_stream = 0  # highest stream id handed to the handler
        self._requests = 0
        # The connection's phase (serverio.net.h2phase: one enum, one table);
        # the writer's reading/closed flags are its columns, set by _to.
        self._phase = OPEN

    # What tests look at (the parts hold it).
    @property
    def _closed(self) -> bool:
        return self._writer.closed

    @property
    def _sending(self) -> dict[int, Stream]:
        return self._writer.sending

    @property
    def _direct(self) -> bool:
        return self._writer.frames.direct

    @property
    def _encoder(self) -> FieldEncoder:
        return self._conn.encoder  # type: ignore[return-value]

    # ------------------------------------------------------------ lifecycle

    def _to(self, new: ConnPhase) -> None:
        """Move to ``new`` (a transition the table does not list is a bug)
        and give the writer that phase's flags."""
        writer = self._writer
        writer.reading, writer.closed = check(self._phase, new)
        self._phase = new

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            # No reference cycle outlives the connection: the reader names
            # it as its sink, and h2's connection object holds a table of
            # its own bound methods.  What a freeze of the collector caught
            # while the connection was open is then freed by reference
            # counting (serverio.observe.collector;
            # tests/test_connection_garbage.py).
            release(self._conn)
            del self._reader

    async def _run(self) -> None:
        env = self.env
        writer = self._writer
        env.stats.h2.connections += 1
        self._conn.initiate_connection()
        self._idle_deadline = trio.current_time() + env.config.conn.head_timeout
        writer.pull()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(writer.run, self.stream, nursery.cancel_scope)
            if env.draining:
                self.drain()
            try:
                if self._initial:
                    self._reader.receive(self._initial)
                await self._read_loop()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._to(BROKEN)
                nursery.cancel_scope.cancel()
            if self._phase == DRAINING:
                self._to(FINISHING)  # nothing left in flight: reading is over
            writer.kick()  # the writer returns once streams are done and all is flushed
        if self._phase == BROKEN or writer.broken:
            env.stats.conns.resets += 1

    def drain(self) -> None:
        """Graceful shutdown: GOAWAY with the last stream id handed to the
        handler (RFC 9113 §6.8); later streams are refused, in-flight ones
        finish; an idle connection closes now."""
        writer = self._writer
        if self._phase != OPEN:
            return
        self._to(DRAINING)
        # Built by hand: h2's close_connection() would also stop the
        # in-flight streams from sending (its state machine goes CLOSED).
        frame = GoAwayFrame(0)
        frame.last_stream_id = self._last_stream
        frame.error_code = ErrorCodes.NO_ERROR
        self._events.end_all()
        writer.pull()
        writer.out.add(frame.serialize())
        writer.kick()
        if not self._streams and self._read_scope is not None:
            self._read_scope.cancel()

    def close(self, code: ErrorCodes) -> None:
        """End the connection: GOAWAY ``code``, cancel every stream."""
        writer = self._writer
        if writer.closed:
            return
        self._to(CLOSED)
        try:
            self._conn.close_connection(code, last_stream_id=self._last_stream)
        except h2.exceptions.ProtocolError:
            pass  # h2 already closed it (it queued its own GOAWAY)
        writer.pull()
        self._stop_streams()
        if self._read_scope is not None:
            self._read_scope.cancel()

    def _stop_streams(self) -> None:
        self._writer.sending.clear()
        for st in self._streams.values():
            st.stop()
            st.scope.cancel()
        self._writer.kick()

    # ------------------------------------------------------------ reading

    async def _read_loop(self) -> None:
        stats = self.env.stats
        writer = self._writer
        while writer.reading:
            if self._phase == DRAINING and not self._streams:
                return
            if len(writer.out) > OUT_HIGH:
                # Backpressure: a peer that does not read its answers (PING
                # and SETTINGS acknowledgements included) gets nothing more
                # read; the writer's deadline ends it.
                writer.space = trio.Event()
                await writer.space.wait()
                continue
            with trio.CancelScope(
                deadline=math.inf if self._streams else self._idle_deadline
            ) as scope:
                self._read_scope = scope
                data = await self.stream.receive_some(RECV_SIZE)
            self._read_scope = None
            if scope.cancelled_caught:
                if self._phase != OPEN:
                    continue  # the loop condition decides
                if not self._streams and trio.current_time() >= self._idle_deadline:
                    if self._requests:
                        stats.timeouts.keepalive += 1
                    else:
                        stats.timeouts.head += 1
                    self.close(ErrorCodes.NO_ERROR)
                continue
            if not data:
                # EOF: nothing more can arrive; the streams in flight finish
                # (as an HTTP/1.1 half-close does), then we close.
                self._to(FINISHING)
                self._events.end_all()  # they never finish on their own
                return
            self._reader.receive(bytes(data))

    # The reader's sink (serverio.net.h2read.Sink).

    @property
    def closed(self) -> bool:
        return self._writer.closed

    def pull(self) -> None:
        self._writer.pull()

    def kick(self) -> None:
        self._writer.wake.set()

    def calm(self) -> None:
        self.env.stats.h2.calm += 1
        self.close(ErrorCodes.ENHANCE_YOUR_CALM)

    def lost(self) -> None:
        """h2 ended the connection (its error, or the client's GOAWAY): no
        more frames either way."""
        if self._phase != CLOSED:
            self._to(CLOSED)
        self._stop_streams()
        self._writer.pull()  # the GOAWAY h2 queued

    def new_stream(self, ev: h2.events.RequestReceived) -> None:
        conn = self._conn
        cfg = self.env.config
        stats = self.env.stats
        sid = ev.stream_id
        assert sid is not None
        resets = self._reader.resets
        if self._phase != OPEN or len(self._streams) >= cfg.h2.h2_max_streams:
            # Not processed: the client may retry it (RFC 9113 §8.7).  A
            # client that keeps ignoring the limit spends the reset budget.
            stats.h2.refused_streams += 1
            conn.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
            if self._phase == OPEN and resets.spend():
                self.calm()
            return
        try:
            head = self._heads.parse(ev.headers or [])
        except MalformedRequest:
            stats.h2.stream_errors += 1
            conn.reset_stream(sid, ErrorCodes.PROTOCOL_ERROR)
            if resets.spend():
                self.calm()
            return
        stats.h2.streams += 1
        self._requests += 1
        self._last_stream = sid
        st = Stream(sid, head, ev.stream_ended is not None)
        if st.open_body:
            st.body = H2Body(
                body_policy(cfg),
                head.content_length,
                lambda n: self._acknowledge(sid, n),
                window=conn.local_settings.initial_window_size,
            )
            st.body.interim = partial(self._interim, st)
        self._streams[sid] = st
        started = trio.current_time()
        now = time.time()
        first = self._answer_now(st, started, now) if st.ended else None
        if first is not False:
            assert self._nursery is not None
            self._nursery.start_soon(self._serve_stream, st, started, now, first)

    def _answer_now(self, st: Stream, started: float, now: float) -> Started | Literal[False]:
        """Answer ``st`` here, in the reader, when its exchange awaits
        nothing and its response goes out whole at once (a warm file, an
        error, a 304: HTTP/1.1's inline answer), without a task or a
        cancel scope of its own; False when it was (or it failed).
        Otherwise the exchange's first step, for the stream's task.

        Only for a stream the client ended: nothing of it is left to read.
        What the task would do after its answer is done here, in the same
        order: the body closed, the descriptor slot given back, the stream
        done, the access log line, the lame duck's GOAWAY."""
        body: Body | None = None
        sent = False
        try:
            first = self._answers.start(st, now)
            if first.final is None:
                return first
            plan, body, ticket = first.final
            if plan.stream or type(body) is StreamBody or body.fd >= 0:
                return first  # an event stream, a produced body, a descriptor
            data = at_once(self._writer, st, body)
            if data is None:
                return first
            st.to(ANSWERING)
            sent = self._writer.respond_now(st, plan, data)
        except Exception:
            self._failed(st)  # nor may it end the reader it runs in here
        self._release(st, body, started)  # nothing awaited since
        if sent:
            user = ticket.user if ticket is not None else ""
            _log(self.env, st, first.client, first.fields, started, now, user=user)
        if self.env.draining:
            self.drain()  # lame duck: the connection ends after this response
        return False

    def data(self, sid: int, data: bytes, flow_controlled_length: int) -> None:
        st = self._streams.get(sid)
        body = st.body if st is not None else None
        if body is None:
            self._acknowledge(sid, flow_controlled_length)  # nobody reads it
            return
        assert st is not None
        if body.feed(data, flow_controlled_length) is not None:
            self._stream_error(st)  # past content-length or the window (RFC 9113 §8.1.1)

    def ended(self, sid: int) -> None:
        st = self._streams.get(sid)
        if st is not None:
            st.ended = True
            body = st.body
            if body is not None:
                if body.end() is not None:
                    self._stream_error(st)  # END_STREAM short of content-length
            elif st.head.content_length not in (None, 0):
                self._stream_error(st)  # RFC 9113 §8.1.1: HEADERS ended it short

    def reset(self, sid: int) -> None:
        st = self._streams.get(sid)
        if st is not None:
            if st.body is not None:
                st.body.reset()  # a pull in progress ends (ClientGone)
            self._writer.cancel(st)

    def _acknowledge(self, sid: int, n: int) -> None:
        """Hand ``n`` flow-controlled bytes of ``sid`` back to the client
        (WINDOW_UPDATE, for the stream and the connection, when h2's window
        manager decides one is due)."""
        if n <= 0 or self._writer.closed:
            return
        self._conn.acknowledge_received_data(n, sid)
        self._writer.pull()

    def _stream_error(self, st: Stream) -> None:
        """The request turned out malformed: RST_STREAM PROTOCOL_ERROR
        (once: its END_STREAM may follow the DATA that was too long)."""
        if st.state in STOPPED:
            return
        self.env.stats.h2.stream_errors += 1
        self._writer.reset(st, ErrorCodes.PROTOCOL_ERROR)
        self._writer.cancel(st)

    # ------------------------------------------------------------ streams

    async def _interim(
        self, st: Stream, status: int, fields: Sequence[tuple[bytes, bytes]]
    ) -> None:
        """The stream's interim responses (RFC 9110 §15.2), sent by the
        writer task like every frame; a checkpoint for the caller."""
        self._writer.interim(st, status, fields)
        await trio.lowlevel.checkpoint()

    async def _serve_stream(
        self, st: Stream, started: float, now: float, first: Started | None
    ) -> None:
        """The stream's task: its answer (from ``first``, the exchange's
        first step when the reader took it, else from the start), its
        response, its access log line."""
        env = self.env
        writer = self._writer
        body: Body | None = None
        fields: Fields | None = None
        client = self._client
        user = ""  # the signed-in user the access hook named (the log's user field)
        try:
            with st.scope:
                if st.state in STOPPED:
                    return  # reset before it started: do no work for it
                st.to(ANSWERING)
                # The request steps are the pipeline's (serverio.pipeline.request),
                # shared with HTTP/1.1; an RST_STREAM cancels this scope, which
                # cancels the wait for a need.
                if first is None:
                    first = self._answers.start(st, now)
                answer, fields, client = await self._answers.answer(st, first)
                plan, body, ticket = answer
                user = ticket.user if ticket is not None else ""
                if plan.stream:
                    # The client's address now: when the stream ends the
                    # connection may be gone, and its peer name with it.
                    peer = client()
                    ended = partial(_log_events, env, st, lambda: peer, fields, started, now)
                    if await self._events.serve(st, plan, self._phase != OPEN, ended):
                        if env.draining:
                            self.drain()  # lame duck: the connection ends, as for any response
                        return
                    # Past --watch-max-streams (the stage decides it first,
                    # pipeline.stages.streamed; this is the safety net).
                    plan, body, _ = busy(env, ticket, now)
                if type(body) is StreamBody:  # an archive, a proxied response
                    stalled = await send_stream(
                        writer, st, plan, body, env.stats, env.config.conn.write_timeout
                    )
                else:
                    stalled = await writer.respond(st, plan, body)
                if stalled:
                    self.close(ErrorCodes.NO_ERROR)  # no body of the connection moved
                if env.draining:
                    # Lame duck (--shutdown-delay) or shutdown: as HTTP/1.1
                    # answers with Connection: close, the connection ends
                    # after this response (GOAWAY; in-flight streams finish).
                    self.drain()
        except trio.BrokenResourceError:
            # The request body's client went away (ClientGone) mid-pull.
            writer.reset(st, ErrorCodes.CANCEL)
        except Exception:
            self._failed(st)
        finally:
            self._release(st, body)
        if st.state in DONE:
            _log(env, st, client, fields, started, now, user=user)
        elif st.status and (st.pieces or st.streaming):
            # Reset or failed mid-body (the client's RST_STREAM, the write
            # deadline, the abort): logged with the body bytes framed so
            # far and the "cut" marker, as HTTP/1.1 does.
            sent = st.streamed + sum(map(len, st.pieces[: st.index])) + st.offset
            _log(env, st, client, fields, started, now, sent, cut=True, user=user)

    def _failed(self, st: Stream) -> None:
        """A bug in one stream must not end the other streams: logged,
        counted, the stream reset INTERNAL_ERROR."""
        self.env.stats.conns.internal_errors += 1
        log.exception("internal error in an HTTP/2 stream (stream reset)")
        self._writer.reset(st, ErrorCodes.INTERNAL_ERROR)

    def _release(self, st: Stream, body: Body | None, now: float | None = None) -> None:
        """What a stream holds, given back once it is answered (or failed);
        ``now``: trio's time, when the caller has it."""
        self._writer.sending.pop(st.sid, None)  # before the fd closes
        if body is not None:
            body.close()
        if st.body is not None:
            st.body.abandon()  # what still arrives is acknowledged at once
        self._answers.give_file(st)
        self._stream_done(st, now)

    def _stream_done(self, st: Stream, now: float | None = None) -> None:
        """``st`` is over (``now``: trio's time, when the caller has it)."""
        self._streams.pop(st.sid, None)
        if not self._streams:
            now = trio.current_time() if now is None else now
            self._idle_deadline = now + self.env.config.conn.keepalive_timeout
            if self._read_scope is not None:
                if self._phase == DRAINING:
                    self._read_scope.cancel()
                else:
                    self._read_scope.deadline = self._idle_deadline
        self._writer.kick()


def _log(
    env: ConnectionEnv,
    st: Stream,
    client: Callable[[], str],
    fields: Fields | None,
    started: float,
    now: float,
    size: int | None = None,
    *,
    cut: bool = False,
    counted: bool = True,
    user: str = "",
) -> None:
    """A stream's access log line (``record``, as HTTP/1.1 writes it).
    ``size``: the body bytes sent (default: the whole body framed);
    ``user``: the signed-in user ("" for none)."""
    h = st.head
    record(
        env,
        client,
        h.method,
        h.path or b"-",
        b"2.0",
        st.status,
        st.streamed + sum(map(len, st.pieces)) if size is None else size,
        started,
        now,
        fields.user_agent if fields is not None else None,
        fields.referer if fields is not None else None,
        fields.request_id if fields is not None else None,
        cut=cut,
        counted=counted,
        user=user,
    )


def _log_events(
    env: ConnectionEnv,
    st: Stream,
    client: Callable[[], str],
    fields: Fields | None,
    started: float,
    now: float,
    sent: int,
    counted: bool,
) -> None:
    """Log an event stream as it ends (``EventStreams.serve``): status,
    the DATA bytes it sent, its duration; the line HTTP/1.1 writes."""
    _log(env, st, client, fields, started, now, sent, counted=counted)
