"""HTTP/2 connections (RFC 9113) on the shared request handler.

A connection that negotiated HTTP/2 (ALPN ``h2`` over TLS, or the client
preface on a cleartext port: h2c with prior knowledge) is handed over by
:class:`~serverio.net.connection.ConnectionTask` to an :class:`H2Connection`.
The ``h2`` library (sans-I/O, like h11) keeps the protocol state; this
module does the I/O, the concurrency and the limits.

Tasks, all in the connection's nursery::

    reader (the connection task)   socket -> h2 events; starts, resets and
                                   refuses streams; the idle deadline
    writer                         h2 output -> socket, under the write
                                   deadline; fills DATA frames round-robin
    one task per stream            RequestFacts -> route / Handler -> Plan;
                                   HEADERS, then waits while the writer
                                   sends its body

Only the reader reads the socket and only the writer writes it; every h2
call happens on the trio thread between checkpoints, so the state machine
needs no lock.

Cancellation handling: each stream task runs in its own cancel scope.
``RST_STREAM`` from the client cancels exactly that scope: the handler call
in progress is cancelled as for an HTTP/1.1 client that went away (the
Deferred is closed, an abandoned pool hop is late-closed), the stream stops
being a body source before its ``Body`` is closed, once.  Shutdown
(:meth:`H2Connection.drain`) sends GOAWAY with the last stream id handed to
the handler, refuses later streams, and lets the in-flight ones finish;
the server cancels what remains after ``--shutdown-timeout``.

Flow control and fairness: the writer gives every stream with an open
window at most ``ROUND_QUANTUM`` bytes (256 KiB, in DATA frames of <= 16 KiB
and <= the peer's SETTINGS_MAX_FRAME_SIZE) per round, moving it to the back
of the queue, and stops filling at ``OUT_BUDGET`` bytes: one large file
cannot starve the small responses on the same connection.  File spans are
read with a positional read of at most one round's worth (no sendfile:
the bytes go through framing, and TLS): where ``os.preadv`` exists, one
scatter read straight into the output buffer between the frame heads,
otherwise :func:`serverio.fs.reads.pread` and a copy.  The round is large
because its fixed cost (a scheduling round, a write) dominates: 256 KiB
rounds and writes moved 8 MiB bodies about 1.6x faster than 64 KiB ones.
The writer fills up to ``OUT_BUDGET`` (two rounds) and writes it in one
piece; its two output buffers keep their capacity between writes
(:mod:`serverio.net.outbuf`), so a round costs one copy by the kernel
into memory that is already there and one copy out by the socket.
A body that fits in one frame is framed by its stream's task right after
its HEADERS (its first round, without the trip through the queue).

Memory per connection is bounded regardless of file sizes and stream count
(docs/features.md "HTTP/2" states the budget).  Deadlines:

* idle: with no stream in flight, the next request must start within
  ``head_timeout`` (the first) or ``keepalive_timeout`` (later ones), else
  GOAWAY and close; PINGs and partial header blocks do not extend it;
* write (connection): the socket must accept bytes within
  ``write_timeout``, else the connection is aborted;
* write (stream): a stream whose body makes no progress (16 KiB of DATA,
  or its end: its or the connection's window stays closed, or opens a byte
  at a time) for ``write_timeout`` is reset with CANCEL; when no body of
  the connection made progress in that time either, the connection ends
  (GOAWAY);
* descriptors: at most ``h2_max_open_files`` bodies streamed from files
  at once (:meth:`H2Connection._answer`); after the client's EOF a body
  its windows cannot finish is dropped at once.

Error model: h2's own inbound header validation is off (it would end the
connection for a malformed request); :mod:`serverio.http.h2head` checks
each header block and a malformed one is a stream error (RST_STREAM
PROTOCOL_ERROR).  A stream past ``h2_max_streams`` gets REFUSED_STREAM.
What h2 still reports as a connection error (``ProtocolError``: a broken
frame, HPACK decoding failure, a header block over the HPACK size cap,
more than 64 CONTINUATION frames, frames on a stream in the wrong state
at the connection level) ends the connection with the GOAWAY h2 queued.
"""

from __future__ import annotations

import logging
import math
import os
import struct
import time
from collections.abc import Callable

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import h2.stream
import trio
from h2.connection import ConnectionInputs
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from h2.stream import StreamInputs
from hyperframe.frame import GoAwayFrame

from ..errors import HTTPError
from ..fs.body import NO_BODY, Body
from ..fs.prepare import Prepared
from ..fs.reads import pread
from ..http.core import FileSpan, Plan, RequestFacts
from ..http.fields import Fields, check_host, scan_fields
from ..http.h2head import (
    CONNECTION_SPECIFIC,
    MalformedRequest,
    RequestHead,
    parse_request_head,
    path_bytes_ok,
)
from ..http.hpackfast import CachingDecoder, FieldEncoder
from ..http.target import parse_target
from ..pipeline.handler import Deferred
from ..pipeline.livereload import LiveReload
from ..pipeline.request import Answer, Waiting, client_for, complete, failed, finish, record, start
from .emit import SEND_PIECE
from .env import ConnectionEnv
from .h1head import RECV_SIZE
from .outbuf import OutBuffer

__all__ = ["FRAME_CHUNK", "OUT_BUDGET", "OUT_HIGH", "ROUND_QUANTUM", "H2Connection"]

log = logging.getLogger("serverio")

FRAME_CHUNK = 16384  # DATA bytes per frame at most (the default SETTINGS_MAX_FRAME_SIZE)
ROUND_QUANTUM = 262144  # DATA bytes per stream per round at most (one read, <= 16 frames)
OUT_BUDGET = 524288  # the writer stops filling DATA frames at this many pending bytes
OUT_HIGH = 2 * OUT_BUDGET  # the reader stops reading while more than this waits to be written
WRITE_PIECE = 524288  # bytes per socket write; the write deadline moves after each
IDLE_KEEP = 16384  # bytes of output buffer capacity a connection with no stream keeps
_WINDOW = 1.0  # seconds: the flood budgets count per window
# WINDOW_UPDATE allowance: each _UPDATE_EARNER bytes of DATA sent earn two
# free WINDOW_UPDATEs (the stream's and the connection's, RFC 9113 §6.9),
# banked up to _UPDATE_BANK; one without credit spends the control budget.
# Counted in bytes, not frames: a client that opens its window one byte at
# a time to get one-byte DATA frames (a "data dribble") earns nothing.
_UPDATE_EARNER = 1024
_UPDATE_BANK = 1024
ENCODER_TABLE_MAX = 4096  # bytes of HPACK dynamic table for response fields

