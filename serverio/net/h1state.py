"""The HTTP/1.1 connection's phase: one enum, its transitions in one table.

As h11 keeps its state machine in ``_state.py``, the connection keeps what
it is doing in one :class:`Phase`, and every change goes through
:meth:`Lifetime.to`, which refuses a transition the table does not list
(a bug, raised where it happens).  The phase also says what the
connection's lifetime cancel scope guards:

==========  ==============================================  ===========================
phase       the connection is ...                           read deadline on the scope
==========  ==============================================  ===========================
FIRST       new: its first request, before the lifetime     none (no scope yet; nothing
            scope exists (answered at once when its head    waits for request bytes)
            is here after one non-blocking read)
HANDSHAKE   in its TLS handshake                            ``--head-timeout``
IDLE        between requests, until the first byte          ``--keepalive-timeout``
HEAD        receiving a request head                        ``--head-timeout``
BUSY        answering a request, keep-alive so far (writes  none (lifted lazily: see
            have their own deadline, ``--write-timeout``;   :meth:`Lifetime.lift`)
            a request body the handler pulls has its own,
            ``--body-timeout`` and ``--body-total-
            timeout``)
LAST        answering the connection's last request:        as BUSY
            keep-alive is off, it closes after the
            response (:meth:`Lifetime.close_after`)
DRAIN       after the response, reading and discarding      none (the drain's own
            the rest of a body the handler did not read,    bound: ``BodyPolicy.
            so that the connection can be kept              drain_timeout``)
STREAM      streaming live-reload events                    none
SWITCHED    served by HTTP/2 from now on                    none (HTTP/2 has its own)
TUNNEL      a protocol switch (a proxied WebSocket): the    none (the tunnel's own,
            101 is sent, the stream is the tunnel's         ``--proxy-tunnel-idle``)
CLOSED      over                                            —
==========  ==============================================  ===========================

A deadline cancels the lifetime scope; the connection then answers 408
(HEAD, HANDSHAKE: closes quietly) or closes quietly (IDLE).

Keep-alive, close and upgrade are transitions of the table, not flags the
connection carries (as h11 makes them state-triggered in ``_state.py``):

* keep-alive: a request is answered in BUSY; when the response is out the
  connection goes on to the next request (IDLE or HEAD, or DRAIN first
  when the handler left some of the request's content unread);
* close: anything that turns keep-alive off while a request is answered
  moves BUSY to LAST (:meth:`Lifetime.close_after`): the request's
  ``Connection: close`` or an HTTP/1.0 request without ``keep-alive``
  (RFC 9112 §9.3), ``--max-requests`` reached, a head whose facts could
  not be built, content that cannot be drained, an answer that closes,
  the server draining, a client that half-closed with nothing pipelined
  (RFC 9112 §9.6), a body of unknown length to HTTP/1.0 (ended by the
  close, RFC 9112 §6.3).  The response then carries ``Connection: close``
  and LAST leads only to CLOSED (or to STREAM or TUNNEL, which close too);
* upgrade: a 101 the proxy relays hands the connection to its tunnel
  (BUSY or LAST -> TUNNEL, RFC 9110 §7.8): no request is read after it.
"""

from __future__ import annotations

import enum
import math
from typing import Final

import trio

__all__ = [
    "BUSY",
    "CLOSED",
    "DRAIN",
    "FIRST",
    "HANDSHAKE",
    "HEAD",
    "IDLE",
    "LAST",
    "SLACK",
    "STREAM",
    "SWITCHED",
    "TRANSITIONS",
    "TUNNEL",
    "Lifetime",
    "Phase",
]


class Phase(enum.IntEnum):
    # An IntEnum: its members hash as ints (in C), so the table lookups of
    # a transition cost no Python-level __hash__ on every request.
    FIRST = 0
    HANDSHAKE = 1
    IDLE = 2
    HEAD = 3
    BUSY = 4
    STREAM = 5
    SWITCHED = 6
    CLOSED = 7
    DRAIN = 8
    TUNNEL = 9
    LAST = 10


# The members as plain module constants: an Enum class attribute lookup
# (``Phase.BUSY``) goes through EnumType and costs ~0.35 us on CPython
# 3.11, a module global a fraction of that; the connection reads them on
# every request.
FIRST: Final = Phase.FIRST
HANDSHAKE: Final = Phase.HANDSHAKE
IDLE: Final = Phase.IDLE
HEAD: Final = Phase.HEAD
BUSY: Final = Phase.BUSY
STREAM: Final = Phase.STREAM
SWITCHED: Final = Phase.SWITCHED
CLOSED: Final = Phase.CLOSED
DRAIN: Final = Phase.DRAIN
TUNNEL: Final = Phase.TUNNEL
LAST: Final = Phase.LAST

