"""The server: listeners, admission, the connection nursery, shutdown order.

Structure (docs/architecture.md has the picture)::

    serve()
      nursery "connections"           owns every connection task
        accept loop per listener      (in its own cancel scope)
        ConnectionTask.run() ...
      pools fs / work                 CapacityLimiter + bounded queue each
      nursery "jobs"                  cache jobs (compression, digests): they
                                      belong to the caches, not to a request,
                                      and outlive the connections

Graceful shutdown (:meth:`Server.shutdown`, SIGINT/SIGTERM in the CLI):

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
   syscall are abandoned (logged with their count) and we return anyway.

A second :meth:`abort` (second signal) skips to step 4 immediately.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import math
import os
import socket as _stdsocket
import ssl
import time
from collections.abc import Sequence

import trio

from ..concurrency.blocking import Pool
from ..config import Config, listener_http2, parse_listen
from ..fs.filecache import FileCache
from ..fs.opener import RootOpener
from ..http.core import error_plan
from ..live.service import LiveReload
from ..observe.accesslog import AccessLog
from ..observe.histogram import Histogram
from ..observe.stats import Stats
from ..pipeline.content import ContentService
from ..pipeline.handler import Handler
from ..pipeline.hooks import NO_HOOKS
from ..site.service import load_site
from ..wire.h1 import Canned
from .activation import listeners_from_fds
from .connection import ConnectionTask
from .env import ConnectionEnv
from .h1head import RECV_SIZE
from .h2conn import H2Connection
from .order import ServeOrder
from .tls import make_ssl_context

__all__ = ["Server", "bind_public", "public_addresses"]

log = logging.getLogger("serverio")

_ACCEPT_RETRY_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS, errno.ECONNABORTED}
)
_ACCEPT_BURST = 64  # connections accepted per wake-up before yielding
_MAX_REJECTORS = 256  # concurrent 503 writers; beyond this, excess is just closed
# The over-limit answer: the pure layer's 503 (Retry-After, close, the
# common fields), serialised once; only its Date is per send.
_REJECT = Canned(error_plan(503, 0.0, close=True))


# The name trio would derive from Server._run_connection, given as a
# constant so that starting a connection task formats no string.
_CONNECTION_TASK = "serverio.net.server.Server._run_connection"
_ACCEPT_LOG_INTERVAL = 1.0  # seconds between two "accept failed" log lines at most
_OUT_OF_FDS = frozenset({errno.EMFILE, errno.ENFILE})


def _reject_at_once(sock: _stdsocket.socket | trio.socket.SocketType) -> None:
    """Past the rejector cap: still a 503, without a task or a linger.

    One non-blocking write (the response fits any empty socket buffer), then
    FIN; request bytes that already arrived are read first, so that close()
    sends FIN rather than RST (an RST can make the client drop the 503).
    ``sock`` must be non-blocking.
    """
    fd = sock.fileno()
    try:
        os.write(fd, _REJECT.at(time.time()))
        sock.shutdown(_stdsocket.SHUT_WR)
        for _ in range(4):
            if not os.read(fd, RECV_SIZE):
                break
    except OSError:  # BlockingIOError: nothing (more) to read; or the peer is gone
        pass


class Server:
    """A static file server for one directory.

    Use :meth:`serve` inside a nursery (``await nursery.start(server.serve)``)
    and :meth:`shutdown` to stop it gracefully.

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
        self.config = config if config.root else config.validate()
        self.stats = Stats()
        self.response_times = Histogram()
        # TLS when --certfile is set (the CLI builds the context first, so
        # a bad certificate is a one-line start-up error, not a traceback).
        self.ssl_context = ssl_context or make_ssl_context(self.config)
        self._listen_specs = listen_specs(self.config)
        protocols = {listener_http2(proto, self.config.http2) for *_, proto in self._listen_specs}
        # A TLS listener that differs from --http2 gets its own context (ALPN).
        self._h1_ssl_context = (
            make_ssl_context(dataclasses.replace(self.config, http2=False))
            if self.ssl_context is not None and self.config.http2 and False in protocols
            else None
        )
        self._h2_ssl_context = (
            make_ssl_context(dataclasses.replace(self.config, http2=True))
            if self.ssl_context is not None and not self.config.http2 and True in protocols
            else None
        )
        any_http2 = self.config.http2 or True in protocols
        self.access_log = access_log or AccessLog(
            "off" if config.quiet else config.access_log, path=self.config.access_log_file
        )
        self.fs = Pool("fs", self.config.fs_workers, self.config.fs_queue)
        self.files = FileCache(self.config.file_cache_size, self.config.small_file_size)
        self.work = Pool("work", self.config.work_workers, self.config.work_queue)
        self.listeners: list[trio.SocketListener] = list(listeners or [])
        self.connections: set[ConnectionTask] = set()
        self.abandoned_threads = 0
        self._opener: RootOpener | None = None
        self._shutdown = trio.Event()
        self._abort_event = trio.Event()  # wakes the lame-duck wait on abort()
        self._aborted = False
        self._conn_nursery: trio.Nursery | None = None
        self._idle = trio.Event()
        self._rejectors = 0
        self._spare_fd = -1  # opened by serve(): see _shed_with_spare
        self._accept_logged_at = -math.inf
        self._accept_unlogged = 0
        # The caches and the request pipeline; connections get the handler
        # and the shared sinks (env), never the server.
        self.content = ContentService(self.config, self.stats, self.work, lambda: self.opener)
        self.pools = [self.fs, self.work]
        self.live: LiveReload | None = None
        hooks = NO_HOOKS
        if self.config.watch:
            # Development mode: a watcher with a pool of its own (1 thread),
            # plugged into the pipeline's hooks (serverio.pipeline.hooks).
            watch = Pool("watch", 1, 1)
            self.pools.append(watch)
            self.live = LiveReload(self.config, watch, self.files, self.content)
            hooks = self.live.hooks(self.fs)
        self.handler = Handler(
            self.config,
            lambda: self.opener,
            fs=self.fs,
            files=self.files,
            content=self.content,
            hooks=hooks,
        )
        self.env = ConnectionEnv(
            self.config,
            self.handler,
            self.stats,
            self.access_log,
            self.response_times,
            http2=H2Connection if any_http2 else None,
            order=ServeOrder(self.connections),
        )
        # Site rules, compiled once; None (never consulted) when there are none.
        self.env.site = load_site(self.config, self.stats)
        site = self.env.site
        if site is not None:
            # The reserved paths go through the site's access rules.
            site.reserved_route = hooks.route
            # Their threads are waited for, then abandoned, like the others.
            self.pools += [site.auth_pool, site.page_pool]
            if site.rules.auth:
                # Access rules reach listed names and event paths too.
                self.content.visible = site.visible_entries
                if self.live is not None:
                    self.live.may_name = site.may_name

    # ------------------------------------------------------------ public

    @property
    def draining(self) -> bool:
        """Graceful shutdown has begun (connections see it through ``env``)."""
        return self.env.draining

    @property
    def opener(self) -> RootOpener:
        if self._opener is None:
            self._opener = RootOpener(
                self.config.root,
                follow_symlinks=self.config.follow_symlinks,
                hidden=self.config.hidden,
            )
        return self._opener

    def addresses(self) -> list[tuple[str, int]]:
        out = []
        for listener in self.listeners:
            name = listener.socket.getsockname()
            out.append((str(name[0]), int(name[1])))
        return out

    def shutdown(self) -> None:
        """Begin graceful shutdown (idempotent)."""
        self._shutdown.set()

    def abort(self) -> None:
        """Stop now: cancel every connection without draining."""
        self._aborted = True
        self.env.cut_fresh = True
        self._shutdown.set()
        self._abort_event.set()
        if self._conn_nursery is not None:
            self._conn_nursery.cancel_scope.cancel()

    def tls_of(self, listener: trio.SocketListener) -> ssl.SSLContext | None:
        """The TLS context of ``listener``'s connections (None: plaintext).

        Without ``--listen``/``--listen-tls`` every listener is TLS when
        ``--certfile`` is set.  With them, listeners are in the order of
        :func:`bind_public` (the ``--listen`` ones, then ``--listen-tls``)
        and only the latter are TLS.
        """
        cfg = self.config
        if not (cfg.listen or cfg.listen_tls):
            return self.ssl_context
        try:
            index = self.listeners.index(listener)
        except ValueError:
            return None
        if index < len(cfg.listen):
            return None
        # A listener whose protocol differs from --http2 has a context of
        # its own: ALPN offers h2 there or not.
        http2 = self.http2_of(listener)
        if http2 != cfg.http2:
            return self._h2_ssl_context if http2 else self._h1_ssl_context
        return self.ssl_context

    def http2_of(self, listener: trio.SocketListener) -> bool:
        """Whether ``listener`` speaks HTTP/2 (its ``/h1`` or ``/h2`` suffix,
        else ``--http2``); inherited or default listeners follow ``--http2``."""
        cfg = self.config
        specs = self._listen_specs
        try:
            index = self.listeners.index(listener)
        except ValueError:
            return cfg.http2
        if index >= len(specs):
            return cfg.http2
        return listener_http2(specs[index][2], cfg.http2)

    async def open_listeners(self) -> None:
        """Bind the configured addresses (unless listeners were given).

        With ``--fd`` the inherited sockets are used instead of binding.
        """
        if self.listeners:
            return
        if self.config.fds:
            self.listeners = listeners_from_fds(self.config.fds)
            return
        self.listeners = await bind_public(self.config)

    async def serve(
        self, *, task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until :meth:`shutdown`, then drain in order and return."""
        await self.open_listeners()
        _ = self.opener  # open the root once, before accepting anything
        self._spare_fd = _open_spare()
        try:
            site = self.env.site
            async with (
                self.handler.running(),
                site.running() if site is not None else contextlib.nullcontext(),
                trio.open_nursery() as conns,
            ):
                self._conn_nursery = conns
                if self.env.order is not None:
                    conns.start_soon(self.env.order.run)
                accept_scope = trio.CancelScope()
                conns.start_soon(self._accept_all, conns, accept_scope)
                task_status.started(self)
                await self._shutdown.wait()
                delay = self.config.shutdown_delay
                if delay > 0 and not self._aborted:
                    # 0. lame duck: refuse nothing yet, keep nothing open.
                    # Idle keep-alive connections are left open until the
                    # delay ends: closing one while a balancer picks it for
                    # a request loses that request (measured behind HAProxy,
                    # docs/deployment.md "Fleets"); any request on one now
                    # is answered with Connection: close.
                    self.env.draining = True
                    with trio.move_on_after(delay):
                        await self._abort_event.wait()
                    # What the kernel queued before the close is served too.
                    if not self._aborted:
                        for listener in self.listeners:
                            self._accept_backlog(listener, conns)
                else:
                    self.env.cut_fresh = True
                # 1. stop accepting.
                accept_scope.cancel()
                for listener in self.listeners:
                    await trio.aclose_forcefully(listener)
                deadline = trio.current_time() + self.config.shutdown_timeout
                if not self._aborted:
                    # 2. idle connections and live-reload event streams
                    # close now; 3. in-flight ones drain.
                    self.env.draining = True
                    for c in list(self.connections):
                        c.drain()
                    with trio.move_on_at(deadline):
                        while self.connections:
                            self._idle = trio.Event()
                            await self._idle.wait()
                # 4. cut whatever remains.
                conns.cancel_scope.cancel()
            # 5. wait for pool threads, then abandon the stuck ones.
            if not self._aborted:
                stuck = 0
                for pool in self.pools:
                    stuck += await pool.wait_idle(deadline)
            else:
                stuck = sum(pool.running for pool in self.pools)
            self.abandoned_threads = stuck
            if stuck:
                log.warning("abandoning %d worker thread(s) stuck in blocking calls", stuck)
        finally:
            self._conn_nursery = None
            if self._spare_fd >= 0:
                os.close(self._spare_fd)
                self._spare_fd = -1
            if self._opener is not None:
                if self.fs.running or self.work.running:
                    # Abandoned threads may still call openat2() on the root
                    # fd; closing it now could let the number be reused by an
                    # unrelated file while they run.  Keep it open: they fail
                    # or finish on the real root, and process exit closes it.
                    log.warning("keeping the root directory fd open for abandoned threads")
                else:
                    self._opener.close()
                self._opener = None

    # ------------------------------------------------------------ accept

    async def _accept_all(self, conns: trio.Nursery, scope: trio.CancelScope) -> None:
        with scope:
            async with trio.open_nursery() as acceptors:
                for listener in self.listeners:
                    acceptors.start_soon(self._accept_loop, listener, conns)

    async def _accept_loop(self, listener: trio.SocketListener, conns: trio.Nursery) -> None:
        """Accept until cancelled, draining the kernel's accept queue in bursts.

        ``SocketListener.accept()`` takes one connection per scheduling turn;
        with hundreds of busy connection tasks in each turn, a burst of new
        clients then waits in the backlog for seconds (we measured a p99 of
        1.2 s with 256 connections opening at once).  So we accept with a
        plain non-blocking ``accept()`` on the same fd until EAGAIN (at most
        ``_ACCEPT_BURST`` in a row), and only then wait for readability.
        """
        max_conns = self.config.max_connections
        tls = self.tls_of(listener)
        http2 = self.http2_of(listener)
        lsock = listener.socket
        # A stdlib view of the same fd (no dup): closing it is trio's job, so
        # we detach() instead of close().
        raw = _stdsocket.socket(lsock.family, lsock.type, lsock.proto, fileno=lsock.fileno())
        try:
            while True:
                for _ in range(_ACCEPT_BURST):
                    try:
                        sock, _addr = raw.accept()
                    except BlockingIOError:
                        break
                    except OSError as exc:
                        if exc.errno in _ACCEPT_RETRY_ERRNOS:
                            # Like trio.serve_listeners: out of fds is a
                            # condition to ride out, not a reason to stop.
                            self._log_accept_failure(exc.errno or 0)
                            if exc.errno in _OUT_OF_FDS:
                                shed = self._shed_with_spare(raw, tls is not None)
                                if shed:
                                    continue  # the next pending client, if any
                                if shed is not None:
                                    break  # nothing pending: wait for the next
                            await trio.sleep(0.1)
                            break
                        raise
                    self._admit(sock, tls, http2, conns, max_conns)
                else:
                    # A full burst: let the new tasks run before the next one.
                    await trio.lowlevel.checkpoint()
                    continue
                await trio.lowlevel.wait_readable(raw)
        finally:
            raw.detach()

    def _accept_backlog(self, listener: trio.SocketListener, conns: trio.Nursery) -> None:
        """Accept every connection already queued on ``listener`` (no wait):
        the end of a lame-duck period, just before the listener closes, so
        that a client the kernel already accepted is answered, not reset."""
        lsock = listener.socket
        raw = _stdsocket.socket(lsock.family, lsock.type, lsock.proto, fileno=lsock.fileno())
        tls = self.tls_of(listener)
        http2 = self.http2_of(listener)
        try:
            while True:
                try:
                    sock, _addr = raw.accept()
                except OSError:  # BlockingIOError: none left; EMFILE: give up
                    break
                self._admit(sock, tls, http2, conns, self.config.max_connections)
        finally:
            raw.detach()

    def _admit(
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
        self.stats.accepted += 1
        open_conns = len(self.connections)
        if self.live is not None:
            open_conns -= len(self.live.slots)
        if tls is None and open_conns < max_conns:
            # Plaintext: the connection makes its SocketStream (and sets the
            # TCP options) only if it needs them.
            conn = ConnectionTask(self.env, tsock, http2=http2)
            self.connections.add(conn)
            conns.start_soon(self._run_connection, conn, name=_CONNECTION_TASK)
            return
        stream = trio.SocketStream(tsock)
        if open_conns >= max_conns:
            self.stats.rejected += 1
            if tls is not None:
                # (A plaintext 503 means nothing to a TLS client,
                # and a handshake is the work we are shedding.)
                stream.socket.close()
            elif self._rejectors >= _MAX_REJECTORS:
                _reject_at_once(stream.socket)
                stream.socket.close()
            else:
                self._rejectors += 1
                conns.start_soon(self._reject, stream)
            return
        assert tls is not None
        conn = self._tls_connection(stream, tls, http2)
        self.connections.add(conn)
        conns.start_soon(self._run_connection, conn, name=_CONNECTION_TASK)

    def _log_accept_failure(self, err: int) -> None:
        """Log an accept failure at most once per second, with a count of
        the ones not logged since (EMFILE can come thousands of times a
        second while clients keep connecting)."""
        now = trio.current_time()
        if now - self._accept_logged_at < _ACCEPT_LOG_INTERVAL:
            self._accept_unlogged += 1
            return
        more = self._accept_unlogged
        self._accept_logged_at = now
        self._accept_unlogged = 0
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
            self.stats.accepted += 1
            self.stats.rejected += 1
            try:
                if not tls:
                    sock.setblocking(False)
                    _reject_at_once(sock)
            finally:
                sock.close()
            shed = True
        self._spare_fd = _open_spare()
        return shed

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
        wrapped = trio.SSLStream(stream, tls, server_side=True, https_compatible=True)
        return ConnectionTask(self.env, wrapped, client, http2=http2)

    async def _run_connection(self, conn: ConnectionTask) -> None:
        try:
            await conn.run()
        except Exception:
            # A bug in one connection must not take every other connection
            # down with it (a nursery would cancel its siblings).  Log it
            # with its traceback and count it; the client sees a closed
            # connection.  Cancellation is not an Exception and passes.
            self.stats.internal_errors += 1
            log.exception("internal error in a connection task (connection closed)")
        finally:
            self.connections.discard(conn)
            if not self.connections:
                self._idle.set()

    async def _reject(self, stream: trio.SocketStream) -> None:
        """503 at once, then a bounded linger so the client can read it."""
        try:
            with trio.move_on_after(1.0):
                await stream.send_all(_REJECT.at(time.time()))
                await stream.send_eof()
                for _ in range(16):  # drain a little so close() does not RST
                    if not await stream.receive_some(RECV_SIZE):
                        break
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self._rejectors -= 1
            await trio.aclose_forcefully(stream)


def _open_spare() -> int:
    """The spare descriptor for 503s at EMFILE; -1 if none can be opened."""
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return -1


def listen_options(*, reuse_port: bool = False) -> list[tuple[int, int]]:
    """The SOL_SOCKET options a listening socket gets, looked up now (not at
    import: Windows lacks SO_REUSEPORT).

    POSIX: SO_REUSEADDR, so a restart can bind while old connections sit in
    TIME_WAIT.  Windows: SO_EXCLUSIVEADDRUSE instead, because SO_REUSEADDR
    there lets another process bind the very port we listen on (and
    Windows never blocks a rebind on TIME_WAIT).
    """
    exclusive: int | None = getattr(_stdsocket, "SO_EXCLUSIVEADDRUSE", None)
    if exclusive is not None:
        options = [(exclusive, 1)]
    else:
        options = [(_stdsocket.SO_REUSEADDR, 1)]
    if reuse_port:
        reuseport: int | None = getattr(_stdsocket, "SO_REUSEPORT", None)
        if reuseport is None:
            raise OSError(errno.ENOPROTOOPT, "SO_REUSEPORT is not available")
        options.append((reuseport, 1))
    return options


async def bind_public(cfg: Config, *, reuse_port: bool = False) -> list[trio.SocketListener]:
    """The public listeners of ``cfg``: ``--listen`` addresses, then
    ``--listen-tls`` ones (the order :meth:`Server.tls_of` relies on), or
    the one ``-b``/port address.  Raises OSError naming nothing: the caller
    reports which address (:func:`public_addresses`)."""
    out: list[trio.SocketListener] = []
    try:
        for host, port in public_addresses(cfg):
            out.append(await _bind(host, port, reuse_port=reuse_port))
    except BaseException:
        for listener in out:
            listener.socket.close()
        raise
    return out


def listen_specs(cfg: Config) -> list[tuple[str, int, str | None]]:
    """(host, port, protocol suffix) of every ``--listen``/``--listen-tls``
    address, in :func:`bind_public` order."""
    specs = [parse_listen(a, "--listen") for a in cfg.listen]
    return specs + [parse_listen(a, "--listen-tls") for a in cfg.listen_tls]


def public_addresses(cfg: Config) -> list[tuple[str, int]]:
    """(host, port) of every public listener, in :func:`bind_public` order."""
    if cfg.listen or cfg.listen_tls:
        return [spec[:2] for spec in listen_specs(cfg)]
    return [(cfg.host, cfg.port)]


async def _bind(host: str, port: int, *, reuse_port: bool = False) -> trio.SocketListener:
    """Bind one listening socket (IPv4 or IPv6 literal, or a host name).

    ``reuse_port``: SO_REUSEPORT, so that each ``--workers`` process has its
    own listening socket on the same port and the kernel balances between
    them.
    """
    infos = await trio.socket.getaddrinfo(
        host, port, type=_stdsocket.SOCK_STREAM, flags=_stdsocket.AI_PASSIVE
    )
    if not infos:  # pragma: no cover - getaddrinfo raises instead
        raise OSError(f"cannot resolve {host!r}")
    family, type_, proto, _, sockaddr = infos[0]
    sock = trio.socket.socket(family, type_, proto)
    try:
        for option, value in listen_options(reuse_port=reuse_port):
            sock.setsockopt(_stdsocket.SOL_SOCKET, option, value)
        if family == _stdsocket.AF_INET6:
            # Like http.server: "::" also accepts IPv4 (dual stack).
            sock.setsockopt(_stdsocket.IPPROTO_IPV6, _stdsocket.IPV6_V6ONLY, 0)
        await sock.bind(sockaddr)
        sock.listen(4096)  # the kernel caps this at net.core.somaxconn
    except BaseException:
        sock.close()
        raise
    return trio.SocketListener(sock)
