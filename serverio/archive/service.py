"""``--archives``: the feature's hook (:class:`Archives`, a
:class:`~serverio.pipeline.hooks.ListingView`).

A GET or HEAD the handler resolved to a directory listing, with
``?archive=`` in its query, is answered here instead of the listing page:
the format is checked (400 for an unknown one), a selection's names
(``&name=``, :func:`~serverio.archive.plan.selected_names`: 400 for a
name that is not one, 404 for one the listing does not show), the members
walked (413 past the bounds), and the answer is the plan of
:func:`serverio.archive.plan.archive_plan` with an
:class:`~serverio.archive.stream.ArchiveStream` as its body.  The
directory itself went through the pipeline's checks already (the hidden
path route, the containment open, the site's request check), and its
``served`` path travels on for the access hook's LISTING check.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..concurrency.blocking import Pool
from ..config import Config
from ..fs.hide import hide_rules
from ..fs.jobs import OwnedFd
from ..fs.opener import ContainedRoot
from ..http.core import RequestFacts
from ..http.negotiate import parse_query
from ..model import Opened, Prepared
from ..pipeline.content import ContentService
from ..pipeline.hooks import ListingView
from .plan import QUERY_KEY, Bounds, archive_format, archive_name, archive_plan, selected_names
from .stream import ArchiveStream, walk

__all__ = ["Archives"]


class Archives(ListingView):
    """Folder archives for one server: its ``fs`` pool, its contained root,
    and the content service (whose ``visible`` is the access hook on
    listed names when the site has auth rules)."""

    def __init__(
        self, config: Config, fs: Pool, content: ContentService, opener: Callable[[], ContainedRoot]
    ) -> None:
        self.config = config
        self.fs = fs
        self.content = content
        self.opener = opener
        policy = config.content
        self.bounds = Bounds(policy.archive_max_entries, policy.archive_max_bytes)
        self.root_name = os.path.basename(os.path.normpath(str(config.root))) or "files"

    def takes(self, req: RequestFacts) -> bool:
        query = req.target.query
        return query is not None and QUERY_KEY in query and QUERY_KEY in parse_query(query)

    async def answer(self, req: RequestFacts, prepared: Prepared, now: float) -> Prepared:
        """The archive's answer; HTTPError 400 (bad format), 413 (bounds).

        Cancellation handling: ``prepared``'s directory moves to the walk,
        which releases it in every case; ``prepared`` is closed here.
        """
        try:
            fmt = archive_format(req.target.query)
            assert fmt is not None  # takes() saw the key
            only = selected_names(req.target.query)  # 400 before any I/O
            top = OwnedFd(prepared.take_fd())
            opener = self.opener()
            visible = self.content.visible
            members = await walk(
                self.fs,
                opener,
                req,
                top,
                self.config.files.hidden,
                self.bounds,
                visible,
                prepared.real,
                hide_rules(self.config.files.hide, self.config.files.hide_tables),
                only,
                self.config.content.listing_max_entries,
            )
            segments = req.target.segments
            name = archive_name(segments, self.root_name)
            plan = archive_plan(req, now, fmt, name, private=visible is not None)
            opened = None
            if plan.send_body:
                chunks = ArchiveStream(
                    self.fs, opener, members, fmt, name, "/".join(segments), self.bounds.size
                )
                opened = Opened(-1, chunks)
            return Prepared(plan, opened, served=prepared.served, real=prepared.real)
        finally:
            prepared.close()
