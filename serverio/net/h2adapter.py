"""Every use of h2's private API, in one place.

serverio drives h2 (sans-I/O, RFC 9113) mostly through its public calls; a
few things it needs are not public, and all of them are here, so that an
h2 upgrade is checked in one module (tests/test_h2adapter.py pins them):

* :class:`StreamLengthConnection`: h2 checks ``content-length`` against
  the DATA it receives and makes a mismatch (or a non-numeric value) a
  *connection* error (GOAWAY), even with ``validate_inbound_headers=False``;
  RFC 9113 §8.1.1 makes it a malformed request, a *stream* error.  Its
  streams are :class:`LengthUncheckedStream` (``_begin_new_stream``,
  ``H2Stream._initialize_content_length``): h2 keeps no expected length,
  so it never raises; serverio checks the length per stream
  (:mod:`serverio.wire.h2head` validates the field,
  :class:`serverio.net.h2conn.H2Connection` and
  :class:`serverio.net.h2body.H2Body` count the DATA).  One mechanism for
  both users.
* :class:`QuietConnection`: h2's frame dispatch (``_receive_frame``,
  ``_frame_dispatch_table``, ``_prepare_for_sending``, the
  ``_stream_is_closed_by_*`` checks) without the trace line that formats
  every received frame.
* :class:`ServerConnection` adds that h2 leaves the concurrent-stream
  limit to serverio (a stream past it is refused, a stream error, not
  h2's connection-level ``TooManyStreamsError``; h2's clean-up of its
  closed ``streams`` runs once :data:`SWEEP_AT` are kept), and
  :func:`server_connection` installs serverio's HPACK encoder and
  decoder (``encoder``/``decoder`` attributes).
* :class:`DirectFrames`: HEADERS and DATA written straight into h2's
  output buffer (``_data_to_send``) after driving its connection and
  stream state machines (``state_machine``, ``_get_stream_by_id``,
  ``streams``) and windows exactly as ``send_headers``/``send_data`` do
  (the connection's SEND_HEADERS/SEND_DATA transition skipped while it is
  SERVER_OPEN, where h2's table makes it a no-op);
  :class:`PublicFrames` is the same interface over the public calls, used
  when this h2 lacks those internals (:func:`direct_ok`).
* :func:`pending_header_bytes`: the size of a header block still being
  received (``incoming_buffer._headers_buffer``), for the CONTINUATION
  flood cap.

Versions: importing this module with an h2 outside ``SUPPORTED`` (the
range pyproject.toml allows) raises ImportError; tests/test_h2adapter.py
fails on a version not in ``TESTED`` until it has been run against it and
added there.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from typing import Final

import h2
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import h2.stream
from h2.connection import ConnectionInputs
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from h2.stream import StreamInputs
from hyperframe.frame import Frame, RstStreamFrame

from ..wire.hpackfast import CachingDecoder, FieldEncoder

__all__ = [
    "FRAME_CHUNK",
    "FRAME_HEAD",
    "SUPPORTED",
    "SWEEP_AT",
    "TESTED",
    "DirectFrames",
    "Frames",
    "LengthUncheckedStream",
    "PublicFrames",
    "QuietConnection",
    "ServerConnection",
    "StreamLengthConnection",
    "direct_ok",
    "frames_for",
    "h2_version",
    "pending_header_bytes",
    "release",
    "server_connection",
]

FRAME_CHUNK = 16384  # DATA bytes per frame at most (the default SETTINGS_MAX_FRAME_SIZE)
SWEEP_AT = 16  # h2 streams kept (open or closed) before the closed ones are forgotten

# The h2 versions this module accepts ([low, high): pyproject's "h2>=4.1,<5"),
# and those tests/test_h2adapter.py has been run against.
SUPPORTED: Final = ((4, 1), (5, 0))
TESTED: Final = frozenset({"4.4.1"})


def h2_version(text: str | None = None) -> tuple[int, ...]:
    """``h2.__version__`` (or ``text``) as numbers: "4.4.1" -> (4, 4, 1)."""
    parts = []
    for part in (text if text is not None else h2.__version__).split("."):
        digits = re.match(r"\d*", part)
        parts.append(int(digits.group()) if digits and digits.group() else 0)
    return tuple(parts)


if not SUPPORTED[0] <= h2_version()[:2] < SUPPORTED[1]:
    raise ImportError(
        f"serverio needs h2 >=4.1,<5 (its private API is pinned in serverio.net.h2adapter); "
        f"this is h2 {h2.__version__}"
    )

# RFC 9113 §4.1 frame header: 24-bit length and 8-bit type (packed as one
# 32-bit word), flags, stream id (the reserved bit is 0).
FRAME_HEAD: Final = struct.Struct(">IBI")
_DATA, _HEADERS, _CONTINUATION = 0x0, 0x1, 0x9
# An open server connection stays open on SEND_HEADERS and SEND_DATA, with
# nothing else done (h2's connection state machine: (None, SERVER_OPEN);
# tests/test_h2adapter.py pins it): the direct path skips that transition.
_SERVER_OPEN: Final = h2.connection.ConnectionState.SERVER_OPEN
_END_STREAM, _END_HEADERS = 0x1, 0x4


class LengthUncheckedStream(h2.stream.H2Stream):
    """An h2 stream that keeps no expected content-length (serverio checks it)."""

    def _initialize_content_length(self, headers: object) -> None:
        # h2 raises a connection-level ProtocolError for a non-numeric or
        # conflicting content-length here, and InvalidBodyLengthError (also
        # connection-level) in _track_content_length when the DATA
        # disagrees; with no expected length, neither happens and h2 only
        # counts.  serverio.wire.h2head validates the field per stream.
        self._expected_content_length = None


class StreamLengthConnection(h2.connection.H2Connection):
    """h2's connection whose streams leave the content-length check to
    serverio, so a mismatch is a stream error (RFC 9113 §8.1.1)."""

    def _begin_new_stream(
        self, stream_id: int, allowed_ids: h2.connection.AllowedStreamIDs
    ) -> h2.stream.H2Stream:
        stream = super()._begin_new_stream(stream_id, allowed_ids)
        if type(stream) is h2.stream.H2Stream:
            stream.__class__ = LengthUncheckedStream  # same layout, one method differs
        return stream


class QuietConnection(StreamLengthConnection):
    """h2's connection without the trace line of ``_receive_frame``.

    h2 formats every frame it receives for its trace log
    (``repr(frame)``: the frame, its flags and a hex dump of its payload)
    whether or not a logger wants it, about 4% of a warm stream's cost.
    This is h2's frame dispatch (4.x) without that line: each frame goes
    to h2's handler for its type; a frame on a stream h2 closed by a reset
    gets RST_STREAM (the reset's code, STREAM_CLOSED for an id h2 already
    forgot), a frame on a stream closed by END_STREAM or implicitly is the
    connection error h2 raises (RFC 9113 §5.1);
    tests/test_h2adapter.py compares each case with h2's own."""

    def _receive_frame(self, frame: Frame) -> list[h2.events.Event]:
        events: list[h2.events.Event]
        try:
            frames, events = self._frame_dispatch_table[frame.__class__](frame)
        except h2.exceptions.StreamClosedError as exc:
            if not self._stream_is_closed_by_reset(exc.stream_id):
                raise
            self._reset_closed(exc.stream_id, exc.error_code)
            events = exc._events  # what the frame gave before the error
            return events
        except h2.exceptions.StreamIDTooLowError as exc:
            if self._stream_is_closed_by_reset(exc.stream_id):
                self._reset_closed(exc.stream_id, ErrorCodes.STREAM_CLOSED)
                return []
            if self._stream_is_closed_by_end(exc.stream_id):
                raise h2.exceptions.StreamClosedError(exc.stream_id) from exc
            raise
        self._prepare_for_sending(frames)
        return events

    def _reset_closed(self, sid: int, code: int) -> None:
        frame = RstStreamFrame(sid)
        frame.error_code = code
        self._prepare_for_sending([frame])


