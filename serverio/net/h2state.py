"""An HTTP/2 stream's state: one enum, its transitions in one table.

As :mod:`serverio.net.h1state` does for the HTTP/1.1 connection, each
response stream keeps what it is doing in one :class:`StreamState`, and
every change goes through :meth:`Stream.to`, which refuses a transition
the table does not list (a bug, raised where it happens).  The state is
the response side; the request side is ``Stream.ended`` (END_STREAM seen)
and ``Stream.body``: the :class:`~serverio.net.h2body.H2Body` its DATA
feeds (checked against ``content-length`` there), None when HEADERS ended
the stream.  The body's own state is its
:class:`~serverio.net.reqbody.BodyState`; the stream needs no state of
its own for it (an unread body is answered, then RST_STREAM NO_ERROR).

==========  =======================================================  ==========
state       the stream is ...                                        logged
==========  =======================================================  ==========
NEW         known to the connection; its task has not started        —
ANSWERING   in the request steps (route, handler, a deferred wait)   —
SENDING     HEADERS out; its body queued with the writer             —
EVENTS      a live-reload event stream (HEADERS out, DATA as         —
            events come)
COMPLETE    its last frame (END_STREAM) handed to h2                 yes
CLOSED      complete, then reset: by the client, by a stream error,  yes
            or by the server's RST_STREAM NO_ERROR that asks the
            client to stop sending a request it answered in full
            (RFC 9113 §8.1)
RESET       reset before it was complete (by either side, a write    no
            deadline, the connection's end): send nothing more
FAILED      its body could not be completed (a read error, the file  no
            shrank): reset with INTERNAL_ERROR
==========  =======================================================  ==========
"""

from __future__ import annotations

import enum
from typing import Final

import trio

from ..http.core import FileSpan
from ..wire.h2head import RequestHead
from .h2body import H2Body

__all__ = [
    "ANSWERING",
    "CLOSED",
    "COMPLETE",
    "DONE",
    "EVENTS",
    "FAILED",
    "NEW",
    "RESET",
    "SENDING",
    "STOPPED",
    "TRANSITIONS",
    "Stream",
    "StreamState",
]


class StreamState(enum.IntEnum):
    # An IntEnum: its members hash as ints (in C), so the table lookups of
    # a transition cost no Python-level __hash__.
    NEW = 0
    ANSWERING = 1
    SENDING = 2
    EVENTS = 3
    COMPLETE = 4
    CLOSED = 5
    RESET = 6
    FAILED = 7


# The members as plain module constants: an Enum class attribute lookup
# costs ~0.35 us on CPython 3.11 (see serverio.net.h1state); every stream
# reads them several times.
NEW: Final = StreamState.NEW
ANSWERING: Final = StreamState.ANSWERING
SENDING: Final = StreamState.SENDING
EVENTS: Final = StreamState.EVENTS
COMPLETE: Final = StreamState.COMPLETE
CLOSED: Final = StreamState.CLOSED
RESET: Final = StreamState.RESET
FAILED: Final = StreamState.FAILED

# Every allowed transition, from -> the states it may go to.
TRANSITIONS: Final[dict[StreamState, frozenset[StreamState]]] = {
    # A reset (or the connection's end) may come before the task runs.
    StreamState.NEW: frozenset({StreamState.ANSWERING, StreamState.RESET}),
    # HEADERS with END_STREAM (no body, HEAD), or HEADERS and a body framed
    # whole at once (serverio.net.h2write.Writer.respond_now), complete it.
    StreamState.ANSWERING: frozenset(
        {StreamState.SENDING, StreamState.EVENTS, StreamState.COMPLETE, StreamState.RESET}
    ),
    StreamState.SENDING: frozenset({StreamState.COMPLETE, StreamState.RESET, StreamState.FAILED}),
    # An event stream ends with an empty DATA frame carrying END_STREAM.
    StreamState.EVENTS: frozenset({StreamState.COMPLETE, StreamState.RESET}),
    StreamState.COMPLETE: frozenset({StreamState.CLOSED}),
    StreamState.CLOSED: frozenset(),
    StreamState.RESET: frozenset(),
    StreamState.FAILED: frozenset(),
}

# Nothing more may be sent on the stream.
STOPPED: Final = frozenset({StreamState.CLOSED, StreamState.RESET, StreamState.FAILED})
# The response was sent in full (the access log records it).
DONE: Final = frozenset({StreamState.COMPLETE, StreamState.CLOSED})


class Stream:
    """One request stream: its state, its request side and, while its body
    is sent, the writer's cursor into it."""

    __slots__ = (
        "_scope",
        "body",
        "credit",
        "ended",
        "fd",
        "file_slot",
        "head",
        "index",
        "moved",
        "offset",
        "open_body",
        "pieces",
        "progress",
        "remaining",
        "sid",
        "state",
        "status",
        "streamed",
        "streaming",
    )

    def __init__(self, sid: int, head: RequestHead, ended: bool) -> None:
        self.sid = sid
        self.head = head
        self.state = NEW
        self.ended = ended  # the client ended its side (END_STREAM seen)
        self.open_body = not ended  # HEADERS without END_STREAM: a body may follow
        # The request content its DATA feeds (set by the connection when a
        # body may follow).
        self.body: H2Body | None = None
        self._scope: trio.CancelScope | None = None  # made on first use (see scope)
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
        # A body produced while it is sent (serverio.model.ChunkSource):
        # ``pieces`` is its current chunk, ``streamed`` the bytes before it.
        self.streaming = False
        self.streamed = 0

    @property
    def scope(self) -> trio.CancelScope:
        """The cancel scope of the stream's task: what a reset cancels
        (made on first use: a stream the reader answers has no task and
        never needs one)."""
        scope = self._scope
        if scope is None:
            scope = self._scope = trio.CancelScope()
        return scope

    def to(self, new: StreamState) -> None:
        """Move to ``new``; a transition the table does not list is a bug."""
        if new not in TRANSITIONS[self.state]:
            raise RuntimeError(f"HTTP/2 stream {self.sid} state {self.state.name} -> {new.name}")
        self.state = new

    def stop(self, failed: bool = False) -> bool:
        """Send nothing more on this stream: COMPLETE -> CLOSED, a live one
        -> RESET (FAILED with ``failed``).  False when it was stopped already."""
        state = self.state
        if state in STOPPED:
            return False
        self.to(CLOSED if state == COMPLETE else FAILED if failed else RESET)
        return True
