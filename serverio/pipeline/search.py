"""The recursive search below a listed folder (``?q=``), on the trio thread.

The walk's blocking part is :func:`serverio.fs.search.scan_batch` (in the
``work`` pool, requester-owned like a listing's scan); between batches this
applies, to each directory's entries, the access hook's listing rules
(``visible``: what a listing of that directory would show this client,
symlinks by their resolved target) and ``--hide``, then matches the names
and queues the folders among what is left.  Bounded by
``--search-max-entries`` entries visited and ``--search-time`` seconds;
at most ``--listing-max-entries`` results are kept.  The answer is
rendered in the work pool (:func:`serverio.http.listing.render_search`)
and never cached: a search is a walk of the tree as it is now.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable

from ..concurrency.blocking import Pool, run_blocking
from ..config import Config
from ..fs.hide import HideRules
from ..fs.opener import ContainedRoot
from ..fs.search import BATCH_DIRS, name_matcher, scan_batch
from ..http.core import RequestFacts
from ..http.listing import Entry, Hit, Listing, ListingQuery, render_search

__all__ = ["Visible", "search"]

Visible = Callable[[RequestFacts, tuple[str, ...], list[Entry]], list[Entry]]


async def search(
    work: Pool,
    opener: ContainedRoot,
    cfg: Config,
    req: RequestFacts,
    query: ListingQuery,
    visible: Visible | None,
    hide: HideRules,
) -> Listing:
    """Search below the folder ``req`` names for ``query.q``; the rendered
    answer.

    Cancellation handling: each batch is a pooled call (abandoned with its
    requester; the thread closes what it opened); nothing else is held.
    """
    segments = req.target.segments
    content = cfg.content
    matches = name_matcher(query.q)
    deadline = time.monotonic() + content.search_time
    budget = content.search_max_entries
    keep = content.listing_max_entries
    queue: deque[tuple[str, ...]] = deque([()])
    seen: set[tuple[int, int]] = set()
    hits: list[Hit] = []
    visited = 0
    truncated = False
    resolving = visible is not None
    while queue:
        if visited >= budget or time.monotonic() > deadline:
            truncated = True
            break
        batch = [queue.popleft() for _ in range(min(len(queue), BATCH_DIRS))]
        scanned = await run_blocking(
            work,
            scan_batch,
            opener,
            segments,
            batch,
            cfg.files.hidden,
            budget - visited,
            deadline,
            seen,
            resolving,
        )
        if len(scanned) < len(batch) and (visited >= budget or time.monotonic() > deadline):
            truncated = True
        for one in scanned:
            visited += len(one.entries)
            truncated = truncated or one.cut
            where = (*segments, *one.rel)
            entries = one.entries
            if visible is not None:
                entries = visible(req, where, entries)
            parent = "/".join(where)
            for e in entries:
                if hide.active and hide.hides(parent, e.name):
                    continue
                if matches(e.name):
                    if len(hits) >= keep:
                        truncated = True
                    else:
                        hits.append(((*one.rel, e.name), e))
                if e.is_dir:
                    queue.append((*one.rel, e.name))
    render = functools.partial(
        render_search,
        segments,
        hits,
        query,
        truncated=truncated,
        visited=visited,
        archives=content.archives,
        title=content.title,
    )
    return await run_blocking(work, render)