class ServerConnection(QuietConnection):
    """The server's h2 connection: content-length and the concurrent-stream
    check are left to serverio.

    h2 raises a connection-level ``TooManyStreamsError`` for a stream past
    SETTINGS_MAX_CONCURRENT_STREAMS; RFC 9113 §5.1.2 allows (and the
    server wants) a stream error, REFUSED_STREAM, so h2 is told no stream
    is open and :class:`~serverio.net.h2conn.H2Connection` counts its own.
    """

    @property
    def open_inbound_streams(self) -> int:
        # h2 asks this for each new stream; its answer walks every stream it
        # keeps and forgets the closed ones (remembering how each closed).
        # That clean-up runs here once SWEEP_AT streams are kept, not for
        # every stream: h2 itself forgets closed streams only when asked,
        # so a closed stream still kept is a state h2 handles (a late frame
        # on it is refused by the stream's state machine, as by the record
        # of a forgotten one).
        if len(self.streams) >= SWEEP_AT:
            _ = super().open_inbound_streams
        return 0


def server_connection(
    max_streams: int, max_head_size: int, encoder: FieldEncoder
) -> ServerConnection:
    """A server-side h2 connection with serverio's HPACK codec.

    Response fields are encoded by ``encoder`` (no Huffman, its table
    capped whatever the client announces; h2 sets its table size).
    Request fields: hpack's decoder remembering the header lists of
    repeated all-indexed blocks; it refuses (connection error
    ENHANCE_YOUR_CALM) a decoded list past 4 x ``max_head_size`` (the
    HPACK bomb); between the advertised size and that cap a request gets
    431 from the request steps."""
    conn = ServerConnection(
        h2.config.H2Configuration(
            client_side=False,
            header_encoding=None,
            validate_inbound_headers=False,  # serverio.wire.h2head does it per stream
            # Response fields come from Plans through one builder
            # (serverio.net.h2answer.response_fields): lower-case names, no
            # connection-specific fields.
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
        )
    )
    conn.encoder = encoder  # type: ignore[assignment]
    conn.local_settings = h2.settings.Settings(
        client=False,
        initial_values={
            SettingCodes.MAX_CONCURRENT_STREAMS: max_streams,
            SettingCodes.MAX_HEADER_LIST_SIZE: max_head_size,
        },
    )
    decoder = CachingDecoder()
    decoder.max_header_list_size = 4 * max_head_size
    conn.decoder = decoder
    return conn


