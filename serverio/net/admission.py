"""Admission: the connection slots, and the 503 for a client past them.

:class:`Admission` is the server's part that turns an accepted socket into
a connection task, or sheds it (docs/architecture.md, "The server"): the
set of open connections (``--max-connections`` slots; a live-reload
event stream is out of the count, it has ``--watch-max-streams``), the
TLS wrapping, the connection tasks in the connections nursery (a bug in
one is logged and counted, never fatal to the others), and the
over-limit answer: the pure layer's 503 (``error_plan``, with
``Retry-After`` and ``Connection: close``) serialised once, written by at
most ``_MAX_REJECTORS`` rejector tasks with a bounded linger, past that
in one non-blocking write (:func:`reject_at_once`, also the admin
endpoint's).  A client is never queued for a slot.

Cancellation handling: :meth:`Admission.drain` waits for the connections
to end until a deadline and returns; cancelling it leaves them running
(the lifecycle cancels the nursery next).  A rejector task lingers at most
1 s and always closes its socket, cancelled or not.
"""

from __future__ import annotations

import logging
import os
import socket as _stdsocket
import ssl
import time

import trio

from ..http.core import error_plan
from ..wire.h1 import Canned
from .connection import ConnectionTask
from .env import ConnectionEnv
from .h1head import RECV_SIZE
from .tlsstream import TLSStream

__all__ = ["REJECT", "Admission", "reject_at_once"]

log = logging.getLogger("serverio")

# Concurrent 503 writers (each lingers up to 1 s); beyond this, the excess
# still gets its 503, in one non-blocking write without a task
# (reject_at_once), and is then closed.
_MAX_REJECTORS = 256
# The over-limit answer: the pure layer's 503 (Retry-After, close, the
# common fields), serialised once; only its Date is per send.
REJECT = Canned(error_plan(503, 0.0, close=True))

# The name trio would derive from Admission._run, given as a constant so
# that starting a connection task formats no string.
_CONNECTION_TASK = "serverio.net.admission.Admission._run"


def reject_at_once(sock: _stdsocket.socket | trio.socket.SocketType) -> None:
    """Past the rejector cap: still a 503, without a task or a linger.

    One non-blocking write (the response fits any empty socket buffer), then
    FIN; request bytes that already arrived are read first, so that close()
    sends FIN rather than RST (an RST can make the client drop the 503).
    ``sock`` must be non-blocking.
    """
    fd = sock.fileno()
    try:
        os.write(fd, REJECT.at(time.time()))
        sock.shutdown(_stdsocket.SHUT_WR)
        for _ in range(4):
            if not os.read(fd, RECV_SIZE):
                break
    except OSError:  # BlockingIOError: nothing (more) to read; or the peer is gone
        pass


class Admission:
    """The open connections and the way in: :meth:`admit` starts a
    connection task for an accepted socket, or sheds it with a 503."""

    def __init__(self, env: ConnectionEnv, connections: set[ConnectionTask]) -> None:
        self.env = env
        self._counts = env.stats.conns  # bound once: admit runs per connection
        # The open connections (the serve order, env.order, reads the same set).
        self.connections = connections
        self._idle = trio.Event()  # set when the last connection ends
        self.rejectors = 0  # rejector tasks writing a 503 now (a probe reads it)

    def admit(
        self,
        sock: _stdsocket.socket,
        tls: ssl.SSLContext | None,
        http2: bool,
        conns: trio.Nursery,
        max_conns: int,
    ) -> None:
        """Start a connection task for an accepted socket, or shed it (503).

        A connection holding a live-reload event stream is out of the
        count: streams have their own budget (``--watch-max-streams``,
        :class:`~serverio.concurrency.broadcast.StreamSlots`), so open
        connections stay within ``max_conns`` plus that budget.
        """
        tsock = trio.socket.from_stdlib_socket(sock)
        env = self.env
        self._counts.accepted += 1
        open_conns = len(self.connections)
        events = env.handler.hooks.events
        if events is not None:
            open_conns -= len(events.slots)
        if tls is None and open_conns < max_conns:
            # Plaintext: the connection makes its SocketStream (and sets the
            # TCP options) only if it needs them.
            conn = ConnectionTask(env, tsock, http2=http2)
            self.connections.add(conn)
            conns.start_soon(self._run, conn, name=_CONNECTION_TASK)
            return
        stream = trio.SocketStream(tsock)
        if open_conns >= max_conns:
            self._counts.rejected += 1
            if tls is not None:
                # (A plaintext 503 means nothing to a TLS client,
                # and a handshake is the work we are shedding.)
                stream.socket.close()
            elif self.rejectors >= _MAX_REJECTORS:
                reject_at_once(stream.socket)
                stream.socket.close()
            else:
                self.rejectors += 1
                conns.start_soon(self._reject, stream)
            return
        assert tls is not None
        conn = self._tls_connection(stream, tls, http2)
        self.connections.add(conn)
        conns.start_soon(self._run, conn, name=_CONNECTION_TASK)

    def _tls_connection(
        self, stream: trio.SocketStream, tls: ssl.SSLContext, http2: bool
    ) -> ConnectionTask:
        """Wrap in TLS; the handshake happens in the connection task, under
        the head deadline, and ConnectionTask takes the buffered path for any
        stream that is not a plain SocketStream."""
        client = "-"
        try:
            # Eager here (the lazy lookup needs a plain socket): next to a
            # TLS handshake one getpeername() is noise.
            peer = stream.socket.getpeername()
        except OSError:
            pass
        else:
            if isinstance(peer, tuple) and peer:
                client = str(peer[0])
        wrapped = TLSStream(stream, tls)
        return ConnectionTask(self.env, wrapped, client, http2=http2)

    async def _run(self, conn: ConnectionTask) -> None:
        try:
            await conn.run()
        except Exception:
            # A bug in one connection must not take every other connection
            # down with it (a nursery would cancel its siblings).  Log it
            # with its traceback and count it; the client sees a closed
            # connection.  Cancellation is not an Exception and passes.
            self._counts.internal_errors += 1
            log.exception("internal error in a connection task (connection closed)")
        finally:
            self.connections.discard(conn)
            if not self.connections:
                self._idle.set()

    async def _reject(self, stream: trio.SocketStream) -> None:
        """503 at once, then a bounded linger so the client can read it."""
        try:
            with trio.move_on_after(1.0):
                await stream.send_all(REJECT.at(time.time()))
                await stream.send_eof()
                for _ in range(16):  # drain a little so close() does not RST
                    if not await stream.receive_some(RECV_SIZE):
                        break
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self.rejectors -= 1
            await trio.aclose_forcefully(stream)

    async def drain(self, deadline: float) -> None:
        """Shutdown steps 2 and 3: idle connections and live-reload event
        streams close now, in-flight ones finish; return when none is left
        or at ``deadline``."""
        for c in list(self.connections):
            c.drain()
        with trio.move_on_at(deadline):
            while self.connections:
                self._idle = trio.Event()
                await self._idle.wait()
