"""The server: its parts, each with one job, and what callers see of them.

Structure (docs/architecture.md, "The server", has the table)::

    Server                            the public surface (Server(...), serve,
                                      shutdown, abort, addresses, counters)
      Listeners   (net.listen)        the bound sockets, their TLS contexts
                                      and protocols
      Services    (app.services)      what connections use: stats and sinks,
                                      pools, caches, handler, site, root,
                                      the ConnectionEnv
      Admission   (net.admission)     connection slots, connection tasks,
                                      the over-limit 503
      Acceptor    (net.accept)        the accept loops, EMFILE, the spare fd
      Lifecycle   (app.lifecycle)     serve, then the shutdown order
                                      (lame duck, stop accepting, drain,
                                      cancel, abandon stuck threads)

Task tree while serving::

    Lifecycle.serve()
      nursery "connections"           owns every connection task
        accept loop per listener      (in its own cancel scope)
        ConnectionTask.run() ...
      pools fs / work                 CapacityLimiter + bounded queue each
      nursery "jobs"                  cache jobs (compression, digests): they
                                      belong to the caches, not to a request,
                                      and outlive the connections

Graceful shutdown (:meth:`Server.shutdown`, SIGINT/SIGTERM in the CLI) is
:class:`~serverio.app.lifecycle.Lifecycle`'s order, steps 0-5; a second
:meth:`Server.abort` (second signal) skips to step 4 at once.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from ..concurrency.blocking import Pool
from ..config import Config
from ..fs.filecache import FileCache
from ..fs.opener import ContainedRoot
from ..net.accept import Acceptor
from ..net.admission import Admission
from ..net.connection import ConnectionTask
from ..net.env import ConnectionEnv
from ..net.listen import Listeners, bind_public, public_addresses
from ..observe.accesslog import AccessLog
from ..observe.histogram import Histogram
from ..observe.stats import Stats
from ..pipeline.content import ContentService
from ..pipeline.handler import Handler
from .lifecycle import Lifecycle
from .services import Services

if TYPE_CHECKING:  # imported by --watch only (app.services)
    from ..live.service import LiveReload

__all__ = ["Server", "bind_public", "public_addresses"]


class Server:
    """A static file server for one directory.

    Use :meth:`serve` inside a nursery (``await nursery.start(server.serve)``)
    and :meth:`shutdown` to stop it gracefully.  The work is done by its
    parts (the module's table); the attributes below are views of them.

    Cancellation handling: cancelling :meth:`serve` from outside cancels the
    whole tree at once (accept loops, connections) without the graceful
    drain; blocking threads in the pools are abandoned and their late results
    closed when they finish.  :meth:`shutdown` is the graceful path.
    """

    def __init__(
        self,
        config: Config,
        *,
        listeners: Sequence[trio.SocketListener] | None = None,
        access_log: AccessLog | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        config = config if config.root else config.validate()
        self.listen = Listeners(config, listeners, ssl_context)
        connections: set[ConnectionTask] = set()
        self.services = Services(config, access_log, connections, http2=self.listen.any_http2)
        self.admission = Admission(self.services.env, connections)
        self.acceptor = Acceptor(
            self.listen, self.admission, self.services.stats.conns, config.conn.max_connections
        )
        self.lifecycle = Lifecycle(self.services, self.listen, self.admission, self.acceptor)

    # ------------------------------------------------------------ views

    @property
    def config(self) -> Config:
        return self.services.config

    @property
    def stats(self) -> Stats:
        return self.services.stats

    @property
    def response_times(self) -> Histogram:
        return self.services.response_times

    @property
    def access_log(self) -> AccessLog:
        return self.services.access_log

    @property
    def fs(self) -> Pool:
        return self.services.fs

    @property
    def work(self) -> Pool:
        return self.services.work

    @property
    def pools(self) -> list[Pool]:
        """Every pool whose threads shutdown waits for (then abandons)."""
        return self.services.pools

    @property
    def files(self) -> FileCache:
        return self.services.files

    @property
    def content(self) -> ContentService:
        return self.services.content

    @property
    def handler(self) -> Handler:
        return self.services.handler

    @property
    def live(self) -> LiveReload | None:
        return self.services.live

    @property
    def env(self) -> ConnectionEnv:
        return self.services.env

    @property
    def opener(self) -> ContainedRoot:
        return self.services.opener

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        return self.listen.ssl_context

    @property
    def listeners(self) -> list[trio.SocketListener]:
        return self.listen.sockets

    @property
    def connections(self) -> set[ConnectionTask]:
        return self.admission.connections

    @property
    def abandoned_threads(self) -> int:
        """Pool threads still stuck in a blocking call when shutdown ended."""
        return self.lifecycle.abandoned_threads

    @property
    def draining(self) -> bool:
        """Graceful shutdown has begun (connections see it through ``env``)."""
        return self.services.env.draining

    # ------------------------------------------------------------ control

    def addresses(self) -> list[tuple[str, int]]:
        return self.listen.addresses()

    def tls_of(self, listener: trio.SocketListener) -> ssl.SSLContext | None:
        """The TLS context of ``listener``'s connections (None: plaintext)."""
        return self.listen.tls_of(listener)

    def http2_of(self, listener: trio.SocketListener) -> bool:
        """Whether ``listener`` speaks HTTP/2."""
        return self.listen.http2_of(listener)

    async def open_listeners(self) -> None:
        """Bind the configured addresses (unless listeners were given).

        With ``--fd`` the inherited sockets are used instead of binding.
        """
        await self.listen.open()

    def shutdown(self) -> None:
        """Begin graceful shutdown (idempotent)."""
        self.lifecycle.shutdown()

    def abort(self) -> None:
        """Stop now: cancel every connection without draining."""
        self.lifecycle.abort()

    async def serve(
        self, *, task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until :meth:`shutdown`, then drain in order and return."""
        await self.lifecycle.serve(lambda: task_status.started(self))