def direct_ok(conn: h2.connection.H2Connection) -> bool:
    """Whether this h2 has the internals :class:`DirectFrames` uses."""
    return (
        isinstance(getattr(conn, "_data_to_send", None), bytearray)
        and isinstance(getattr(conn, "streams", None), dict)
        and isinstance(getattr(conn, "outbound_flow_control_window", None), int)
        and hasattr(conn, "state_machine")
        and callable(getattr(conn, "_get_stream_by_id", None))
    )


def release(conn: h2.connection.H2Connection) -> None:
    """Break h2's own reference cycle once the connection has ended: its
    frame dispatch table holds bound methods of the connection itself, so
    without this the connection object and everything it holds (streams,
    settings, the HPACK tables) wait for the cyclic collector; frozen
    while the connection was open (serverio.observe.collector), they would
    never be freed.  No frame may be received after it."""
    table = getattr(conn, "_frame_dispatch_table", None)
    if isinstance(table, dict):
        table.clear()


def pending_header_bytes(conn: h2.connection.H2Connection) -> int:
    """Bytes of a header block h2 holds while its CONTINUATION frames come."""
    pending = getattr(conn.incoming_buffer, "_headers_buffer", None)
    return sum(len(f.data) for f in pending) if pending else 0


class PublicFrames:
    """HEADERS and DATA through h2's public calls."""

    __slots__ = ("conn",)

    direct: Final = False

    def __init__(self, conn: h2.connection.H2Connection) -> None:
        self.conn = conn

    def headers(self, sid: int, headers: Sequence[tuple[bytes, bytes]], end: bool) -> None:
        self.conn.send_headers(sid, headers, end_stream=end)

    def window(self, sid: int) -> int:
        """The bytes of DATA the windows allow on ``sid`` (ProtocolError: closed)."""
        return self.conn.local_flow_control_window(sid)

    def data(self, sid: int, data: bytes, end: bool) -> None:
        """``data`` as DATA frames of at most FRAME_CHUNK and the peer's
        SETTINGS_MAX_FRAME_SIZE, within the windows (checked by the caller)."""
        conn = self.conn
        size = min(conn.max_outbound_frame_size, FRAME_CHUNK)
        n = len(data)
        if not n:
            if end:  # a produced body's end: an empty DATA frame with END_STREAM
                conn.send_data(sid, b"", end_stream=True)
            return
        for i in range(0, n, size):
            conn.send_data(sid, data[i : i + size], end_stream=end and i + size >= n)

    def account(self, sid: int, n: int, end: bool) -> None:
        raise NotImplementedError("frames written elsewhere need DirectFrames")

    def pending(self) -> bool:
        return False


