"""Live reload (``--watch``): the watcher task, the broadcast, the event
streams, and the hooks that plug them into the pipeline.

:meth:`LiveReload.hooks` is everything the rest of serverio sees of live
reload (:mod:`serverio.pipeline.hooks`): the router of the reserved paths
(:meth:`LiveReload.route`), the transform that injects the page script
(:class:`~serverio.live.inject.PageScript`), the event source a streaming
answer hands its connection to (the :class:`LiveReload` itself) and the
watcher's lifetime (:meth:`LiveReload.running`).

Task tree (docs/cancellation.md "Live reload")::

    Server.serve()
      Handler.running()                 cache jobs (as without --watch)
        LiveReload.running()            nursery "live" (Hooks.running)
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
the idle connections (step 2 of :class:`serverio.app.server.Server`; an
HTTP/2 one ends with END_STREAM before its connection's GOAWAY); the
connection nursery ends; then the live nursery is cancelled (the watcher
stops, its inotify descriptor is closed; a polling scan in flight is
abandoned with the watch pool's other threads in step 5); then the cache
jobs.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Final

import trio

from ..concurrency.blocking import Pool, PoolSaturated, run_blocking
from ..concurrency.broadcast import MODIFIED, Broadcast, Debouncer, StreamSlots
from ..config import Config
from ..fs.filecache import FileCache
from ..fs.watch import (
    InotifyTree,
    inotify_available,
    poll_diff,
    poll_scan,
)
from ..http.core import Plan, RequestFacts, error_plan
from ..pipeline.content import ContentService
from ..pipeline.hooks import Hooks
from .inject import PageScript
from .protocol import reserved_plan
from .script import (
    SSE_KEEPALIVE,
    SSE_PREAMBLE,
    event_path,
    live_assets,
    sse_css,
    sse_reload,
)

__all__ = ["LiveReload"]

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
        self.assets = live_assets(config.live.watch_prefix)
        self.broadcast = Broadcast(SSE_QUEUE, sse_reload())
        # Event streams have their own budget, outside --max-connections
        # (the server's admission leaves their connections out).
        self.slots = StreamSlots(config.live.watch_max_streams)
        self.backend = ""  # "inotify" or "poll", once watching
        self.batches = 0  # change batches published
        self.poll_interval = POLL_INTERVAL
        # May an event name this path (decoded, "/a/b.css")?  The site's
        # access rules say no for a protected one (Site.may_name): every
        # stream gets the same events, so such a change is a plain reload.
        self.may_name: Callable[[str], bool] = _any_path

    def hooks(self, fs: Pool) -> Hooks:
        """Live reload's hooks into the request pipeline (``fs``: the pool
        a large page is read in for injection)."""
        return Hooks(
            route=self.route,
            transform=PageScript(self.config, self.assets, fs, self.content),
            events=self,
            running=self.running,
        )

    def route(self, req: RequestFacts, now: float) -> Plan | None:
        """The reserved paths (:func:`serverio.live.protocol.reserved_plan`):
        a GET or HEAD of a dot path under ``--watch-prefix``; None for
        anything else (the core's routing then 404s a hidden path)."""
        if not req.target.hidden or req.method not in (b"GET", b"HEAD"):
            return None
        return reserved_plan(req, self.assets, now)

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
        if not cfg.live.watch_poll and inotify_available():
            try:
                tree = InotifyTree(cfg.root, hidden=cfg.files.hidden)
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
        snapshot, cut = await run_blocking(self.pool, poll_scan, cfg.root, cfg.files.hidden)
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
                new, _ = await run_blocking(self.pool, poll_scan, cfg.root, cfg.files.hidden)
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
