"""The server's lifecycle: serving, then the shutdown order.

:class:`Lifecycle` is the server's part that owns time (docs/architecture.md,
"The server"; docs/cancellation.md, "Graceful shutdown"): it starts the
handler's job nursery, the site's, the connections nursery and the accept
loops, waits for :meth:`Lifecycle.shutdown` or :meth:`Lifecycle.abort`, and
then runs the shutdown order:

0. lame duck, for ``--shutdown-delay S`` > 0 (load balancers): ``draining``
   turns on at once (``/healthz`` answers 503, every response ends its
   connection with ``Connection: close``), but the listeners keep
   accepting for S seconds, so a balancer that has not yet seen the 503
   still gets answers; a connection accepted then is served its first
   request.  Idle keep-alive connections are closed when the S seconds
   end, not at once: a balancer may be sending a request on one at the
   moment it closes, and with no retry that request fails (HTTP/1.1 has
   no GOAWAY).  After S seconds the connections already queued in the
   kernel's backlog are accepted too, then:
1. stop accepting: cancel the accept loops and close the listeners at once
   (closing a trio listener never waits on connection tasks, so asyncio's
   ``Server.wait_closed()`` trap, waiting for every connection, cannot
   happen here);
2. close idle connections at once (those waiting for a request),
   and live-reload event streams (``--watch``), which never finish;
3. let in-flight responses finish, each with ``Connection: close``, until
   ``shutdown_timeout``;
4. cancel the connection nursery: whatever remains is cut;
5. wait for pool threads until the same deadline; threads still stuck in a
   syscall are abandoned (logged with their count) and we return anyway;
6. flush the log pipes (:mod:`serverio.observe.logpipe`) for at most
   ``FLUSH_SECONDS`` and stop their writers: a write stuck on a stalled
   log reader is abandoned like a pool thread, and the lines still
   buffered are counted as dropped.

A second :meth:`Lifecycle.abort` (second signal) skips to step 4 at once
(step 6 still runs: it is bounded on its own).

Cancellation handling: cancelling :meth:`Lifecycle.serve` from outside
cancels the whole tree at once (accept loops, connections) without the
graceful drain; blocking threads in the pools are abandoned and their late
results closed when they finish.  Its ``finally`` closes the spare
descriptor and the root (unless a thread may still use it) either way.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import trio

from ..net.accept import Acceptor
from ..net.admission import Admission
from ..net.listen import Listeners
from .services import Services

__all__ = ["Lifecycle"]

log = logging.getLogger("serverio")


class Lifecycle:
    """Serve until shutdown, then stop in order (the module's steps 0-5)."""

    def __init__(
        self,
        services: Services,
        listeners: Listeners,
        admission: Admission,
        acceptor: Acceptor,
    ) -> None:
        self._services = services
        self._listeners = listeners
        self._admission = admission
        self._acceptor = acceptor
        self._shutdown = trio.Event()
        self._abort_event = trio.Event()  # wakes the lame-duck wait on abort()
        self._aborted = False
        self.nursery: trio.Nursery | None = None  # the connections nursery, while serving
        self.abandoned_threads = 0

    def shutdown(self) -> None:
        """Begin graceful shutdown (idempotent)."""
        self._shutdown.set()

    def abort(self) -> None:
        """Stop now: cancel every connection without draining."""
        self._aborted = True
        self._services.env.cut_fresh = True
        self._shutdown.set()
        self._abort_event.set()
        if self.nursery is not None:
            self.nursery.cancel_scope.cancel()

    async def serve(self, started: Callable[[], None]) -> None:
        """Serve until shutdown, then stop in order and return; ``started``
        is called once the accept loops are started.

        The log pipes' writers run around everything else (6.): they take
        the lines of every step, the last warnings included, and are
        flushed, bounded, and stopped last.
        """
        services = self._services
        await self._listeners.open()
        async with services.logging():
            await self._serve(started)

    async def _serve(self, started: Callable[[], None]) -> None:
        services = self._services
        _ = services.opener  # open the root once, before accepting anything
        self._acceptor.open_spare()
        # Set by _stop; an abort can cut _stop short (the connections
        # nursery absorbs that cancellation), and then step 5 needs none.
        deadline = trio.current_time()
        try:
            site = services.site
            async with (
                services.handler.running(),
                site.running() if site is not None else contextlib.nullcontext(),
                trio.open_nursery() as conns,
            ):
                self.nursery = conns
                if services.env.order is not None:
                    conns.start_soon(services.env.order.run)
                accept_scope = trio.CancelScope()
                conns.start_soon(self._acceptor.run, conns, accept_scope)
                started()
                await self._shutdown.wait()
                deadline = await self._stop(conns, accept_scope)
            await self._abandon(deadline)
        finally:
            self.nursery = None
            self._acceptor.close_spare()
            if services.proxy is not None:
                services.proxy.close_idle()  # the pooled upstream connections
            services.close_root()

    async def _stop(self, conns: trio.Nursery, accept_scope: trio.CancelScope) -> float:
        """Steps 0-4; returns the shutdown deadline (step 5 uses it too)."""
        env = self._services.env
        delay = self._services.config.conn.shutdown_delay
        if delay > 0 and not self._aborted:
            # 0. lame duck: refuse nothing yet, keep nothing open.
            # Idle keep-alive connections are left open until the
            # delay ends: closing one while a balancer picks it for
            # a request loses that request (measured behind HAProxy,
            # docs/deployment.md "Fleets"); any request on one now
            # is answered with Connection: close.
            env.draining = True
            with trio.move_on_after(delay):
                await self._abort_event.wait()
            # What the kernel queued before the close is served too.
            if not self._aborted:
                self._acceptor.backlog(conns)
        else:
            env.cut_fresh = True
        # 1. stop accepting.
        accept_scope.cancel()
        for listener in self._listeners.sockets:
            await trio.aclose_forcefully(listener)
        deadline = trio.current_time() + self._services.config.conn.shutdown_timeout
        if not self._aborted:
            # 2. idle connections and live-reload event streams
            # close now; 3. in-flight ones drain.
            env.draining = True
            await self._admission.drain(deadline)
        # 4. cut whatever remains.
        conns.cancel_scope.cancel()
        return deadline

    async def _abandon(self, deadline: float) -> None:
        """5. wait for pool threads, then abandon the stuck ones."""
        pools = self._services.pools
        if not self._aborted:
            stuck = 0
            for pool in pools:
                stuck += await pool.wait_idle(deadline)
        else:
            stuck = sum(pool.running for pool in pools)
        self.abandoned_threads = stuck
        if stuck:
            log.warning("abandoning %d worker thread(s) stuck in blocking calls", stuck)
