"""Taking one connection off a listening socket, without the stdlib's detour.

``socket.socket.accept()`` builds the accepted socket from ``self.family``
and ``self.type``, two properties that convert the C integers into
``AddressFamily`` / ``SocketKind`` enum members on every call, and asks the
listener and the module for their timeouts: a few percent of a whole
``Connection: close`` exchange (docs/performance.md, "Instructions per
request").

:func:`raw_acceptor` reads the three numbers once per listener and returns
a function that calls the C ``_accept()`` (the method ``accept()`` itself
calls, on every platform CPython supports) and wraps the descriptor.  The
accepted socket is the same as ``accept()``'s: same family, type and proto;
blocking like the stdlib leaves it (trio's ``from_stdlib_socket`` makes it
non-blocking).  An interpreter without ``_accept`` gets plain ``accept()``.
"""

from __future__ import annotations

import socket as _stdsocket
from collections.abc import Callable

__all__ = ["raw_acceptor"]


def raw_acceptor(raw: _stdsocket.socket) -> Callable[[], _stdsocket.socket]:
    """A function taking the next pending connection of the listening
    ``raw`` socket; it raises what ``raw.accept()`` raises
    (``BlockingIOError`` when none is pending on a non-blocking listener,
    ``OSError`` for EMFILE and the like).

    Cancellation handling: synchronous, never blocks on a non-blocking
    listener; the caller waits for readability itself.
    """
    accept_fd: Callable[[], tuple[int, object]] | None = getattr(raw, "_accept", None)
    if accept_fd is None:  # not CPython's socket: the public way
        return lambda: raw.accept()[0]
    family, kind, proto = int(raw.family), int(raw.type), raw.proto
    new = _stdsocket.socket

    def accept() -> _stdsocket.socket:
        fd, _addr = accept_fd()
        return new(family, kind, proto, fd)

    return accept
