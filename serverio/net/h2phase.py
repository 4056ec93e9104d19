"""The HTTP/2 connection's phase: one enum, its transitions in one table.

As :mod:`serverio.net.h1state` does for an HTTP/1.1 connection and
:mod:`serverio.net.h2state` for each stream, the HTTP/2 connection
(:class:`~serverio.net.h2conn.H2Connection`) keeps what it is doing in one
:class:`ConnPhase`, and every change goes through :func:`check`, which
refuses a transition the table does not list (a bug, raised where it
happens).  The two flags its writer (:class:`~serverio.net.h2write.Writer`)
reads on every round are the phase's columns in :data:`FLAGS`, set with
the phase and nowhere else:

==========  ===============================================  ========  ======
phase       the connection is ...                            reading   closed
==========  ===============================================  ========  ======
OPEN        serving: reading frames, new streams start       yes       no
DRAINING    our GOAWAY NO_ERROR is out (shutdown, a lame     yes       no
            duck's answer, RFC 9113 §6.8): later streams
            are refused (REFUSED_STREAM), in-flight ones
            finish; still reading their WINDOW_UPDATEs
FINISHING   reading is over (the client's EOF, or a drain    no        no
            with nothing left in flight): in-flight streams
            finish (a body its windows cannot finish is
            dropped), the writer flushes, then returns
CLOSED      ended: our GOAWAY with a code (idle deadline,    no        yes
            ENHANCE_YOUR_CALM, a stalled connection) or
            h2's own (a protocol error, the client's
            GOAWAY); no frame more either way, every stream
            stopped
BROKEN      the socket failed while reading: the             no        yes
            connection's nursery is cancelled (counted as
            a reset)
==========  ===============================================  ========  ======

``reading``: more input may come (the writer drops a body whose window is
shut once it is False: no WINDOW_UPDATE can come any more).  ``closed``:
send no more frames.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = [
    "BROKEN",
    "CLOSED",
    "DRAINING",
    "FINISHING",
    "FLAGS",
    "OPEN",
    "TRANSITIONS",
    "ConnPhase",
    "check",
]


class ConnPhase(enum.IntEnum):
    # An IntEnum: its members hash as ints (in C), as in h1state/h2state.
    OPEN = 0
    DRAINING = 1
    FINISHING = 2
    CLOSED = 3
    BROKEN = 4


# The members as plain module constants (an Enum class attribute lookup
# costs ~0.35 us on CPython 3.11: serverio.net.h1state).
OPEN: Final = ConnPhase.OPEN
DRAINING: Final = ConnPhase.DRAINING
FINISHING: Final = ConnPhase.FINISHING
CLOSED: Final = ConnPhase.CLOSED
BROKEN: Final = ConnPhase.BROKEN

# Every allowed transition, from -> the phases it may go to.
TRANSITIONS: Final[dict[ConnPhase, frozenset[ConnPhase]]] = {
    ConnPhase.OPEN: frozenset(
        {ConnPhase.DRAINING, ConnPhase.FINISHING, ConnPhase.CLOSED, ConnPhase.BROKEN}
    ),
    # EOF, or the last in-flight stream done; a stall or h2 may still end it.
    ConnPhase.DRAINING: frozenset({ConnPhase.FINISHING, ConnPhase.CLOSED, ConnPhase.BROKEN}),
    # Nothing is read any more, so only a stream's stall can end it early.
    ConnPhase.FINISHING: frozenset({ConnPhase.CLOSED}),
    # A read already under way when a stream task closed the connection
    # can still fail (trio delivers the error, not the cancellation).
    ConnPhase.CLOSED: frozenset({ConnPhase.BROKEN}),
    ConnPhase.BROKEN: frozenset(),
}

# phase -> (reading, closed): the Writer's two flags (the module's table).
FLAGS: Final[dict[ConnPhase, tuple[bool, bool]]] = {
    ConnPhase.OPEN: (True, False),
    ConnPhase.DRAINING: (True, False),
    ConnPhase.FINISHING: (False, False),
    ConnPhase.CLOSED: (False, True),
    ConnPhase.BROKEN: (False, True),
}


def check(old: ConnPhase, new: ConnPhase) -> tuple[bool, bool]:
    """The writer's flags for ``new``; a transition the table does not list
    is a bug (RuntimeError)."""
    if new not in TRANSITIONS[old]:
        raise RuntimeError(f"HTTP/2 connection phase {old.name} -> {new.name}")
    return FLAGS[new]