class DirectFrames:
    """HEADERS and DATA straight into h2's output buffer.

    h2's ``send_headers``/``send_data`` spend most of their time outside the
    protocol state: a log call, re-encoding the fields, frame objects.
    Here the connection and stream state machines are driven exactly as
    those calls drive them, and refuse in the same cases (ProtocolError:
    stream closed or reset, connection closed) before anything is encoded,
    so the HPACK table only ever holds what the client receives; the
    frames go into h2's own output buffer, in order with what h2 queues
    itself."""

    __slots__ = ("conn", "encoder")

    direct: Final = True

    def __init__(self, conn: h2.connection.H2Connection, encoder: FieldEncoder) -> None:
        self.conn = conn
        self.encoder = encoder

    def headers(self, sid: int, headers: Sequence[tuple[bytes, bytes]], end: bool) -> None:
        """HEADERS (+ CONTINUATION, RFC 9113 §6.10) for a response."""
        conn = self.conn
        if conn.state_machine.state is not _SERVER_OPEN:
            conn.state_machine.process_input(ConnectionInputs.SEND_HEADERS)
        machine = conn._get_stream_by_id(sid).state_machine
        machine.process_input(StreamInputs.SEND_HEADERS)
        if end:
            machine.process_input(StreamInputs.SEND_END_STREAM)
        block = self.encoder.encode(headers)
        out = conn._data_to_send
        size = conn.max_outbound_frame_size
        flags = _END_STREAM if end else 0
        if len(block) <= size:
            out += FRAME_HEAD.pack(len(block) << 8 | _HEADERS, flags | _END_HEADERS, sid)
            out += block
            return
        kind = _HEADERS
        for i in range(0, len(block), size):
            piece = block[i : i + size]
            last = i + size >= len(block)
            out += FRAME_HEAD.pack(
                len(piece) << 8 | kind, flags | (_END_HEADERS if last else 0), sid
            )
            out += piece
            kind, flags = _CONTINUATION, 0

    def window(self, sid: int) -> int:
        """The bytes of DATA the windows allow on ``sid`` (ProtocolError: closed)."""
        conn = self.conn
        stream = conn.streams.get(sid)
        if stream is None:
            raise h2.exceptions.StreamClosedError(sid)
        return min(conn.outbound_flow_control_window, stream.outbound_flow_control_window)

    def data(self, sid: int, data: bytes, end: bool) -> None:
        """As :meth:`PublicFrames.data` (the frames of one call are one
        state transition)."""
        conn = self.conn
        size = min(conn.max_outbound_frame_size, FRAME_CHUNK)
        n = len(data)
        self.account(sid, n, end)
        out = conn._data_to_send
        if n <= size:
            out += FRAME_HEAD.pack(n << 8 | _DATA, _END_STREAM if end else 0, sid)
            out += data
            return
        view = memoryview(data)
        for i in range(0, n, size):
            piece = view[i : i + size]
            last = end and i + size >= n
            out += FRAME_HEAD.pack(len(piece) << 8 | _DATA, _END_STREAM if last else 0, sid)
            out += piece
        view.release()

    def account(self, sid: int, n: int, end: bool) -> None:
        """Drive h2's connection and stream state machines and windows for
        ``n`` bytes of DATA on ``sid`` framed by the caller, as
        ``send_data`` does (one transition per call, END_STREAM with the
        last)."""
        conn = self.conn
        if conn.state_machine.state is not _SERVER_OPEN:
            conn.state_machine.process_input(ConnectionInputs.SEND_DATA)
        stream = conn.streams[sid]
        machine = stream.state_machine
        machine.process_input(StreamInputs.SEND_DATA)
        if end:
            machine.process_input(StreamInputs.SEND_END_STREAM)
        stream.outbound_flow_control_window -= n
        conn.outbound_flow_control_window -= n

    def pending(self) -> bool:
        """Whether h2 queued output of its own (it goes out first)."""
        return bool(self.conn._data_to_send)


Frames = DirectFrames | PublicFrames


def frames_for(conn: h2.connection.H2Connection, encoder: FieldEncoder, direct: bool) -> Frames:
    """The frame path for ``conn``: direct when ``direct`` (see :func:`direct_ok`)."""
    return DirectFrames(conn, encoder) if direct else PublicFrames(conn)
