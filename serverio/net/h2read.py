"""The HTTP/2 frame reader: bytes -> h2 events, under the flood budgets.

:class:`FrameReader` is sans-I/O: the connection loop
(:class:`~serverio.net.h2conn.H2Connection`) reads the socket and hands it
each read; the reader feeds h2, spends the budgets, and tells the loop
(its :class:`Sink`) only what concerns streams and the connection's end.
The budgets (docs/features.md "HTTP/2"), each per window of one second:

* resets (``--h2-max-resets``): RST_STREAM from the client (rapid reset,
  CVE-2023-44487), and the streams the loop refuses or finds malformed
  (:attr:`FrameReader.resets`, spent by the loop);
* control frames (``--h2-max-control``): PING, PRIORITY_UPDATE, SETTINGS,
  empty DATA, frames that produce no event (CONTINUATION, frames h2
  answers on its own), and WINDOW_UPDATEs past the allowance;
* the WINDOW_UPDATE allowance (:class:`WindowAllowance`): each 1,024
  bytes of DATA the writer sends earn two free WINDOW_UPDATEs (the
  stream's and the connection's, RFC 9113 §6.9), banked up to 1,024;
  counted in bytes, so a client that opens its window one byte at a time
  (a "data dribble") earns nothing;
* a header block still being received is capped at twice
  ``--max-head-size`` (CONTINUATION flood, CVE-2024-27316), before h2's
  own 64-frame cap.

Over a budget: GOAWAY ENHANCE_YOUR_CALM (``Sink.calm``).  What h2 reports
as a connection error (``ProtocolError``) ends the connection with the
GOAWAY h2 queued (``Sink.lost``).
"""

from __future__ import annotations

import math
from typing import Protocol

import h2.connection
import h2.events
import h2.exceptions
import trio
from h2.errors import ErrorCodes

from ..observe.stats import Stats
from .h2adapter import pending_header_bytes

__all__ = ["Budget", "FrameReader", "Sink", "WindowAllowance"]

_WINDOW = 1.0  # seconds: the flood budgets count per window
_UPDATE_EARNER = 1024  # DATA bytes sent per two free WINDOW_UPDATEs
_UPDATE_BANK = 1024  # free WINDOW_UPDATEs banked at most


class Budget:
    """Events per window of one second; over ``limit`` = abuse."""

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


