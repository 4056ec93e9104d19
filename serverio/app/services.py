"""The services a connection needs, built once per server.

:class:`Services` is the server's part that owns what connections use and
outlive (docs/architecture.md, "The server"): the counters and sinks
(:class:`~serverio.observe.stats.Stats`, the response-time histogram, the
access log), the blocking pools (``fs``, ``work``, and the watcher's and
the site's), the caches (the warm-file cache, the content service), the
request handler (with live reload under ``--watch``), the site rules, the
contained root (:class:`~serverio.fs.opener.RootOpener`, opened once) and
the :class:`~serverio.net.env.ConnectionEnv` every connection is handed:
a connection sees these, never the server.

Cancellation handling: building the services does no I/O and holds no
descriptor; the root is opened on the first :attr:`Services.opener` and
closed by :meth:`Services.close_root`, which keeps it open while an
abandoned pool thread may still use it.  The pools' threads are waited
for, then abandoned, by the lifecycle (step 5).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING

import trio

from ..concurrency.blocking import Pool
from ..config import Config, wants_site_rules
from ..fs.filecache import FileCache
from ..fs.mounts import LazyRoot
from ..fs.opener import ContainedRoot
from ..http.core import RequestFacts
from ..http.listing import Entry, PageRights
from ..net.connection import ConnectionTask
from ..net.env import ConnectionEnv, Switched
from ..net.order import ServeOrder
from ..observe.accesslog import AccessLog
from ..observe.histogram import Histogram
from ..observe.logpipe import LogPipe
from ..observe.stats import Stats
from ..pipeline.content import ContentService
from ..pipeline.handler import Handler
from ..pipeline.hooks import NO_HOOKS, Hooks
from ..wire.h1 import keep_spellings
from .pagewrites import Offer, offered, page_moves, with_share

if TYPE_CHECKING:
    from ..dav.service import DavService
    from ..live.service import LiveReload
    from ..proxy.service import ProxyService
    from ..signing import Signer
    from ..site.service import Site
    from ..upload.service import Uploads

# Start-up (docs/performance.md "Start-up"): each optional feature (live
# reload, uploads, WebDAV, archives, the proxy, the site rules, HTTP/2) is
# imported where its option turns it on, so a plain static start imports
# none of them; HTTP/2 on the first connection that speaks it.

__all__ = ["Services"]

log = logging.getLogger("serverio")


class Services:
    """What every connection of one server shares, and what owns it."""

    def __init__(
        self,
        config: Config,
        access_log: AccessLog | None,
        connections: set[ConnectionTask],
        *,
        http2: bool,
    ) -> None:
        self.config = config
        self.stats = Stats()
        self.response_times = Histogram()
        self.access_log = access_log or AccessLog(
            "off" if config.log.quiet else config.log.access_log, path=config.log.access_log_file
        )
        # The log pipes (serverio.observe.logpipe): the access log's, and
        # the one for messages on stderr (warnings, the draining line),
        # shared when the access log goes to stderr too (one order, one
        # writer).  Their drops are counted with the other counters.
        log_pipe = self.access_log.pipe
        log_pipe.counts = self.stats.log
        self.messages = (
            log_pipe if log_pipe.on_stderr else LogPipe(name="stderr", counts=self.stats.log)
        )
        self.fs = Pool("fs", config.pools.fs_workers, config.pools.fs_queue)
        self.files = FileCache(
            config.files.file_cache_size,
            config.files.small_file_size,
            config.files.file_meta_entries,
        )
        self.work = Pool("work", config.pools.work_workers, config.pools.work_queue)
        # The contained root, opened on first use (one RootOpener, or one
        # per mount: serverio.fs.mounts); every feature gets this callable.
        self._root = LazyRoot(config)
        self._signer: Signer | None = None
        # The caches and the request pipeline; connections get the handler
        # and the shared sinks (env), never the server.
        self.content = ContentService(config, self.stats, self.work, self._root)
        self.pools = [self.fs, self.work]
        self.live: LiveReload | None = None
        # The site rules (None: none configured); connections see them
        # through env.site, as the pipeline names them.
        self.site: Site | None = None
        self.proxy: ProxyService | None = None
        self.handler = self._handler()
        self.env = ConnectionEnv(
            config,
            self.handler,
            self.stats,
            self.access_log,
            self.response_times,
            http2=_h2_connection if http2 else None,
            order=ServeOrder(connections),
        )
        self._site()

    def _handler(self) -> Handler:
        config = self.config
        self.hooks: Hooks = NO_HOOKS
        if config.live.watch:
            from ..live.service import LiveReload

            # Development mode: a watcher with a pool of its own (1 thread),
            # plugged into the pipeline's hooks (serverio.pipeline.hooks).
            watch = Pool("watch", 1, 1)
            self.pools.append(watch)
            self.live = LiveReload(config, watch, self.files, self.content)
            self.hooks = self.live.hooks(self.fs)
        self.uploads: Uploads | None = None
        self.dav: DavService | None = None
        if config.uploads.upload:
            from ..upload.service import Uploads, allow_writes

            # --upload: the write step, with a pool of its own.
            self.uploads = Uploads(config, self.stats, self._root, self.files)
            self.pools.append(self.uploads.pool)
            # The listing shows the write controls (without site rules the
            # whole root is writable; _site() puts the access hook here).
            self.content.rights = offered(False, None)
            self.hooks = dataclasses.replace(
                self.hooks,
                write=self.uploads.write,
                allow=allow_writes,
                running=_both(self.hooks.running, self.uploads.running),
            )
            if config.uploads.webdav:
                self._webdav(config, self.uploads)
            else:
                # The page's rename, move and folder delete (serverio.app.pagewrites).
                self.hooks = page_moves(config, self._root, self.files, self.uploads, self.hooks)
            self._resumable(config, self.uploads)
        if config.content.archives:
            from ..archive.service import Archives

            # Folder archives: the listing's other form, read in the fs pool.
            archives = Archives(config, self.fs, self.content, self._root)
            self.hooks = dataclasses.replace(self.hooks, listing=archives)
        if config.proxy.enabled:
            from ..proxy.service import ProxyService

            # The reverse proxy (serverio.proxy), on the pipeline's proxy hook.
            self.proxy = ProxyService(config, self.stats.proxy)
            self.hooks = dataclasses.replace(self.hooks, proxy=self.proxy)
        return Handler(
            config,
            self._root,
            fs=self.fs,
            files=self.files,
            content=self.content,
            hooks=self.hooks,
        )

    def _resumable(self, config: Config, uploads: Uploads) -> None:
        """Resumable uploads (the IETF draft and tus 1.0; serverio.resumable),
        a write stage ahead of the write step: its PATCH, the HEAD, DELETE
        and OPTIONS of its upload resources, an IETF PUT with
        Upload-Complete, a tus POST; every other write goes to the write
        step (a request without its marks never calls into it).  Its
        upload URLs are signed (Services.signer); its sweeper of expired
        uploads runs with the handler."""
        from ..resumable.service import Resumable

        hooks = self.hooks
        resumable = Resumable(config, uploads, self.signer)
        self.hooks = dataclasses.replace(
            hooks,
            write_ahead=(*hooks.write_ahead, resumable.route()),
            running=_both(hooks.running, resumable.running),
        )

    def _webdav(self, config: Config, uploads: Uploads) -> None:
        """``--webdav`` (with ``--upload``'s step): the DAV hooks."""
        from ..dav.lockguard import TableLocks, new_token
        from ..dav.locks import LockTable
        from ..dav.service import DAV_METHODS, PREFIX_METHODS, DavService

        # --webdav: the DAV step answers its methods, PUT and DELETE
        # included (a file's through the uploads' step); class 2: the
        # lock table of this process (serverio.dav.lockguard).
        pol = config.uploads
        table = LockTable(
            max_locks=pol.webdav_max_locks,
            timeout_max=pol.webdav_lock_timeout_max,
            tokens=new_token,
            per_client=pol.webdav_max_locks_per_client,
            per_resource=pol.webdav_max_locks_per_resource,
            anonymous_timeout_max=pol.webdav_anonymous_lock_timeout_max,
        )
        locks = TableLocks(table)
        self.dav = dav = DavService(config, self._root, self.files, uploads, locks)
        if pol.webdav_prefix is None:
            self.hooks = dataclasses.replace(
                self.hooks, write=dav.write, write_methods=DAV_METHODS, allow=dav.allow
            )
            # No upload form with --webdav: its POST is not one of the
            # DAV methods, so WebDAV's locks would not guard it.  The rows'
            # actions are DAV's MOVE and DELETE.
            self.content.rights = offered(True, None)
        else:
            # --webdav-prefix: the DAV methods under it, the uploads'
            # (and their form) elsewhere (DavService.takes).
            self.hooks = dataclasses.replace(
                self.hooks,
                write=dav.write,
                write_methods=PREFIX_METHODS,
                write_takes=dav.takes,
                allow=dav.allow,
            )
            self.content.rights = offered(True, dav.at_dav)

    def _site(self) -> None:
        """Site rules, compiled once; ``env.site`` stays None (never
        consulted) when there are none."""
        if not wants_site_rules(self.config):
            return  # none configured: not even imported
        from ..site.service import load_site

        self.site = self.env.site = site = load_site(self.config, self.stats)
        if site is None:
            return
        # The names -H and [[headers]] set go out over HTTP/1.1 as spelled.
        given = [line.partition(":")[0].strip() for line in self.config.site.headers]
        given += [name for _, sets, _ in self.config.site.header_rules for name, _ in sets]
        keep_spellings(given)
        # The reserved paths go through the site's access rules.
        site.reserved_route = self.hooks.route
        if self.hooks.allow is not None:
            site.allow = self.hooks.allow  # the write feature's methods in Allow
        users = site.rules.auth or site.rules.users is not None
        if users or self.config.users.trusted_user_header is not None:
            from ..login.service import Login

            # Users exist: the login page, sessions, the trusted header and
            # share links (serverio.login), signed with the server's secret.
            from ..login.stage import LoginStage

            site.login = login = Login(self.config, site, self.signer)
            # Its stage first in the list (serverio.pipeline.stages).
            hooks = self.handler.hooks
            hooks = dataclasses.replace(hooks, first=(*hooks.first, LoginStage(login, login.reads)))
            self.handler.hooks = self.hooks = hooks
            self.content.account = bool(users)  # the listings' account corner
        if self.proxy is not None:
            site.proxied = self.proxy.match  # no core 405/404 for a proxied path
        # Their threads are waited for, then abandoned, like the others.
        self.pools += [site.auth_pool, site.page_pool]
        offer = self.content.rights
        if site.login is not None:
            offer = with_share(offer)  # the login feature's share links, from the page
        rules = site.rules
        if offer is not None and (rules.auth or rules.access or rules.writable or site.login):
            # Each control only where the access hook allows its right
            # (rules that decide nothing of it leave the offer as it is).
            self.content.rights = _asked(site, offer)
        if site.rules.auth or site.rules.access:
            # Access rules reach listed names and event paths too.
            self.content.visible = site.visible_entries
            if self.dav is not None:
                self.dav.visible = site.visible_entries  # PROPFIND's members too
            if self.live is not None:
                self.live.may_name = site.may_name

    @property
    def opener(self) -> ContainedRoot:
        """The contained root, opened on first use (``serve`` opens it
        before accepting anything)."""
        return self._root()

    @property
    def signer(self) -> Signer:
        """The server's token signer (serverio.signing), made on first use
        from ``--secret-file`` (serverio.secret): a feature that signs
        links, sessions or upload URLs asks for it while the server is
        assembled, before anything is served (the read is a start-up read)."""
        if self._signer is None:
            from ..secret import resolve_secret
            from ..signing import Signer

            self._signer = Signer(resolve_secret(self.config.users.secret_file))
        return self._signer

    @asynccontextmanager
    async def logging(self) -> AsyncIterator[None]:
        """The log pipes' writer tasks while the body runs; then each is
        flushed (bounded: :data:`~serverio.observe.logpipe.FLUSH_SECONDS`)
        and stopped.

        Cancellation handling: the writers are this context's tasks; a
        write stuck in the kernel when the flush runs out of time is
        abandoned (docs/cancellation.md, "Graceful shutdown order").
        """
        async with self.access_log.pipe.running(), self.messages.running():
            yield

    def close_root(self) -> None:
        """Close the root descriptor, unless an abandoned thread may still
        use it."""
        opened = self._root.opened
        if opened is None:
            return
        writer = self.uploads.pool.running if self.uploads is not None else 0
        if self.fs.running or self.work.running or writer:
            # Abandoned threads may still call openat2() on the root
            # fd; closing it now could let the number be reused by an
            # unrelated file while they run.  Keep it open: they fail
            # or finish on the real root, and process exit closes it.
            log.warning("keeping the root directory fd open for abandoned threads")
        else:
            opened.close()
        self._root.forget()
        self.handler.forget_root()


def _h2_connection(
    env: ConnectionEnv, stream: trio.abc.Stream, client: Callable[[], str], initial: bytes
) -> Switched:
    """The HTTP/2 side of a connection that speaks it (a SwitchFactory);
    serverio.net.h2conn and h2 are imported by the first one."""
    from ..net.h2conn import H2Connection

    return H2Connection(env, stream, client, initial)


Running = Callable[[], AbstractAsyncContextManager[None]]


def _both(first: Running | None, second: Running) -> Running:
    """One ``running`` hook for two features' tasks (live reload's
    watcher, the uploads' start-up sweep): entered in order, left in
    reverse."""
    if first is None:
        return second

    @asynccontextmanager
    async def running() -> AsyncIterator[None]:
        async with first(), second():
            yield

    return running


def _asked(site: Site, offer: Offer) -> Offer:
    """The page's rights: what the write features ``offer``, each where
    the site's access hook allows it (serverio.site.pagerights)."""
    from ..site.pagerights import page_rights

    def rights(req: RequestFacts, entries: list[Entry]) -> PageRights:
        return page_rights(site, req, entries, offer(req, entries))

    return rights