# Every allowed transition, from -> the phases it may go to.
TRANSITIONS: Final[dict[Phase, frozenset[Phase]]] = {
    # A new plain socket answers a first head that is here at once (BUSY),
    # or waits for it under the head deadline; TLS shakes hands first.
    Phase.FIRST: frozenset({Phase.HANDSHAKE, Phase.HEAD, Phase.BUSY, Phase.CLOSED}),
    # ALPN "h2" switches at once (RFC 9113 §3.2).
    Phase.HANDSHAKE: frozenset({Phase.HEAD, Phase.SWITCHED, Phase.CLOSED}),
    # The next request's first bytes without its whole head start the head
    # deadline; a whole head in one read goes straight to BUSY.
    Phase.IDLE: frozenset({Phase.HEAD, Phase.BUSY, Phase.CLOSED}),
    Phase.HEAD: frozenset({Phase.BUSY, Phase.CLOSED}),
    # After a response: wait for the next request (IDLE, or HEAD when part
    # of it is already buffered); an event stream; h2c prior knowledge
    # (RFC 9113 §3.3) on the first request; close.  A pipelined head that
    # is already whole is answered without leaving BUSY.  A request body
    # the handler left unread is drained first (DRAIN).  A 101 from the
    # proxy hands the connection to its tunnel (TUNNEL).  Keep-alive
    # turned off while answering: this request is the last (LAST).
    Phase.BUSY: frozenset(
        {
            Phase.IDLE,
            Phase.HEAD,
            Phase.STREAM,
            Phase.SWITCHED,
            Phase.CLOSED,
            Phase.DRAIN,
            Phase.TUNNEL,
            Phase.LAST,
        }
    ),
    # The last request's answer: an event stream and a tunnel end the
    # connection too; no next request, no drain of unread content.
    Phase.LAST: frozenset({Phase.STREAM, Phase.TUNNEL, Phase.CLOSED}),
    # The body is read to its end: back to the answering phase, which goes
    # on to the next head (pipelined bytes past the body included); or the
    # drain failed (too large, too slow, the client left): close.
    Phase.DRAIN: frozenset({Phase.BUSY, Phase.CLOSED}),
    Phase.STREAM: frozenset({Phase.CLOSED}),
    Phase.SWITCHED: frozenset({Phase.CLOSED}),
    Phase.TUNNEL: frozenset({Phase.CLOSED}),
    Phase.CLOSED: frozenset(),
}

# In these phases a request (or what stands for one) is being served: a
# drain lets it finish instead of closing the connection under it (DRAIN:
# the body drain is bounded by its own deadline).
# TUNNEL: a tunnel is drained like a request, cut at --shutdown-timeout.
_IN_FLIGHT: Final = frozenset(
    {Phase.BUSY, Phase.LAST, Phase.DRAIN, Phase.STREAM, Phase.SWITCHED, Phase.TUNNEL}
)


# How much sooner than asked a re-armed read deadline may stay (Lifetime.arm):
# 1/64 of the timeout (78 ms of the default 5 s keep-alive).
SLACK: Final = 1 / 64


class Lifetime:
    """A connection's phase and the cancel scope of its whole life, which
    carries the handshake, head and keep-alive deadlines.

    One scope for the connection's whole life: moving its deadline costs a
    fraction of entering a fresh scope per request (measured: a CancelScope
    with a deadline is ~8 us of a ~100 us request).
    """

    __slots__ = ("armed", "phase", "scope")

    def __init__(self) -> None:
        self.phase = FIRST
        self.scope: trio.CancelScope | None = None
        self.armed = False  # the scope holds a read deadline

    def to(self, new: Phase) -> None:
        """Move to ``new``; a transition the table does not list is a bug."""
        if new not in TRANSITIONS[self.phase]:
            raise RuntimeError(f"HTTP/1.1 connection phase {self.phase.name} -> {new.name}")
        self.phase = new

    def close_after(self) -> None:
        """Keep-alive is off: the request being answered is the connection's
        last (BUSY -> LAST; in LAST already, nothing).  The response then
        says ``Connection: close`` and the connection closes after it
        (RFC 9112 §9.6); h11 calls this event "keep-alive disabled"."""
        if self.phase is not LAST:
            self.to(LAST)

    @property
    def in_flight(self) -> bool:
        return self.phase in _IN_FLIGHT

    def arm(self, phase: Phase, timeout: float) -> None:
        """Enter ``phase`` (IDLE, HEAD, HANDSHAKE) with its read deadline:
        ``timeout`` from now, or up to ``timeout`` x :data:`SLACK` sooner.

        A deadline already on the scope that falls in that window is left
        where it is: a keep-alive connection re-arms the same deadline for
        every request (each move of a cancel scope's deadline is trio
        bookkeeping, ~4% of a warm request), and moving it by a few
        milliseconds changes nothing a client can rely on.  A deadline
        later than the new one, or earlier by more than the slack, is
        moved."""
        if phase not in TRANSITIONS[self.phase]:
            raise RuntimeError(f"HTTP/1.1 connection phase {self.phase.name} -> {phase.name}")
        self.phase = phase
        scope = self.scope
        assert scope is not None
        self.armed = True
        target = trio.current_time() + timeout
        if not target - timeout * SLACK <= scope.deadline <= target:
            scope.deadline = target

    def lift(self) -> None:
        """Lift the read deadline before the answering phase waits for anything.

        Lazily: entering BUSY leaves the head or keep-alive deadline on the
        scope until something could wait (this is called before every await
        of the answering phase).  A deadline can only cancel at a
        checkpoint, and a warm response written in one non-blocking
        ``write`` has none; the next wait then sets the next read deadline
        directly — one deadline move per request instead of two (each move
        is ~1.7 us of trio bookkeeping).

        Cancellation handling: every await between a request head and the
        next read (pooled preparation, follow-ups, a write that blocks, the
        pipelining checkpoint) is preceded by this, so a read deadline never
        cuts a response in progress.
        """
        if self.armed:
            self.disarm()

    def disarm(self) -> None:
        """No read deadline on the scope from now on (until the next :meth:`arm`)."""
        self.armed = False
        if self.scope is not None:
            self.scope.deadline = math.inf