# RFC 9113 §4.1 frame header: 24-bit length and 8-bit type (packed as one
# 32-bit word), flags, stream id (the reserved bit is 0).
_FRAME_HEAD = struct.Struct(">IBI")
# Scatter reads straight into the output buffer where the platform has them
# (Linux, the BSDs); elsewhere a body round is read, then framed (a copy).
_PREADV: Callable[[int, list[memoryview], int], int] | None = getattr(os, "preadv", None)
_DATA, _HEADERS, _CONTINUATION = 0x0, 0x1, 0x9
_END_STREAM, _END_HEADERS = 0x1, 0x4

def _head_fields(status: int) -> list[tuple[bytes, bytes]]:
    """The pseudo-header every response starts with, ``:status`` (RFC 9113
    §8.3.2); every other field comes from the plan (the pure layer's
    common fields first: serverio.http.core.common_fields)."""
    return [(b":status", b"%d" % status)]


async def _run_deferred(deferred: Deferred) -> Prepared:
    """How a stream waits for the handler: just await it.  A reset
    (RST_STREAM) cancels the stream's scope, which cancels this wait."""
    try:
        return await deferred.run()
    finally:
        deferred.close()


def _direct_ok(conn: h2.connection.H2Connection) -> bool:
    """Whether this h2 has the internals the direct frame path uses (see
    :meth:`H2Connection._send_headers`); otherwise its public calls are used."""
    return (
        isinstance(getattr(conn, "_data_to_send", None), bytearray)
        and isinstance(getattr(conn, "streams", None), dict)
        and isinstance(getattr(conn, "outbound_flow_control_window", None), int)
        and hasattr(conn, "state_machine")
    )


class _LengthUncheckedStream(h2.stream.H2Stream):
    """h2's stream without its request body-length check.

    h2 raises ``InvalidBodyLengthError`` (a connection-level ProtocolError:
    GOAWAY, every other stream lost) when DATA disagrees with
    ``content-length``; RFC 9113 §8.1.1 makes that a malformed request, a
    stream error.  :meth:`H2Connection._event` checks the length per
    stream and answers RST_STREAM PROTOCOL_ERROR; here h2 only counts."""

    def _track_content_length(self, length: int, end_stream: bool) -> None:
        self._actual_content_length += length


class _ServerConnection(h2.connection.H2Connection):
    """h2's connection with the concurrent-stream check left to us.

    h2 raises a connection-level ``TooManyStreamsError`` for a stream past
    SETTINGS_MAX_CONCURRENT_STREAMS; RFC 9113 §5.1.2 allows (and the
    server wants) a stream error, REFUSED_STREAM, so h2 is told no stream
    is open and :class:`H2Connection` counts its own.  Its streams leave
    the body-length check to us too (:class:`_LengthUncheckedStream`).
    """

    @property
    def open_inbound_streams(self) -> int:
        _ = super().open_inbound_streams  # keeps h2's closed-stream clean-up
        return 0

    def _begin_new_stream(
        self, stream_id: int, allowed_ids: h2.connection.AllowedStreamIDs
    ) -> h2.stream.H2Stream:
        stream = super()._begin_new_stream(stream_id, allowed_ids)
        if type(stream) is h2.stream.H2Stream:
            stream.__class__ = _LengthUncheckedStream  # same layout, one method differs
        return stream


class _Budget:
    """Events per window of ``_WINDOW`` seconds; over ``limit`` = abuse."""

    __slots__ = ("count", "limit", "start")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self.start = -math.inf

    def spend(self) -> bool:
        """Count one event; True when the budget is exceeded."""
        now = trio.current_time()
        if now - self.start >= _WINDOW:
            self.start = now
            self.count = 0
        self.count += 1
        return self.count > self.limit


class _Stream:
    """One request stream and, while its body is sent, its cursor."""

    __slots__ = (
        "credit",
        "ended",
        "failed",
        "fd",
        "file_slot",
        "finished",
        "head",
        "index",
        "moved",
        "offset",
        "open_body",
        "pieces",
        "progress",
        "received",
        "remaining",
        "reset",
        "scope",
        "sid",
        "status",
    )

    def __init__(self, sid: int, head: RequestHead, ended: bool) -> None:
        self.sid = sid
        self.head = head
        self.ended = ended  # the client ended its side (END_STREAM seen)
        self.open_body = not ended  # HEADERS without END_STREAM: a body may follow
        self.received = 0  # request body bytes (discarded; checked against content-length)
        self.scope = trio.CancelScope()
        self.reset = False  # reset by either side: send nothing more
        self.status = 0
        self.pieces: list[bytes | FileSpan] = []
        self.index = 0
        self.offset = 0  # within pieces[index]
        self.remaining = 0
        self.fd = -1
        self.moved = 0.0  # trio time the body last made SEND_PIECE bytes of progress
        self.credit = 0  # body bytes sent since then
        self.file_slot = False  # holds one of the connection's body-descriptor slots
        self.progress: trio.Event | None = None  # set when the body ended, failed or was reset
        self.finished = False  # the last DATA frame (END_STREAM) was handed to h2
        self.failed = False  # the body could not be completed (read error, shrank)


