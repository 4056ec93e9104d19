"""Live reload (``--watch``): the watcher task, the broadcast, the event
streams, and the handler that injects the page script.

Task tree (docs/cancellation.md "Live reload")::

    Server.serve()
      LiveHandler.running()
        Handler.running()               cache jobs (as without --watch)
        LiveReload.running()            nursery "live"
          LiveReload._watch             one task: inotify fd (no thread) or
                                        polling scans (watch pool, 1 thread)
      nursery "connections"
        ConnectionTask ... /events      one per browser: the connection task
                                        itself streams (LiveReload.serve_client)
        H2Connection stream /events     over HTTP/2: the stream's task in the
                                        connection's nursery streams
                                        (H2Connection._serve_events)

The watcher debounces raw events (:class:`~serverio.concurrency.broadcast.Debouncer`),
clears every cache that could serve old bytes, and publishes one message
per batch to the :class:`~serverio.concurrency.broadcast.Broadcast`; each
event stream reads its own bounded queue.  Nothing here waits for a slow
client.

Shutdown order: graceful shutdown closes the event streams at once, with
the idle connections (step 2 of :class:`serverio.net.server.Server`; an
HTTP/2 one ends with END_STREAM before its connection's GOAWAY); the
connection nursery ends; then the live nursery is cancelled (the watcher
stops, its inotify descriptor is closed; a polling scan in flight is
abandoned with the watch pool's other threads in step 5); then the cache
jobs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Final

import trio

from ..concurrency.blocking import Pool, PoolSaturated, run_blocking
from ..concurrency.broadcast import MODIFIED, Broadcast, Debouncer, StreamSlots
from ..config import Config
from ..fs.filecache import FileCache
from ..fs.opener import RootOpener
from ..fs.reads import read_all
from ..fs.watch import (
    InotifyTree,
    inotify_available,
    poll_diff,
    poll_scan,
)
from ..http.codecs import compress_bytes
from ..http.core import FileSpan, Plan, RequestFacts, error_plan, without_conditions
from ..http.mime import guess_type
from ..model import Prepared
from ..pipeline.content import ContentService, OwnedFd
from ..pipeline.handler import Deferred, Handler
from .protocol import (
    accepts_html,
    decide_injected,
    error_page,
    header,
    inject_html,
    injected_coding,
    injected_precondition,
    is_html,
)
from .script import (
    SSE_KEEPALIVE,
    SSE_PREAMBLE,
    event_path,
    live_assets,
    sse_css,
    sse_reload,
)

__all__ = ["LiveHandler", "LiveReload"]

log = logging.getLogger("serverio")

# One editor save is a burst of events within a few milliseconds; a batch
# goes out this long after its last event (watchfiles' default of 1.6 s
# would miss the 500 ms save-to-reload target), at most DEBOUNCE_MAX after
# its first.
DEBOUNCE_QUIET: Final = 0.05
DEBOUNCE_MAX: Final = 0.5
POLL_INTERVAL: Final = 0.5  # seconds between two polling scans
SSE_QUEUE: Final = 16  # messages queued per event stream before it drops to "reload"
SSE_KEEPALIVE_INTERVAL: Final = 15.0  # a comment on an idle stream this often
INJECT_MAX: Final = 8 * 1024 * 1024  # larger HTML is served as it is
# Appended to the coding in the compression cache's key of an injected page
# (the file's identity is the rest of the key): never a file coding's name.
INJECTED_SUFFIX: Final = "+livereload"


class LiveReload:
    """The watcher, the broadcast and the event streams of one server.

    ``pool`` is the watch pool (1 worker): directory scans for inotify
    watches, or the polling scans.  The caches are cleared on every change.
    """

    def __init__(
        self, config: Config, pool: Pool, files: FileCache, content: ContentService
    ) -> None:
        self.config = config
        self.pool = pool
        self.files = files
        self.content = content
        self.assets = live_assets(config.watch_prefix)
        self.broadcast = Broadcast(SSE_QUEUE, sse_reload())
        # Event streams have their own budget, outside --max-connections
        # (the server's admission leaves their connections out).
        self.slots = StreamSlots(config.watch_max_streams)
        self.backend = ""  # "inotify" or "poll", once watching
        self.batches = 0  # change batches published
        self.poll_interval = POLL_INTERVAL
        # May an event name this path (decoded, "/a/b.css")?  The site's
        # access rules say no for a protected one (Site.may_name): every
        # stream gets the same events, so such a change is a plain reload.
        self.may_name: Callable[[str], bool] = _any_path

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The live nursery: the watcher runs (its watches are in place)
        for the duration of the block.

        Cancellation handling: leaving the block cancels the watcher; see
        :meth:`_watch`.
        """
        async with trio.open_nursery() as nursery:
            await nursery.start(self._watch)
            try:
                yield
            finally:
                nursery.cancel_scope.cancel()

    # ------------------------------------------------------------ watching

    async def _watch(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Cancellation handling: cancelled at a wait (the descriptor, a
        sleep) nothing is lost; cancelled during a scan, the thread is
        abandoned (it closes the inotify descriptor itself if it still
        uses it, :meth:`InotifyTree.close`)."""
        cfg = self.config
        tree: InotifyTree | None = None
        if not cfg.watch_poll and inotify_available():
            try:
                tree = InotifyTree(cfg.root, hidden=cfg.hidden)
            except OSError as exc:
                log.warning("inotify unavailable (%s): polling for changes", exc.strerror)
        if tree is None:
            await self._poll(task_status)
            return
        try:
            added, _ = await run_blocking(self.pool, tree.scan, "")
            tree.adopt(added)
            if tree.full:
                log.warning("--watch: more than %d directories; some are not watched", len(added))
            self.backend = "inotify"
            task_status.started()
            await self._inotify(tree)
        finally:
            if tree.fd >= 0:
                trio.lowlevel.notify_closing(tree.fd)
            tree.close()

    async def _inotify(self, tree: InotifyTree) -> None:
        debounce = Debouncer(DEBOUNCE_QUIET, DEBOUNCE_MAX)
        while True:
            with trio.move_on_at(debounce.deadline()):
                await trio.lowlevel.wait_readable(tree.fd)
            changes, new_dirs, overflow = tree.read()
            now = trio.current_time()
            if overflow:
                changes.append(("", MODIFIED))  # anything may have changed: reload
            for d in new_dirs:
                try:
                    added, found = await run_blocking(self.pool, tree.scan, d)
                except PoolSaturated:  # pragma: no cover - this task is the pool's only user
                    continue
                tree.adopt(added)
                changes.extend((f, "created") for f in found)
            debounce.add(changes, now)
            self._flush(debounce)

    async def _poll(self, task_status: trio.TaskStatus[None]) -> None:
        cfg = self.config
        snapshot, cut = await run_blocking(self.pool, poll_scan, cfg.root, cfg.hidden)
        if cut:
            log.warning("--watch: polling scans stop at %d entries", len(snapshot))
        self.backend = "poll"
        task_status.started()
        debounce = Debouncer(DEBOUNCE_QUIET, DEBOUNCE_MAX)
        next_scan = trio.current_time() + self.poll_interval
        while True:
            with trio.move_on_at(min(next_scan, debounce.deadline())):
                await trio.sleep_forever()
            if trio.current_time() >= next_scan:
                new, _ = await run_blocking(self.pool, poll_scan, cfg.root, cfg.hidden)
                debounce.add(poll_diff(snapshot, new), trio.current_time())
                snapshot = new
                next_scan = trio.current_time() + self.poll_interval
            self._flush(debounce)

    def _flush(self, debounce: Debouncer) -> None:
        batch = debounce.take(trio.current_time())
        if batch:
            self.publish(batch)

    def publish(self, batch: dict[str, str]) -> None:
        """One debounced batch: clear the caches, then tell every stream.

        Only stylesheets changed (none deleted): a ``css`` event per file,
        which pages swap in place; anything else: ``reload``.  The paths
        are visible ones (the sources drop dot names) and none that an
        auth rule protects (:attr:`may_name`; such a batch is a reload),
        so an event never names a file a client could not request.
        """
        self.invalidate()
        self.batches += 1
        css = sorted(p for p, kind in batch.items() if kind == "changed" and p.endswith(".css"))
        may_name = self.may_name
        if css and len(css) == len(batch) and all(may_name("/" + p) for p in css):
            self.broadcast.publish([sse_css(event_path(p)) for p in css])
        else:
            self.broadcast.publish([sse_reload()])

    def invalidate(self) -> None:
        """Forget every cached byte: warm files (with their memoised
        responses and pooled validity window), compressed bodies, digests,
        rendered listings."""
        self.files.clear()
        self.content.compressed.clear()
        self.content.digests.clear()
        self.content.listings.clear()

    # ------------------------------------------------------------ streams

    def busy_plan(self, now: float) -> Plan:
        """The answer to an event stream past ``--watch-max-streams``: 503
        with ``Retry-After`` (:func:`serverio.http.core.error_plan`).  An
        EventSource fails for good on a non-200 answer; the page script
        opens a new one with its back-off (0.5 s doubling to 10 s)."""
        return error_plan(503, now)

    async def serve_client(self, send: Callable[[bytes], Awaitable[None]], head: bytes) -> None:
        """Stream events to one client until cancelled (client gone, or
        shutdown) or until ``send`` fails.

        Cancellation handling: the subscription is dropped in every case;
        queued messages die with it.
        """
        sub = self.broadcast.subscribe()
        try:
            await send(head + SSE_PREAMBLE)
            while True:
                data = await self.broadcast.next(sub, SSE_KEEPALIVE_INTERVAL)
                await send(data or SSE_KEEPALIVE)
        finally:
            self.broadcast.unsubscribe(sub)


def _any_path(path: str) -> bool:
    return True


def _may_be_html(req: RequestFacts) -> bool:
    """Could this GET/HEAD be answered with HTML (or an error page a
    browser shows)?  Directories (index, listing), ``.html`` names, and
    extension-less names (SPA routes, pages a browser navigates to)."""
    target = req.target
    if target.slash or not target.segments:
        return True
    last = target.segments[-1]
    return "." not in last or is_html(guess_type(last).encode("latin-1"))


def _read_owned(owned: OwnedFd, size: int) -> bytes | None:
    fd = owned.claim()
    if fd < 0:
        return None
    try:
        return read_all(fd, size)
    finally:
        os.close(fd)


class LiveHandler(Handler):
    """The request handler of ``--watch`` mode: HTML gets the page script.

    A request that may be answered with HTML is resolved as a plain GET
    (no validators, no Range, identity), so that the handler gets the
    whole base representation; an HTML 200 becomes the injected variant
    (:func:`serverio.live.protocol.decide_injected`, which evaluates the
    request's own validators against the injected ETag); an error for a
    request that accepts HTML becomes a small page with the script; any
    other answer is resolved again with the request as sent (non-HTML is
    never modified).  Every other request takes the normal path
    untouched.  Injected HTML is content-coded on the fly as the file
    would be (:func:`serverio.live.protocol.injected_coding`; never from
    a precompressed sidecar, which lacks the script), and sent without
    Repr-Digest.
    """

    def __init__(
        self,
        config: Config,
        opener: Callable[[], RootOpener],
        *,
        fs: Pool,
        files: FileCache,
        content: ContentService,
        live: LiveReload,
    ) -> None:
        super().__init__(config, opener, fs=fs, files=files, content=content)
        self.live = live

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The cache jobs and the live nursery; the watcher stops first."""
        async with super().running(), self.live.running():
            yield

    def respond_now(self, req: RequestFacts, now: float) -> Prepared | Deferred:
        if req.method in (b"GET", b"HEAD") and _may_be_html(req):

            async def live(_: Prepared | None) -> Prepared:
                return await self._live_respond(req, now)

            return Deferred(live)
        return super().respond_now(req, now)

    async def _full(self, req: RequestFacts, now: float) -> Prepared:
        answer = super().respond_now(req, now)
        if isinstance(answer, Prepared):
            return answer
        try:
            return await answer.run()
        finally:
            answer.close()

    async def _live_respond(self, req: RequestFacts, now: float) -> Prepared:
        # The whole base representation: no condition (the client's own are
        # evaluated against the variant), identity, no digest.
        neutral = replace(
            without_conditions(req), method=b"GET", accept_encoding=None, want_repr_digest=None
        )
        prepared = await self._full(neutral, now)
        assets = self.live.assets
        keep = False
        try:
            plan = prepared.plan
            ctype = header(plan, b"content-type") or b""
            if plan.status == 200 and is_html(ctype) and header(plan, b"content-encoding") is None:
                body = await self._body(prepared)
                injected = inject_html(body, assets.tag) if body is not None else None
                if injected is not None:
                    return await self._injected(req, prepared, injected, now)
            elif plan.status >= 400 and ctype.startswith(b"text/plain") and accepts_html(req):
                if req.method == b"HEAD":
                    plan = replace(plan, send_body=False)
                return Prepared(error_page(plan, assets))
            if neutral == req:
                keep = True
                return prepared
        finally:
            if not keep:
                prepared.close()
        return await self._full(req, now)

    async def _injected(
        self, req: RequestFacts, prepared: Prepared, injected: bytes, now: float
    ) -> Prepared:
        """The injected variant, content-coded when the request negotiates
        a coding: the 304/412 is decided first (no compression for it),
        then the coded bytes come from the compression cache or one job in
        the work pool for all requesters; a saturated pool serves identity
        (RFC 9110 §12.5.3), as for a file."""
        plan = prepared.plan
        facts = prepared.facts
        mtime = facts.mtime if facts is not None else None
        assets = self.live.assets
        stats = self.content.stats.content
        coding = injected_coding(req, plan, len(injected), self.config)
        body = injected
        if coding:
            pre = injected_precondition(req, plan, mtime, now, coding)
            if pre is not None:
                return Prepared(pre, served=prepared.served)
            coded = await self._compress(prepared, coding, injected)
            if coded is None:
                stats.compress_fallbacks += 1
                coding = ""
            else:
                stats.compressed_responses += 1
                body = coded
        return Prepared(
            decide_injected(req, plan, body, mtime, now, assets, coding=coding),
            served=prepared.served,
        )

    async def _compress(self, prepared: Prepared, coding: str, injected: bytes) -> bytes | None:
        """``injected`` in ``coding``: shared with the file's compressed
        bodies (same cache, same bound, cleared on every change), keyed by
        the file's identity and a coding name no file coding has."""
        work = self.content.work

        async def job() -> bytes | None:
            return await run_blocking(work, compress_bytes, coding, injected)

        if prepared.facts is None:
            try:
                return await job()
            except PoolSaturated:
                return None
        key = (prepared.facts.key, coding + INJECTED_SUFFIX)
        return await self.content.compressed.get_or_run(key, lambda: job)

    async def _body(self, prepared: Prepared) -> bytes | None:
        """The whole body of a 200, read if it is still in the file."""
        body = prepared.plan.body
        if all(isinstance(p, bytes) for p in body):
            return b"".join(p for p in body if isinstance(p, bytes))
        size = sum(len(p) for p in body)
        if size > INJECT_MAX or prepared.fd < 0:
            return None
        if not (len(body) == 1 and isinstance(body[0], FileSpan) and body[0].offset == 0):
            return None
        # The read gets its own descriptor: if this request is cancelled,
        # the abandoned thread closes it, never the requester's.
        owned = OwnedFd(os.dup(prepared.fd))
        try:
            return await run_blocking(self.fs, _read_owned, owned, size)
        except PoolSaturated:
            return None
        finally:
            owned.release()