class WindowAllowance:
    """Free WINDOW_UPDATEs earned by DATA sent (the writer earns, the
    reader spends), and the bytes towards the next pair."""

    __slots__ = ("bytes", "credit")

    def __init__(self) -> None:
        self.credit = 0
        self.bytes = 0

    def earn(self, n: int) -> None:
        """``n`` bytes of DATA went to h2."""
        sent = self.bytes + n
        credit = self.credit + 2 * (sent // _UPDATE_EARNER)
        self.bytes = sent % _UPDATE_EARNER
        self.credit = credit if credit < _UPDATE_BANK else _UPDATE_BANK

    def spend(self) -> bool:
        """One WINDOW_UPDATE: True when it was free."""
        if self.credit:
            self.credit -= 1
            return True
        return False


class Sink(Protocol):
    """What the reader tells the connection loop."""

    @property
    def closed(self) -> bool: ...

    def new_stream(self, ev: h2.events.RequestReceived) -> None: ...

    def data(self, sid: int, data: bytes, flow_controlled_length: int) -> None:
        """One DATA frame's payload; the sink acknowledges
        ``flow_controlled_length`` (padding included) when it is consumed."""

    def ended(self, sid: int) -> None: ...

    def reset(self, sid: int) -> None: ...

    def calm(self) -> None: ...

    def close(self, code: ErrorCodes) -> None: ...

    def lost(self) -> None: ...

    def kick(self) -> None: ...

    def pull(self) -> None: ...


class FrameReader:
    """Feeds h2 the bytes read and applies the budgets."""

    __slots__ = (
        "_block_cap",
        "_conn",
        "_control",
        "_partial",
        "_payload",
        "_sink",
        "_skip",
        "_stats",
        "allowance",
        "resets",
    )

    def __init__(
        self,
        conn: h2.connection.H2Connection,
        sink: Sink,
        stats: Stats,
        *,
        max_resets: int,
        max_control: int,
        block_cap: int,
    ) -> None:
        self._conn = conn
        self._sink = sink
        self._stats = stats.h2  # the only counters the reader moves
        self.resets = Budget(max_resets)
        self._control = Budget(max_control)
        self.allowance = WindowAllowance()
        self._block_cap = block_cap  # the encoded header block buffered at most
        # Frame boundaries, tracked over the raw bytes (see _count_frames):
        # bytes of the current frame still to skip (first the 24-byte
        # client preface), and a partial 9-byte frame header.
        self._skip = 24
        self._payload = False  # is _skip a frame's payload (not the preface)?
        self._partial = b""

    def receive(self, data: bytes) -> None:
        """One read's bytes."""
        conn = self._conn
        sink = self._sink
        try:
            events = conn.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            # h2 queued GOAWAY with the error code; everything stops.
            if exc.error_code == ErrorCodes.ENHANCE_YOUR_CALM:
                self._stats.calm += 1
            else:
                self._stats.protocol_errors += 1
            sink.lost()
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
                sink.calm()
                return
        for ev in events:
            if sink.closed:
                break
            self._event(ev)
        if not sink.closed and pending_header_bytes(conn) > self._block_cap:
            # CONTINUATION flood (CVE-2024-27316): a header block that
            # grows without end is refused before h2's 64-frame cap.
            self._stats.calm += 1
            sink.close(ErrorCodes.ENHANCE_YOUR_CALM)
        sink.pull()

    def _count_frames(self, data: bytes) -> int:
        """Frames whose last byte is in ``data`` (RFC 9113 §4.1: 24-bit
        length, type, flags, stream id), carrying state across reads.

        Counted where a frame ends, not where its header is: h2 reports a
        frame once it is whole, so a DATA frame split across two reads is
        one frame of the second read.  (Counted at its header, a large
        upload's split frames each looked like a frame without an event and
        spent the control budget: GOAWAY ENHANCE_YOUR_CALM mid-upload.)"""
        n = 0
        i = 0
        end = len(data)
        while i < end:
            if self._skip:
                take = min(self._skip, end - i)
                self._skip -= take
                i += take
                if not self._skip and self._payload:
                    n += 1
                continue
            need = 9 - len(self._partial)
            head = self._partial + data[i : i + need]
            i += min(need, end - i)
            if len(head) < 9:
                self._partial = head
                break
            self._partial = b""
            self._skip = int.from_bytes(head[:3], "big")
            self._payload = True
            if not self._skip:
                n += 1  # no payload: whole with its header
        return n

    def _event(self, ev: h2.events.Event) -> None:
        sink = self._sink
        if isinstance(ev, h2.events.RequestReceived):
            sink.new_stream(ev)
        elif isinstance(ev, h2.events.DataReceived):
            sid = ev.stream_id
            assert sid is not None
            n = ev.flow_controlled_length or 0
            data = ev.data or b""
            if not data and ev.stream_ended is None and self._control.spend():
                sink.calm()  # empty DATA frames cost work and carry nothing
                return
            # Not acknowledged here: the sink hands the window back as the
            # stream's handler consumes the data (flow control is the
            # backpressure, RFC 9113 §5.2), or at once for data nobody reads.
            sink.data(sid, data, n)
        elif isinstance(ev, h2.events.StreamEnded):
            sink.ended(ev.stream_id or 0)
        elif isinstance(ev, h2.events.StreamReset):
            if ev.remote_reset:
                self._stats.client_resets += 1
                if self.resets.spend():
                    sink.calm()  # rapid reset (CVE-2023-44487)
                    return
            sink.reset(ev.stream_id or 0)
        elif isinstance(ev, h2.events.PingReceived | h2.events.PriorityUpdated):
            if self._control.spend():
                sink.calm()
        elif isinstance(ev, h2.events.RemoteSettingsChanged):
            if self._control.spend():
                sink.calm()
                return
            sink.kick()  # windows or the frame size may have changed
        elif isinstance(ev, h2.events.WindowUpdated):
            # A WINDOW_UPDATE answers DATA we sent: free while the
            # allowance lasts; past it (a flood with no data moving) it
            # spends the control budget.
            if not self.allowance.spend() and self._control.spend():
                sink.calm()
                return
            sink.kick()
        elif isinstance(ev, h2.events.ConnectionTerminated):
            # The client's GOAWAY: h2 accepts no more frames from us either.
            sink.lost()