class H2Connection:
    """One HTTP/2 connection.  Created by the connection task that detected
    it, with the bytes it already read; :meth:`run` serves until the end."""

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
        conn = _ServerConnection(
            h2.config.H2Configuration(
                client_side=False,
                header_encoding=None,
                validate_inbound_headers=False,  # serverio.http.h2head does it per stream
                # Response fields come from Plans: lower-case names, no
                # connection-specific fields (filtered in _respond).
                validate_outbound_headers=False,
                normalize_outbound_headers=False,
            )
        )
        # Response fields: serverio's HPACK encoder (no Huffman, the table
        # capped at ENCODER_TABLE_MAX whatever the client announces, blocks
        # of repeated header lists remembered); h2 sets its table size.
        self._encoder = FieldEncoder(cap=ENCODER_TABLE_MAX)
        conn.encoder = self._encoder  # type: ignore[assignment]
        conn.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                SettingCodes.MAX_CONCURRENT_STREAMS: cfg.h2_max_streams,
                SettingCodes.MAX_HEADER_LIST_SIZE: cfg.max_head_size,
            },
        )
        # Request fields: hpack's decoder, remembering the header lists of
        # repeated all-indexed blocks while its table is unchanged.
        conn.decoder = CachingDecoder()
        # The HPACK decoder refuses (connection error ENHANCE_YOUR_CALM) a
        # decoded header list past this hard cap (the HPACK bomb); between
        # the advertised size and the cap a request gets 431.
        conn.decoder.max_header_list_size = 4 * cfg.max_head_size
        self._conn = conn
        # HEADERS and DATA go straight into h2's output buffer after h2's
        # state machines accepted them (see _send_headers).
        self._direct = _direct_ok(conn)
        # The encoded header block (HEADERS + CONTINUATION) buffered at most.
        self._block_cap = 2 * cfg.max_head_size
        self._streams: dict[int, _Stream] = {}
        # Live-reload event streams, with the scope that ends each.
        self._events: dict[int, tuple[_Stream, trio.CancelScope]] = {}
        self._sending: dict[int, _Stream] = {}  # body sources, round-robin order
        # Pending output, and the buffer the writer last sent (reused:
        # serverio.net.outbuf says why).
        self._out = OutBuffer()
        self._spare = OutBuffer()
        self._wake = trio.Event()  # writer: something to send
        self._space = trio.Event()  # reader: the output fell below OUT_HIGH
        self._read_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._idle_deadline = math.inf
        self._last_stream = 0  # highest stream id handed to the handler
        self._requests = 0
        self._draining = False  # GOAWAY sent for shutdown; in-flight streams finish
        self._closed = False  # h2 said GOAWAY (error, flood, timeout): send no more frames
        self._reading = True
        self._broken = False  # the socket failed
        self._resets = _Budget(cfg.h2_max_resets)
        # Body descriptors this connection holds at most (ops/fdlimit.py
        # counts 1 + this per connection); see _answer.
        self._files = trio.Semaphore(cfg.h2_max_open_files)
        # When the connection's bodies last made SEND_PIECE bytes of
        # progress (or began to wait), and the bytes since: see _await_body.
        self._moved = 0.0
        self._credit = 0
        self._control = _Budget(cfg.h2_max_control)
        # Free WINDOW_UPDATEs earned by DATA sent, and the bytes towards
        # the next (see _earn).
        self._update_credit = 0
        self._update_bytes = 0
        # Frame boundaries, tracked over the raw bytes (see _count_frames):
        # bytes of the current frame still to skip (first the 24-byte
        # client preface), and a partial 9-byte frame header.
        self._skip = 24
        self._partial = b""

    # ------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        env = self.env
        cfg = env.config
        env.stats.h2_connections += 1
        self._conn.initiate_connection()
        self._idle_deadline = trio.current_time() + cfg.head_timeout
        self._pull()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._writer, nursery.cancel_scope)
            if env.draining:
                self.drain()
            try:
                if self._initial:
                    self._receive(self._initial)
                await self._read_loop()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._broken = True
                nursery.cancel_scope.cancel()
            self._reading = False
            self._kick()  # the writer returns once streams are done and all is flushed
        if self._broken:
            env.stats.resets += 1

    def drain(self) -> None:
        """Graceful shutdown: GOAWAY with the last stream id handed to the
        handler (RFC 9113 §6.8); later streams are refused, in-flight ones
        finish; an idle connection closes now."""
        if self._draining or self._closed:
            return
        self._draining = True
        # Built by hand: h2's close_connection() would also stop the
        # in-flight streams from sending (its state machine goes CLOSED).
        frame = GoAwayFrame(0)
        frame.last_stream_id = self._last_stream
        frame.error_code = ErrorCodes.NO_ERROR
        self._end_events()
        self._pull()
        self._out.add(frame.serialize())
        self._kick()
        if not self._streams and self._read_scope is not None:
            self._read_scope.cancel()

    def _close(self, code: ErrorCodes) -> None:
        """End the connection: GOAWAY ``code``, cancel every stream."""
        if self._closed:
            return
        self._closed = True
        self._reading = False
        try:
            self._conn.close_connection(code, last_stream_id=self._last_stream)
        except h2.exceptions.ProtocolError:
            pass  # h2 already closed it (it queued its own GOAWAY)
        self._pull()
        self._sending.clear()
        for st in self._streams.values():
            st.reset = True
            st.scope.cancel()
        if self._read_scope is not None:
            self._read_scope.cancel()
        self._kick()

    # ------------------------------------------------------------ reading

    async def _read_loop(self) -> None:
        stats = self.env.stats
        while self._reading:
            if self._draining and not self._streams:
                return
            if len(self._out) > OUT_HIGH:
                # Backpressure: a peer that does not read its answers (PING
                # and SETTINGS acknowledgements included) gets nothing more
                # read; the writer's deadline ends it.
                self._space = trio.Event()
                await self._space.wait()
                continue
            with trio.CancelScope(
                deadline=math.inf if self._streams else self._idle_deadline
            ) as scope:
                self._read_scope = scope
                data = await self.stream.receive_some(RECV_SIZE)
            self._read_scope = None
            if scope.cancelled_caught:
                if self._closed or self._draining:
                    continue  # the loop condition decides
                if not self._streams and trio.current_time() >= self._idle_deadline:
                    if self._requests:
                        stats.timeouts_keepalive += 1
                    else:
                        stats.timeouts_head += 1
                    self._close(ErrorCodes.NO_ERROR)
                continue
            if not data:
                # EOF: nothing more can arrive; the streams in flight finish
                # (as an HTTP/1.1 half-close does), then we close.
                self._draining = True
                self._end_events()  # they never finish on their own
                return
            self._receive(bytes(data))

    def _receive(self, data: bytes) -> None:
        conn = self._conn
        stats = self.env.stats
        try:
            events = conn.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            # h2 queued GOAWAY with the error code; everything stops.
            if exc.error_code == ErrorCodes.ENHANCE_YOUR_CALM:
                stats.h2_calm += 1
            else:
                stats.h2_protocol_errors += 1
            self._closed = True
            self._reading = False
            self._close_streams()
            self._pull()
            return
        # Frames that produced no event: CONTINUATION, and frames h2
        # answers on its own (DATA or HEADERS on a stream already reset,
        # each answered with RST_STREAM).  They cost work and deliver no
        # request, like PINGs, so they spend the control budget.
        quiet = self._count_frames(data) - sum(
            1 for ev in events if not isinstance(ev, h2.events.StreamEnded)
        )
        for _ in range(quiet):
            if self._control.spend():
                self._calm()
                return
        for ev in events:
            if self._closed:
                break
            self._event(ev)
        if not self._closed:
            pending = getattr(conn.incoming_buffer, "_headers_buffer", None)
            if pending and sum(len(f.data) for f in pending) > self._block_cap:
                # CONTINUATION flood (CVE-2024-27316): a header block that
                # grows without end is refused before h2's 64-frame cap.
                stats.h2_calm += 1
                self._close(ErrorCodes.ENHANCE_YOUR_CALM)
        self._pull()

    def _count_frames(self, data: bytes) -> int:
        """Complete frame headers in ``data`` (RFC 9113 §4.1: 24-bit length,
        type, flags, stream id), carrying state across reads."""
        n = 0
        i = 0
        end = len(data)
        while i < end:
            if self._skip:
                take = min(self._skip, end - i)
                self._skip -= take
                i += take
                continue
            need = 9 - len(self._partial)
            head = self._partial + data[i : i + need]
            i += min(need, end - i)
            if len(head) < 9:
                self._partial = head
                break
            self._partial = b""
            self._skip = int.from_bytes(head[:3], "big")
            n += 1
        return n

    def _close_streams(self) -> None:
        self._sending.clear()
        for st in self._streams.values():
            st.reset = True
            st.scope.cancel()
        self._kick()

    def _calm(self) -> None:
        self.env.stats.h2_calm += 1
        self._close(ErrorCodes.ENHANCE_YOUR_CALM)

    def _event(self, ev: h2.events.Event) -> None:
        conn = self._conn
        stats = self.env.stats
        if isinstance(ev, h2.events.RequestReceived):
            self._new_stream(ev)
        elif isinstance(ev, h2.events.DataReceived):
            sid = ev.stream_id
            assert sid is not None
            n = ev.flow_controlled_length or 0
            if n:
                conn.acknowledge_received_data(n, sid)
            data = ev.data or b""
            if not data and ev.stream_ended is None and self._control.spend():
                self._calm()  # empty DATA frames cost work and carry nothing
                return
            st = self._streams.get(sid)
            if st is not None:
                st.received += len(data)
                length = st.head.content_length
                if length is not None and st.received > length:
                    self._stream_error(st)
        elif isinstance(ev, h2.events.StreamEnded):
            st = self._streams.get(ev.stream_id or 0)
            if st is not None:
                st.ended = True
                length = st.head.content_length
                if length is not None and st.received != length:
                    self._stream_error(st)  # RFC 9113 §8.1.1
        elif isinstance(ev, h2.events.StreamReset):
            if ev.remote_reset:
                stats.h2_client_resets += 1
                if self._resets.spend():
                    self._calm()  # rapid reset (CVE-2023-44487)
                    return
            st = self._streams.get(ev.stream_id or 0)
            if st is not None:
                self._cancel(st)
        elif isinstance(ev, h2.events.PingReceived | h2.events.PriorityUpdated):
            if self._control.spend():
                self._calm()
        elif isinstance(ev, h2.events.RemoteSettingsChanged):
            if self._control.spend():
                self._calm()
                return
            self._kick()  # windows or the frame size may have changed
        elif isinstance(ev, h2.events.WindowUpdated):
            # A WINDOW_UPDATE answers DATA we sent: free while credit earned
            # by DATA bytes lasts; past it (a flood with no data moving)
            # it spends the control budget (docs/features.md "HTTP/2").
            if self._update_credit:
                self._update_credit -= 1
            elif self._control.spend():
                self._calm()
                return
            self._kick()
        elif isinstance(ev, h2.events.ConnectionTerminated):
            # The client's GOAWAY: h2 accepts no more frames from us either.
            self._closed = True
            self._reading = False
            self._close_streams()

    def _new_stream(self, ev: h2.events.RequestReceived) -> None:
        conn = self._conn
        cfg = self.env.config
        stats = self.env.stats
        sid = ev.stream_id
        assert sid is not None
        if self._draining or len(self._streams) >= cfg.h2_max_streams:
            # Not processed: the client may retry it (RFC 9113 §8.7).  A
            # client that keeps ignoring the limit spends the reset budget.
            stats.h2_refused_streams += 1
            conn.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
            if not self._draining and self._resets.spend():
                self._calm()
            return
        try:
            head = parse_request_head(ev.headers or [])
        except MalformedRequest:
            stats.h2_stream_errors += 1
            conn.reset_stream(sid, ErrorCodes.PROTOCOL_ERROR)
            if self._resets.spend():
                self._calm()
            return
        stats.h2_streams += 1
        self._requests += 1
        self._last_stream = sid
        st = _Stream(sid, head, ev.stream_ended is not None)
        self._streams[sid] = st
        assert self._nursery is not None
        self._nursery.start_soon(self._serve_stream, st)

    def _stream_error(self, st: _Stream) -> None:
        """The request turned out malformed: RST_STREAM PROTOCOL_ERROR
        (once: its END_STREAM may follow the DATA that was too long)."""
        if st.reset:
            return
        self.env.stats.h2_stream_errors += 1
        self._reset(st, ErrorCodes.PROTOCOL_ERROR)
        self._cancel(st)

    def _cancel(self, st: _Stream) -> None:
        st.reset = True
        self._sending.pop(st.sid, None)
        st.scope.cancel()

    def _reset(self, st: _Stream, code: ErrorCodes) -> None:
        if st.reset or self._closed:
            return
        st.reset = True
        self._sending.pop(st.sid, None)
        if st.progress is not None:
            st.progress.set()
        try:
            self._conn.reset_stream(st.sid, code)
        except h2.exceptions.ProtocolError:
            pass  # already closed on h2's side
        self._pull()

    # ------------------------------------------------------------ streams

    def _facts(self, st: _Stream) -> tuple[RequestFacts, Fields]:
        """The same RequestFacts an HTTP/1.1 request head gives, and the
        fields the access log reads."""
        head = st.head
        cfg = self.env.config
        if head.size > cfg.max_head_size:
            raise HTTPError(431, "request header list too large")
        if head.method == b"CONNECT" or head.path is None:
            raise HTTPError(405, "CONNECT is not supported")  # not a proxy
        if head.authority is not None:
            check_host(head.authority)
        if not path_bytes_ok(head.path):
            raise HTTPError(400, "invalid byte in :path")  # as h11 refuses it in HTTP/1.1
        f = scan_fields(head.fields)
        target = parse_target(head.method, head.path, max_size=cfg.max_target_size)
        facts = RequestFacts(
            method=head.method,
            target=target,
            keep_alive=True,
            has_body=st.open_body,
            tls=isinstance(self.stream, trio.SSLStream),  # --hsts: on TLS only
            **f.values,
        )
        return facts, f

    async def _answer(
        self, st: _Stream, now: float
    ) -> tuple[Answer, Fields | None, Callable[[], str]]:
        """The request steps (:mod:`serverio.pipeline.request`, shared with
        HTTP/1.1) under the connection's cap on body descriptors.

        A body streamed from a file keeps its descriptor until it is sent,
        however long the client keeps its window closed, so a stream may
        hold one only with one of ``h2_max_open_files`` slots: what
        ``ops/fdlimit.py`` budgets, whatever the client does.  A free slot
        is taken up front and given back at once when the answer holds no
        descriptor.  At the cap, :func:`start` (synchronous: no await, so
        at most one such descriptor exists in the process) still answers
        what needs none (a warm file, a small file, an error, a 304) without
        waiting; an answer that holds one, or must wait for the handler,
        is dropped (its descriptor closed) and asked again once a slot is
        free.

        Cancellation handling: a reset while waiting for a slot cancels the
        wait with nothing held; the slot a stream holds is given back in
        :meth:`_serve_stream`'s ``finally``, after its body is closed.
        """
        env = self.env
        cfg = env.config
        fields: Fields | None = None
        client = self._client
        try:
            req, fields = self._facts(st)
            if cfg.proxy_networks:  # --trusted-proxies; else no call at all
                client = client_for(cfg, self._client, req)
            if not self._take_file_now(st):
                got = start(env, req, now)
                if type(got) is tuple and got[1].fd < 0:
                    return got, fields, client
                if type(got) is tuple:
                    got[1].close()
                elif type(got) is Waiting and got.deferred is not None:
                    got.deferred.close()
                await self._files.acquire()
                st.file_slot = True
            got = start(env, req, now)
            if type(got) is Waiting:
                answer = await complete(env, got, now, client, _run_deferred)
                assert answer is not None  # _run_deferred never gives None
            else:
                assert type(got) is tuple
                answer = got
        except HTTPError as exc:
            answer = failed(env, exc, now, st.head.method == b"HEAD")
        if answer[1].fd < 0:
            self._give_file(st)
        return answer, fields, client

    def _take_file_now(self, st: _Stream) -> bool:
        try:
            self._files.acquire_nowait()
        except trio.WouldBlock:
            return False
        st.file_slot = True
        return True

    def _give_file(self, st: _Stream) -> None:
        if st.file_slot:
            st.file_slot = False
            self._files.release()

    async def _serve_stream(self, st: _Stream) -> None:
        env = self.env
        cfg = env.config
        started = trio.current_time()
        now = time.time()
        body: Body | None = None
        fields: Fields | None = None
        client = self._client
        try:
            with st.scope:
                if st.reset:
                    return  # reset before it started: do no work for it
                # The request steps are the pipeline's (serverio.pipeline.request),
                # shared with HTTP/1.1; an RST_STREAM cancels this scope, which
                # cancels the wait for a Deferred.
                answer, fields, client = await self._answer(st, now)
                plan, body, ticket = answer
                if plan.stream:
                    if await self._serve_events(st, plan):
                        return
                    assert env.live is not None  # past --watch-max-streams: 503
                    plan, body, _ = finish(env, env.live.busy_plan(now), ticket)
                await self._respond(st, plan, body)
                if env.draining:
                    # Lame duck (--shutdown-delay) or shutdown: as HTTP/1.1
                    # answers with Connection: close, the connection ends
                    # after this response (GOAWAY; in-flight streams finish).
                    self.drain()
        except Exception:
            # A bug in one stream must not end the other streams.
            env.stats.internal_errors += 1
            log.exception("internal error in an HTTP/2 stream (stream reset)")
            self._reset(st, ErrorCodes.INTERNAL_ERROR)
        finally:
            self._sending.pop(st.sid, None)  # before the fd closes
            if body is not None:
                body.close()
            self._give_file(st)
            self._streams.pop(st.sid, None)
            if not self._streams:
                self._idle_deadline = trio.current_time() + cfg.keepalive_timeout
                if self._read_scope is not None:
                    if self._draining:
                        self._read_scope.cancel()
                    else:
                        self._read_scope.deadline = self._idle_deadline
            self._kick()
        if not st.finished or st.failed:
            return
        h = st.head
        record(
            env,
            client,
            h.method,
            h.path or b"-",
            b"2.0",
            st.status,
            sum(map(len, st.pieces)),
            started,
            now,
            fields.user_agent if fields is not None else None,
            fields.referer if fields is not None else None,
            fields.request_id if fields is not None else None,
        )

    async def _serve_events(self, st: _Stream, plan: Plan) -> bool:
        """A live-reload event stream (``--watch``) on this stream; False,
        with nothing sent, past ``--watch-max-streams`` (the caller answers
        503).  Each event stream holds a slot of that budget while it runs;
        while it holds one, the connection is out of ``--max-connections``
        (as for HTTP/1.1, :meth:`ConnectionTask._stream`).

        HEADERS without END_STREAM, then the broadcaster's messages as DATA
        frames, queued into the connection's output for the writer, within
        the stream's and the connection's flow-control windows; the
        subscriber's bounded queue absorbs what waits meanwhile (a slow
        client drops to "reload").  While it is open the stream is in
        flight: the connection has no idle deadline, and the stream counts
        toward ``h2_max_streams``.  It ends cleanly (empty DATA with
        END_STREAM) when the connection drains, just before the GOAWAY
        (:meth:`drain`), at once in lame duck, and when the client's side
        reaches EOF; it is cancelled by the client's RST_STREAM or the
        connection's end; a window that stays closed for ``write_timeout``
        resets it (CANCEL), as for a body.
        """
        live = self.env.live
        if live is None or not plan.send_body:
            await self._respond(st, plan, NO_BODY)  # HEAD: the head alone
            return True
        if not live.slots.take(self):
            return False
        try:
            await self._event_stream(st, plan, live)
        finally:
            live.slots.give(self)
        return True

    async def _event_stream(self, st: _Stream, plan: Plan, live: LiveReload) -> None:
        conn = self._conn
        headers = _head_fields(plan.status)
        headers += [(k, v) for k, v in plan.headers if k not in CONNECTION_SPECIFIC]
        if st.reset or self._closed:
            return
        try:
            conn.send_headers(st.sid, headers)
        except h2.exceptions.ProtocolError:
            return  # the stream was closed meanwhile
        st.status = plan.status
        self._pull()
        timeout = self.env.config.write_timeout

        async def send(data: bytes) -> None:
            await trio.lowlevel.checkpoint_if_cancelled()  # ended or reset: no more DATA
            deadline = trio.current_time() + timeout
            while data:
                window = min(conn.local_flow_control_window(st.sid), conn.max_outbound_frame_size)
                if window > 0:
                    conn.send_data(st.sid, data[:window])
                    self._earn(min(window, len(data)))
                    data = data[window:]
                    self._pull()
                    deadline = trio.current_time() + timeout
                    continue
                if trio.current_time() >= deadline:
                    self.env.stats.timeouts_write += 1
                    self._reset(st, ErrorCodes.CANCEL)
                    scope.cancel()
                    return
                # A WINDOW_UPDATE or SETTINGS frame wakes the writer: wait
                # for that wake-up; while the writer is busy (its event
                # already set), look again shortly.
                wake = self._wake
                with trio.move_on_at(min(deadline, trio.current_time() + 0.05)):
                    if wake.is_set():
                        await trio.sleep_forever()
                    await wake.wait()

        with trio.CancelScope() as scope:
            self._events[st.sid] = (st, scope)
            try:
                if self._draining or self.env.draining:
                    self._end_events()
                await live.serve_client(send, b"")
            finally:
                del self._events[st.sid]
        if st.finished:
            self.env.stats.completed += 1
        if self.env.draining:
            self.drain()  # lame duck: the connection ends, as for any response

    def _end_events(self) -> None:
        """End every event stream now (empty DATA with END_STREAM), so that
        each is complete before a GOAWAY queued after this; their tasks
        stop at their next checkpoint."""
        for st, scope in self._events.values():
            scope.cancel()
            if st.reset or st.finished or self._closed:
                continue
            try:
                self._conn.end_stream(st.sid)
            except h2.exceptions.ProtocolError:
                continue  # closed on h2's side meanwhile
            st.finished = True
        self._pull()

    async def _respond(self, st: _Stream, plan: Plan, source: Body) -> None:
        """HEADERS now; the body through the writer, with the stream's own
        deadline: no progress for ``write_timeout`` resets it (CANCEL).

        A body that fits in one DATA frame the windows allow is framed
        here, right after its HEADERS, while the pending output is under
        OUT_BUDGET: that is the one frame the stream would get in its first
        round, without the round trip through the writer's queue."""
        if st.reset or self._closed:
            return
        headers = _head_fields(plan.status)
        for name, value in plan.headers:
            name = name.lower()
            if name not in CONNECTION_SPECIFIC:  # RFC 9113 §8.2.2
                headers.append((name, value))
        body = [p for p in source.pieces if len(p)]
        total = sum(map(len, body))
        st.status = plan.status
        try:
            self._send_headers(st.sid, headers, total == 0)
        except h2.exceptions.ProtocolError:
            return  # the stream was closed meanwhile
        if total:
            st.pieces = body
            st.remaining = total
            st.fd = source.fd
            if not self._sending:
                # The connection's bodies begin to wait: its no-progress
                # clock starts now (see _await_body).
                self._moved = trio.current_time()
                self._credit = 0
            self._sending[st.sid] = st
            self._pull()
            if total <= FRAME_CHUNK and len(self._out) < OUT_BUDGET:
                self._frame(st)
                self._pull()
            else:
                self._kick()
            if not st.finished:
                await self._await_body(st)
            if st.failed or st.reset:
                return
        else:
            self._pull()
            st.finished = True
        if not st.ended:
            # A complete response before the request ended: ask the client
            # to stop sending it (RFC 9113 §8.1).
            self._reset(st, ErrorCodes.NO_ERROR)
            st.reset = False  # (the response itself was complete)

    async def _await_body(self, st: _Stream) -> None:
        """Wait while the writer sends the body; no progress on this stream
        for ``write_timeout`` resets it (CANCEL), and when the connection's
        bodies as a whole made none either, the connection ends (GOAWAY).

        Progress is SEND_PIECE (16 KiB) of DATA, or the end of the body,
        as an HTTP/1.1 write on a stream moves its deadline per SEND_PIECE
        written: a client that opens its windows a byte at a time (a
        trickle) makes none and cannot keep a stream, or its descriptor,
        past the deadline.  The writer notes the time (``moved``) and wakes
        this task only at the end, so a large body costs no task switch per
        frame."""
        timeout = self.env.config.write_timeout
        st.moved = trio.current_time()
        st.progress = done = trio.Event()
        while not st.finished and not st.failed and not st.reset:
            deadline = st.moved + timeout
            now = trio.current_time()
            if now >= deadline:
                self.env.stats.timeouts_write += 1
                self._reset(st, ErrorCodes.CANCEL)
                if now - self._moved >= timeout:
                    # No body on the connection moved either: the client
                    # reads nothing (or keeps every window shut), as an
                    # HTTP/1.1 client past its write deadline; end it.
                    self._close(ErrorCodes.NO_ERROR)
                return
            with trio.move_on_at(deadline):
                await done.wait()

    # ------------------------------------------------------------ writing

    def _pull(self) -> None:
        """Move h2's pending output into ours and wake the writer."""
        data = self._conn.data_to_send()
        if data:
            self._out.add(data)
            self._wake.set()

    def _kick(self) -> None:
        self._wake.set()

    def _send_headers(self, sid: int, headers: list[tuple[bytes, bytes]], end: bool) -> None:
        """HEADERS (+ CONTINUATION) for a response, through h2's state machines.

        h2's ``send_headers`` spends most of its time outside the protocol
        state: a log call, re-encoding the fields, frame objects.  When
        this h2 has the internals (``_direct``), the connection and stream
        state machines are driven exactly as ``send_headers`` drives them,
        and refuse in the same cases (ProtocolError: stream closed or
        reset, connection closed), before anything is encoded, so the HPACK
        table only ever holds what the client receives; the frames go into
        h2's own output buffer, in order with what h2 queues itself."""
        conn = self._conn
        if not self._direct:
            conn.send_headers(sid, headers, end_stream=end)
            return
        conn.state_machine.process_input(ConnectionInputs.SEND_HEADERS)
        machine = conn._get_stream_by_id(sid).state_machine
        machine.process_input(StreamInputs.SEND_HEADERS)
        if end:
            machine.process_input(StreamInputs.SEND_END_STREAM)
        block = self._encoder.encode(headers)
        out = conn._data_to_send
        size = conn.max_outbound_frame_size
        flags = _END_STREAM if end else 0
        if len(block) <= size:
            out += _FRAME_HEAD.pack(len(block) << 8 | _HEADERS, flags | _END_HEADERS, sid)
            out += block
            return
        # RFC 9113 §6.10: the rest of the block in CONTINUATION frames.
        kind = _HEADERS
        for i in range(0, len(block), size):
            piece = block[i : i + size]
            last = i + size >= len(block)
            out += _FRAME_HEAD.pack(
                len(piece) << 8 | kind, flags | (_END_HEADERS if last else 0), sid
            )
            out += piece
            kind, flags = _CONTINUATION, 0

    def _window(self, sid: int) -> int:
        """The bytes of DATA the windows allow on ``sid`` (ProtocolError: closed)."""
        conn = self._conn
        if not self._direct:
            return conn.local_flow_control_window(sid)
        stream = conn.streams.get(sid)
        if stream is None:
            raise h2.exceptions.StreamClosedError(sid)
        return min(conn.outbound_flow_control_window, stream.outbound_flow_control_window)

    def _send_data(self, sid: int, data: bytes, end: bool) -> None:
        """``data`` as DATA frames of at most FRAME_CHUNK and the peer's
        SETTINGS_MAX_FRAME_SIZE, within the windows (checked by the caller),
        through h2's state machines as ``send_data`` drives them (see
        _send_headers; the frames of one call are one state transition)."""
        conn = self._conn
        size = min(conn.max_outbound_frame_size, FRAME_CHUNK)
        n = len(data)
        if not self._direct:
            for i in range(0, n, size):
                conn.send_data(sid, data[i : i + size], end_stream=end and i + size >= n)
            self._earn(n)
            return
        self._account(sid, n, end)
        out = conn._data_to_send
        if n <= size:
            out += _FRAME_HEAD.pack(n << 8 | _DATA, _END_STREAM if end else 0, sid)
            out += data
            return
        view = memoryview(data)
        for i in range(0, n, size):
            piece = view[i : i + size]
            last = end and i + size >= n
            out += _FRAME_HEAD.pack(len(piece) << 8 | _DATA, _END_STREAM if last else 0, sid)
            out += piece
        view.release()

    def _frame(self, st: _Stream) -> int:
        """One round's DATA for ``st``: at most ROUND_QUANTUM bytes of one
        body piece (one positional read), in frames; returns the bytes sent."""
        try:
            window = self._window(st.sid)
        except h2.exceptions.ProtocolError:
            self._sending.pop(st.sid, None)
            return 0
        n = min(window, ROUND_QUANTUM)
        if n <= 0:
            if not self._reading:
                # The client's side reached EOF: no WINDOW_UPDATE can come
                # any more, so the body can never finish; its descriptor
                # goes now, not at the write deadline.
                self._cancel(st)
            return 0
        piece = st.pieces[st.index]
        if isinstance(piece, FileSpan):
            n = min(n, piece.length - st.offset)
            if self._direct and _PREADV is not None:
                got = self._read_framed(st, piece, n)
                if got is not None:
                    return got
            try:
                data = pread(st.fd, n, piece.offset + st.offset)
            except OSError:
                # EIO mid-body: the head is out, the only honest answer is
                # to cut this stream.
                self.env.stats.read_errors += 1
                return self._fail(st)
            if not data:
                self.env.stats.truncated += 1  # the file shrank under us
                return self._fail(st)
        else:
            data = piece[st.offset : st.offset + n]
        end = self._advance(st, len(data), len(piece))
        self._send_data(st.sid, data, end)
        self._after_round(st, end)
        return len(data)

    def _advance(self, st: _Stream, n: int, piece_len: int) -> bool:
        """Move ``st`` past ``n`` body bytes of its current piece (of
        ``piece_len`` bytes); True when that was the end of its body."""
        st.offset += n
        if st.offset == piece_len:
            st.index += 1
            st.offset = 0
        st.remaining -= n
        st.credit += n
        self._credit += n
        return st.remaining == 0

    def _after_round(self, st: _Stream, end: bool) -> None:
        """A round of ``st`` is framed: done (out of the queue, its task
        woken) or progress noted for its write deadline."""
        now = trio.current_time()
        if end:
            st.finished = True
            del self._sending[st.sid]
            if st.progress is not None:
                st.progress.set()
        elif st.credit >= SEND_PIECE:
            # Progress is SEND_PIECE bytes, as for HTTP/1.1 on a stream
            # (net/connection.py _send): a window opened a byte at a time
            # does not move the write deadline.
            st.moved = now
            st.credit = 0
        if end or self._credit >= SEND_PIECE:
            self._moved = now
            self._credit = 0

    def _account(self, sid: int, n: int, end: bool) -> None:
        """Drive h2's connection and stream state machines and windows for
        ``n`` bytes of DATA on ``sid`` as ``send_data`` does (one transition
        per call, END_STREAM with the last)."""
        conn = self._conn
        conn.state_machine.process_input(ConnectionInputs.SEND_DATA)
        stream = conn.streams[sid]
        machine = stream.state_machine
        machine.process_input(StreamInputs.SEND_DATA)
        if end:
            machine.process_input(StreamInputs.SEND_END_STREAM)
        stream.outbound_flow_control_window -= n
        conn.outbound_flow_control_window -= n
        self._earn(n)

    def _earn(self, n: int) -> None:
        """``n`` bytes of DATA went to h2: for each _UPDATE_EARNER of them
        the client may send a stream and a connection WINDOW_UPDATE without
        spending the control budget (at most _UPDATE_BANK banked)."""
        sent = self._update_bytes + n
        credit = self._update_credit + 2 * (sent // _UPDATE_EARNER)
        self._update_bytes = sent % _UPDATE_EARNER
        self._update_credit = credit if credit < _UPDATE_BANK else _UPDATE_BANK

    def _read_framed(self, st: _Stream, piece: FileSpan, n: int) -> int | None:
        """``n`` bytes of ``piece`` read by one scatter read straight into
        the output buffer between their DATA frame heads: the body is
        copied once (by the kernel), where read-then-frame copies it
        several times.  The windows and state machines are driven as
        :meth:`_send_data` drives them.  ``None`` (nothing written) when the
        read came up short or failed: the caller reads again the plain way,
        which reports the error or the truncation."""
        assert _PREADV is not None
        conn = self._conn
        out = self._out
        if conn._data_to_send:
            out.add(conn.data_to_send())  # what h2 queued goes out first
        size = min(conn.max_outbound_frame_size, FRAME_CHUNK)
        frames = -(-n // size)
        start = out.reserve(frames * _FRAME_HEAD.size + n)
        buf = out.data
        # The frame heads go in first (the last one carries END_STREAM if
        # this round, read whole, ends the body); a short read drops them.
        last_flags = _END_STREAM if st.remaining == n else 0
        sid = st.sid
        head = _FRAME_HEAD.size
        pack = _FRAME_HEAD.pack_into
        view = memoryview(buf)
        parts = []
        pos = start
        for i in range(0, n, size):
            k = n - i if n - i < size else size
            pack(buf, pos, k << 8 | _DATA, last_flags if i + k >= n else 0, sid)
            parts.append(view[pos + head : pos + head + k])
            pos += head + k
        try:
            got = _PREADV(st.fd, parts, piece.offset + st.offset)
        except OSError:
            got = -1
        finally:
            # The slices go with the list; the buffer may grow again only
            # once no view of it is left.
            del parts
            view.release()
        if got != n:
            out.truncate(start)
            return None
        end = self._advance(st, n, piece.length)
        self._account(sid, n, end)
        self._after_round(st, end)
        return n

    def _fail(self, st: _Stream) -> int:
        st.failed = True
        self._reset(st, ErrorCodes.INTERNAL_ERROR)
        if st.progress is not None:
            st.progress.set()
        return 0

    def _fill(self) -> None:
        """DATA frames round-robin until OUT_BUDGET bytes are pending."""
        sending = self._sending
        conn = self._conn
        out = self._out
        while sending and len(out) < OUT_BUDGET:
            moved = False
            for st in list(sending.values()):
                if len(out) >= OUT_BUDGET:
                    break
                if st.sid not in sending:
                    continue
                if self._frame(st):
                    moved = True
                    out.add(conn.data_to_send())
                    if st.sid in sending:  # to the back of the queue
                        del sending[st.sid]
                        sending[st.sid] = st
            if not moved:
                break

    async def _writer(self, cancel: trio.CancelScope) -> None:
        """The only task that writes the socket."""
        env = self.env
        timeout = env.config.write_timeout
        try:
            while True:
                self._pull()
                if not self._closed:
                    self._fill()
                if not self._out:
                    if not self._reading and not self._streams:
                        return
                    if not self._streams:
                        # Nothing in flight: an idle connection keeps
                        # little output memory.
                        self._out.shrink(IDLE_KEEP)
                        self._spare.shrink(IDLE_KEEP)
                    self._wake = trio.Event()
                    await self._wake.wait()
                    continue
                # Take the buffer whole (what is queued meanwhile goes into
                # the other one) and write it in pieces of WRITE_PIECE, a
                # short tail joined to the last piece, the deadline moved
                # after each.
                data = self._out
                self._out = self._spare
                whole = data.view()
                view = whole
                with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
                    while view:
                        n = len(view) if len(view) < 2 * WRITE_PIECE else WRITE_PIECE
                        await self.stream.send_all(view[:n])
                        view = view[n:]
                        scope.deadline = trio.current_time() + timeout
                view.release()
                whole.release()
                if scope.cancelled_caught:
                    env.stats.timeouts_write += 1
                    cancel.cancel()
                    return
                env.stats.bytes_sent += len(data)
                data.clear()
                self._spare = data
                self._space.set()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._broken = True
            cancel.cancel()
