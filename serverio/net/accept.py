"""The accept loops: sockets out of the listeners' queues, in bursts.

:class:`Acceptor` is the server's part between the listeners and
admission (docs/architecture.md, "The server"): one loop per listener,
accepting with a plain non-blocking ``accept()`` until EAGAIN, riding out
EMFILE/ENFILE/ENOMEM (logged at most once a second, with a count) and, out
of descriptors, answering one pending client 503 through a spare
descriptor kept for that; and the last sweep of a listener's backlog at
the end of a lame-duck period.

Every accept goes through :func:`raw_acceptor`: ``socket.socket.accept()``
builds the accepted socket from ``self.family`` and ``self.type``, two
properties that convert the C integers into ``AddressFamily`` /
``SocketKind`` enum members on every call, and asks the listener and the
module for their timeouts — a few percent of a whole ``Connection: close``
exchange (docs/performance.md, "Instructions per request").

Cancellation handling: :meth:`Acceptor.run` accepts until its scope is
cancelled (shutdown step 1); a socket accepted is handed to admission at
once, between checkpoints, so cancelling never leaks one.  The spare
descriptor is opened by :meth:`open_spare` and closed by
:meth:`close_spare` (the lifecycle's ``finally``).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import socket as _stdsocket
from collections.abc import Callable

import trio

from ..observe.stats import ConnectionStats
from .admission import Admission, reject_at_once
from .listen import Listeners

__all__ = ["Acceptor", "raw_acceptor"]

log = logging.getLogger("serverio")

_ACCEPT_RETRY_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS, errno.ECONNABORTED}
)
_ACCEPT_BURST = 64  # connections accepted per wake-up before yielding
_ACCEPT_LOG_INTERVAL = 1.0  # seconds between two "accept failed" log lines at most
_OUT_OF_FDS = frozenset({errno.EMFILE, errno.ENFILE})


class Acceptor:
    """The accept loops of every listener, feeding :class:`Admission`."""

    def __init__(
        self, listeners: Listeners, admission: Admission, counts: ConnectionStats, max_conns: int
    ) -> None:
        self._listeners = listeners
        self._admission = admission
        self._counts = counts
        self._max_conns = max_conns
        self._spare_fd = -1  # opened by open_spare(): see _shed_with_spare
        self._logged_at = -math.inf
        self._unlogged = 0

    def open_spare(self) -> None:
        self._spare_fd = _open_spare()

    def close_spare(self) -> None:
        if self._spare_fd >= 0:
            os.close(self._spare_fd)
            self._spare_fd = -1

    async def run(self, conns: trio.Nursery, scope: trio.CancelScope) -> None:
        """One accept loop per listener, until ``scope`` is cancelled."""
        with scope:
            async with trio.open_nursery() as acceptors:
                for listener in self._listeners.sockets:
                    acceptors.start_soon(self._loop, listener, conns)

    async def _loop(self, listener: trio.SocketListener, conns: trio.Nursery) -> None:
        """Accept until cancelled, draining the kernel's accept queue in bursts.

        ``SocketListener.accept()`` takes one connection per scheduling turn;
        with hundreds of busy connection tasks in each turn, a burst of new
        clients then waits in the backlog for seconds (we measured a p99 of
        1.2 s with 256 connections opening at once).  So we accept with a
        plain non-blocking ``accept()`` on the same fd until EAGAIN (at most
        ``_ACCEPT_BURST`` in a row), and only then wait for readability.
        """
        max_conns = self._max_conns
        tls = self._listeners.tls_of(listener)
        http2 = self._listeners.http2_of(listener)
        admit = self._admission.admit
        lsock = listener.socket
        # A stdlib view of the same fd (no dup): closing it is trio's job, so
        # we detach() instead of close().
        raw = _stdsocket.socket(lsock.family, lsock.type, lsock.proto, fileno=lsock.fileno())
        accept = raw_acceptor(raw)
        try:
            while True:
                for _ in range(_ACCEPT_BURST):
                    try:
                        sock = accept()
                    except BlockingIOError:
                        break
                    except OSError as exc:
                        if exc.errno in _ACCEPT_RETRY_ERRNOS:
                            # Like trio.serve_listeners: out of fds is a
                            # condition to ride out, not a reason to stop.
                            self._log_failure(exc.errno or 0)
                            if exc.errno in _OUT_OF_FDS:
                                shed = self._shed_with_spare(raw, tls is not None)
                                if shed:
                                    continue  # the next pending client, if any
                                if shed is not None:
                                    break  # nothing pending: wait for the next
                            await trio.sleep(0.1)
                            break
                        raise
                    admit(sock, tls, http2, conns, max_conns)
                else:
                    # A full burst: let the new tasks run before the next one.
                    await trio.lowlevel.checkpoint()
                    continue
                await trio.lowlevel.wait_readable(raw)
        finally:
            raw.detach()

    def backlog(self, conns: trio.Nursery) -> None:
        """Accept every connection already queued on every listener (no
        wait): the end of a lame-duck period, just before the listeners
        close, so that a client the kernel already accepted is answered,
        not reset."""
        for listener in self._listeners.sockets:
            lsock = listener.socket
            raw = _stdsocket.socket(lsock.family, lsock.type, lsock.proto, fileno=lsock.fileno())
            tls = self._listeners.tls_of(listener)
            http2 = self._listeners.http2_of(listener)
            accept = raw_acceptor(raw)
            try:
                while True:
                    try:
                        sock = accept()
                    except OSError:  # BlockingIOError: none left; EMFILE: give up
                        break
                    self._admission.admit(sock, tls, http2, conns, self._max_conns)
            finally:
                raw.detach()

    def _log_failure(self, err: int) -> None:
        """Log an accept failure at most once per second, with a count of
        the ones not logged since (EMFILE can come thousands of times a
        second while clients keep connecting)."""
        now = trio.current_time()
        if now - self._logged_at < _ACCEPT_LOG_INTERVAL:
            self._unlogged += 1
            return
        more = self._unlogged
        self._logged_at = now
        self._unlogged = 0
        name = errno.errorcode.get(err, str(err))
        if err in _OUT_OF_FDS:
            log.error(
                "accept failed (%s): out of file descriptors; new clients get 503 "
                "(%d more since the last report)",
                name,
                more,
            )
        else:
            log.error("accept failed (%s); retrying (%d more since the last report)", name, more)

    def _shed_with_spare(self, raw: _stdsocket.socket, tls: bool) -> bool | None:
        """Out of descriptors: answer one pending client 503 anyway.

        The spare descriptor (an open ``/dev/null``, kept for this) is
        closed, which frees exactly one slot for ``accept()``; the client
        gets the 503 at once and is closed, and the spare is taken back.
        True: one client was answered; False: none was pending; None: no
        spare (it could not be re-opened, for the same lack of descriptors):
        the caller backs off.  Over TLS the client is closed without a 503
        (a plaintext answer means nothing to it).
        """
        if self._spare_fd < 0:
            self._spare_fd = _open_spare()
            if self._spare_fd < 0:
                return None
        os.close(self._spare_fd)
        self._spare_fd = -1
        try:
            sock, _addr = raw.accept()
        except BlockingIOError:
            shed: bool | None = False
        except OSError:
            shed = None  # another thread took the freed slot first
        else:
            self._counts.accepted += 1
            self._counts.rejected += 1
            try:
                if not tls:
                    sock.setblocking(False)
                    reject_at_once(sock)
            finally:
                sock.close()
            shed = True
        self._spare_fd = _open_spare()
        return shed


def _open_spare() -> int:
    """The spare descriptor for 503s at EMFILE; -1 if none can be opened."""
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return -1


def raw_acceptor(raw: _stdsocket.socket) -> Callable[[], _stdsocket.socket]:
    """A function taking the next pending connection of the listening
    ``raw`` socket; it raises what ``raw.accept()`` raises
    (``BlockingIOError`` when none is pending on a non-blocking listener,
    ``OSError`` for EMFILE and the like).

    It calls the C ``_accept()`` (the method ``accept()`` itself calls, on
    every platform CPython supports) with the listener's family, type and
    proto read once.  The accepted socket is ``accept()``'s: same family,
    type and proto, blocking as the stdlib leaves it (trio's
    ``from_stdlib_socket`` makes it non-blocking).  An interpreter without
    ``_accept`` gets plain ``accept()``.

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
