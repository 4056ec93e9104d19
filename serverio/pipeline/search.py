"""The recursive search below a listed folder (``?q=``), streamed.

:class:`SearchStream` is the body of a search's 200 (a
:class:`~serverio.model.ChunkSource`, "The streamed-body seam"): the
results are sent as the walk finds them, HTML rows, JSON array members or
text lines (:func:`serverio.http.listing.search_rows`), after the page's
head (:func:`~serverio.http.listing.search_head`) and before an ending
that says whether the walk stopped at a bound, and which
(:func:`~serverio.http.listing.search_tail`).

The walk's blocking part is :func:`serverio.fs.search.scan_batch` (in the
``work`` pool); between batches this applies, to each directory's
entries, the access hook's listing rules (``visible``: what a listing of
that directory would show this client, symlinks by their resolved target)
and ``--hide``, then matches the names and queues the folders among what
is left.  Bounded by ``--search-max-entries`` entries visited and
``--search-time`` seconds (also around each pool hop: a stalled
filesystem ends the walk at its time, the thread abandoned); at most
``--listing-max-entries`` results.  The walk advances only when the
transport asks for the next chunk: a slow client slows it, a client that
leaves stops it.  Never cached: a search is a walk of the tree as it is
now.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import trio

from ..concurrency.blocking import Pool, PoolSaturated, run_blocking
from ..config import Config
from ..fs.hide import HideRules
from ..fs.opener import ContainedRoot
from ..fs.search import BATCH_DIRS, Scanned, name_matcher, scan_batch
from ..http.core import VARY_ACCEPT, Plan, RequestFacts, common_fields
from ..http.listing import (
    LISTING_CSP,
    SEARCH_TYPES,
    Entry,
    Hit,
    ListingQuery,
    search_format,
    search_head,
    search_rows,
    search_tail,
)

__all__ = ["RENDER_INLINE", "SearchStream", "Visible", "search_plan"]

Visible = Callable[[RequestFacts, tuple[str, ...], list[Entry]], list[Entry]]

# Up to this many results are rendered on the trio thread; more in the
# work pool (ten thousand rows never hold the event loop).
RENDER_INLINE = 64


def search_plan(req: RequestFacts, query: ListingQuery, now: float, *, private: bool) -> Plan:
    """The 200 of a search, whose body is produced while it is sent (so it
    has no Content-Length: chunked on HTTP/1.1, DATA frames on HTTP/2).
    No validators (the tree as it is now); ``Vary: Accept`` (the format);
    the listing's CSP on the page; ``Cache-Control: private`` when access
    rules may have left results out for this client."""
    fmt = search_format(query)
    headers = common_fields(now)
    headers.append((b"content-type", SEARCH_TYPES[fmt]))
    headers.append((b"vary", VARY_ACCEPT))
    headers.append((b"cache-control", b"private, no-cache" if private else b"no-cache"))
    if fmt == "html":
        headers.append((b"content-security-policy", LISTING_CSP))
    return Plan(200, tuple(headers), (), send_body=req.method != b"HEAD")


class SearchStream:
    """The walk of one search and its rendering, pulled one chunk at a time.

    :meth:`prime` (before the response starts) scans the folder itself, so
    a full pool is still a 503; then each :meth:`next_chunk` hands out the
    head with those first results, then the results of each batch of
    folders that found any, then the ending.

    Cancellation handling: the only awaits are pooled calls (a scan, a
    large render); a cancelled one abandons its thread, which closes what
    it opened and whose result is dropped.  Nothing else is held, so
    :meth:`close` only marks the walk over; a walk cut by the time bound
    likewise abandons the hop under way.
    """

    # Each pull ends by --search-time (the hop under way is abandoned at
    # it), so the transport does not bound pulls with --write-timeout: a
    # long search that finds nothing for a while is not a stalled one.
    bounds_pulls = True

    def __init__(
        self,
        work: Pool,
        opener: ContainedRoot,
        cfg: Config,
        req: RequestFacts,
        query: ListingQuery,
        visible: Visible | None,
        hide: HideRules,
    ) -> None:
        content = cfg.content
        self.work = work
        self.opener = opener
        self.req = req
        self.query = query
        self.visible = visible
        self.hide = hide
        self.hidden = cfg.files.hidden
        self.content = content  # --search-*, --listing-max-entries, the page's options
        self.matches = name_matcher(query.q)
        self.deadline = time.monotonic() + content.search_time
        self.trio_deadline = trio.current_time() + content.search_time
        self.queue: deque[tuple[str, ...]] = deque([()])
        self.seen: set[tuple[int, int]] = set()
        self.visited = 0
        self.found = 0
        # "": walking or ended; else the bound it stopped at (SEARCH_STOPS).
        self.stopped = ""
        self.walking = True
        # "head": nothing sent yet; "walk": the head went out; "done": the
        # ending went out, or the stream was closed.
        self.phase = "head"
        self.pending: list[Hit] = []

    async def prime(self) -> None:
        """Scan the searched folder before the response starts: a full
        work pool is the caller's 503 (:class:`PoolSaturated`)."""
        self.pending = await self._step(saturated_stops=False)

    async def next_chunk(self) -> bytes:
        """The head (with the first results), the next results, the ending,
        then ``b""``."""
        if self.phase == "head":
            self.phase = "walk"
            content = self.content
            out = search_head(
                self.req.target.segments, self.query, archives=content.archives, title=content.title
            )
            hits, self.pending = self.pending, []
            if hits:
                return out + await self._render(hits)
            if out:
                return out  # the page's head at once, before any walk
        while self.walking:
            hits = await self._step()
            if hits:
                return await self._render(hits)
        if self.phase == "done":
            return b""
        self.phase = "done"
        # A text answer that ended has no ending: then this is b"".
        return search_tail(self.query, found=self.found, visited=self.visited, stopped=self.stopped)

    def close(self) -> None:
        """The walk is over (idempotent): no further hop starts."""
        self.walking = False
        self.phase = "done"

    def _stop(self, why: str) -> None:
        self.stopped = self.stopped or why
        self.walking = False

    async def _render(self, hits: list[Hit]) -> bytes:
        first = self.found == 0
        self.found += len(hits)
        if len(hits) <= RENDER_INLINE:
            return search_rows(hits, self.query, first=first)
        try:
            return await run_blocking(self.work, _rows, hits, self.query, first)
        except PoolSaturated:
            return search_rows(hits, self.query, first=first)  # degrade, not fail

    async def _step(self, *, saturated_stops: bool = True) -> list[Hit]:
        """One batch of folders: scanned in the pool, filtered, matched;
        the results it found (maybe none).  Ends the walk at its end or
        at a bound."""
        queue = self.queue
        if not queue:
            self.walking = False
            return []
        budget = self.content.search_max_entries
        if self.visited >= budget:
            self._stop("entries")
            return []
        if time.monotonic() > self.deadline:
            self._stop("time")
            return []
        batch = [queue.popleft() for _ in range(min(len(queue), BATCH_DIRS))]
        segments = self.req.target.segments
        scanned = None
        try:
            with trio.move_on_at(self.trio_deadline):
                scanned = await run_blocking(
                    self.work,
                    scan_batch,
                    self.opener,
                    segments,
                    batch,
                    self.hidden,
                    budget - self.visited,
                    self.deadline,
                    self.seen,
                    self.visible is not None,
                )
        except PoolSaturated:
            if not saturated_stops:
                raise
            self._stop("busy")
            return []
        if scanned is None:
            # The hop outlived --search-time (a stalled filesystem): the
            # thread is abandoned (it closes its own descriptors) and the
            # shared ``seen`` is never read again.
            self._stop("time")
            return []
        if len(scanned) < len(batch):
            if self.visited + sum(len(s.entries) for s in scanned) >= budget:
                self._stop("entries")
            elif time.monotonic() > self.deadline:
                self._stop("time")
        return self._match(scanned)

    def _match(self, scanned: list[Scanned]) -> list[Hit]:
        hits: list[Hit] = []
        segments = self.req.target.segments
        visible, hide, matches = self.visible, self.hide, self.matches
        keep = self.content.listing_max_entries
        for one in scanned:
            self.visited += len(one.entries)
            if one.cut:
                self._stop("entries")
            where = (*segments, *one.rel)
            entries = one.entries
            if visible is not None:
                entries = visible(self.req, where, entries)
            parent = "/".join(where)
            for e in entries:
                if hide.active and hide.hides(parent, e.name):
                    continue
                if matches(e.name):
                    if self.found + len(hits) >= keep:
                        self._stop("results")
                    else:
                        hits.append(((*one.rel, e.name), e))
                if e.is_dir and self.walking:
                    self.queue.append((*one.rel, e.name))
        return hits


def _rows(hits: list[Hit], query: ListingQuery, first: bool) -> bytes:
    return search_rows(hits, query, first=first)
