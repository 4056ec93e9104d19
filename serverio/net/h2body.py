"""The HTTP/2 request body: one stream's DATA, pulled by its handler.

The connection's reader feeds :class:`H2Body` each DATA payload
(:meth:`H2Body.feed`, with h2's ``flow_controlled_length``), then
:meth:`~H2Body.end` at END_STREAM or :meth:`~H2Body.reset` at RST_STREAM.
The handler pulls chunks (:class:`~serverio.net.reqbody.RequestBody`).

Flow control is the backpressure (RFC 9113 §5.2, §6.9): the connection
does not acknowledge DATA when it arrives; the body calls ``acknowledge(n)``
(the connection's ``conn.acknowledge_received_data(n, stream_id)``) only as
the handler consumes, so the client can never have more than the stream's
receive window buffered here.  Padding is acknowledged at once (it is
counted by flow control but never buffered).  A body that fails or is
abandoned acknowledges what it holds and everything fed after, so a dead
stream never starves the connection window of the others.

A ``content-length`` that the DATA does not add up to (more than declared,
or END_STREAM short of it) is a malformed request: :meth:`~H2Body.feed` or
:meth:`~H2Body.end` returns a :class:`~serverio.net.reqbody.BodyMalformed`
whose ``h2_code`` is PROTOCOL_ERROR, and the connection resets that stream
only (RFC 9113 §8.1.1: a stream error, never a connection error).  h2
itself checks content-length and makes a mismatch a connection error
(GOAWAY), even with ``validate_inbound_headers=False``, before the
connection sees the DATA; :class:`StreamLengthConnection` (from
:mod:`serverio.net.h2adapter`, the one place serverio uses h2's private
API; :class:`~serverio.net.h2conn.H2Connection`'s h2 connection is one
too) leaves that check to this body.

Too large: declared over ``max_size`` -> :meth:`~RequestBody.refused`
(413 before reading); more than ``max_size`` streamed -> the pull raises
:class:`~serverio.net.reqbody.BodyTooLarge`.  Either way the transport
answers 413 and then resets the stream with NO_ERROR (RFC 9113 §8.1), or
with CANCEL when its response had already started.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import trio

from .h2adapter import StreamLengthConnection
from .reqbody import BodyError, BodyMalformed, BodyPolicy, BodyState, ClientGone, RequestBody

__all__ = ["DEFAULT_WINDOW", "H2Body", "StreamLengthConnection"]

# RFC 9113 §6.9.2: SETTINGS_INITIAL_WINDOW_SIZE starts at 65,535.
DEFAULT_WINDOW = 65_535


class H2Body(RequestBody):
    """One HTTP/2 stream's content.

    ``window``: the stream's receive window as the connection announced it
    (SETTINGS_INITIAL_WINDOW_SIZE); more buffered than that is a flow-control
    violation h2 should already have refused; here it is a stream error.
    ``acknowledge(n)``: hands ``n`` flow-controlled bytes back to the peer.

    Cancellation handling: see :class:`RequestBody`; a pull waits on a
    parking lot that :meth:`feed`, :meth:`end` and :meth:`reset` wake.
    """

    __slots__ = ("_ack", "_acked", "_buffered", "_ended", "_fed", "_lot", "_pieces", "window")

    def __init__(
        self,
        policy: BodyPolicy,
        declared: int | None,
        acknowledge: Callable[[int], None],
        *,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        super().__init__(policy, declared)
        self.window = window
        self._ack = acknowledge
        self._pieces: deque[bytes] = deque()  # fed content not yet handed out
        self._buffered = 0  # bytes in _pieces
        self._fed = 0  # content bytes fed (for the content-length check)
        self._acked = 0  # flow-controlled bytes acknowledged
        self._ended = False
        self._lot = trio.lowlevel.ParkingLot()

    @property
    def buffered(self) -> int:
        """Content bytes received and not yet consumed."""
        return self._buffered

    @property
    def acknowledged(self) -> int:
        """Flow-controlled bytes handed back with ``acknowledge`` so far."""
        return self._acked

    def _acknowledge(self, n: int) -> None:
        if n > 0:
            self._acked += n
            self._ack(n)

    # ------------------------------------------------------ connection side

    def feed(self, data: bytes, flow_controlled_length: int) -> BodyError | None:
        """One DATA frame's payload.  Returns the stream error to reset the
        stream with (then the body is FAILED), or None."""
        padding = flow_controlled_length - len(data)
        self._acknowledge(padding)
        if self.state is BodyState.FAILED or self._ended:
            self._acknowledge(len(data))  # discarded: give the window back
            return None
        self._fed += len(data)
        if self.declared is not None and self._fed > self.declared:
            self._acknowledge(len(data))
            return self._stream_error(f"DATA past content-length {self.declared}")
        if self._buffered + len(data) > self.window:
            self._acknowledge(len(data))
            return self._stream_error("DATA past the stream's receive window")
        if data:
            self._pieces.append(data)
            self._buffered += len(data)
            self._lot.unpark_all()
        return None

    def end(self) -> BodyError | None:
        """END_STREAM.  Returns the stream error when the content-length
        was not reached, or None."""
        self._ended = True
        self._lot.unpark_all()
        if self.state is not BodyState.FAILED and self.declared not in (None, self._fed):
            return self._stream_error(f"END_STREAM at {self._fed} of {self.declared}")
        return None

    def reset(self) -> None:
        """RST_STREAM from the client, or the connection is gone."""
        self.fail(ClientGone("stream reset mid-body"))
        self._lot.unpark_all()

    def _stream_error(self, detail: str) -> BodyError:
        error = BodyMalformed(detail)
        self.fail(error)
        self._lot.unpark_all()
        return error

    def _release(self) -> None:
        self._pieces.clear()
        held, self._buffered = self._buffered, 0
        self._acknowledge(held)

    # ------------------------------------------------------ handler side

    async def _begin(self) -> None:
        return None

    async def _pull(self, max_bytes: int) -> bytes | None:
        while not self._pieces:
            if self.state is BodyState.FAILED:
                assert self._error is not None
                raise self._error
            if self._ended:
                return None
            await self._lot.park()
        piece = self._pieces.popleft()
        if len(piece) > max_bytes:
            self._pieces.appendleft(piece[max_bytes:])
            piece = piece[:max_bytes]
        self._buffered -= len(piece)
        self._acknowledge(len(piece))  # the window reopens as the handler consumes
        return piece
