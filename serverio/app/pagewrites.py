"""The listing page's write actions, wired (part of the composition root).

The page's rename, move and delete go through the endpoints a script
uses (docs/reference/listing.md, "Actions"): ``MOVE`` with ``Destination``
and ``Overwrite: F`` (RFC 4918 §9.9), ``DELETE``.  With ``--webdav`` the
WebDAV step answers both.  With ``--upload`` alone the uploads' step
answers ``PUT``, ``DELETE`` of a file and the form's ``POST``; so that the
page's actions work there too (what a reader of the page expects from a
server that lets them delete), :func:`page_moves` adds ``MOVE`` and the
``DELETE`` of a folder (a path ending in ``/``), answered by the WebDAV
steps themselves (the same Destination checks, access hook on every
member, ``--webdav-max-tree`` bound) without WebDAV's other methods and
without locks (no ``LOCK`` is served).  Each is allowed where the access
hook allows it: ``delete`` on what goes, ``upload`` (or ``overwrite``) on
what a ``MOVE`` makes.

:func:`offered` is what each configuration's write features offer the
page (before the access hook is asked, :mod:`serverio.site.pagerights`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..config import Config
from ..fs.filecache import FileCache
from ..fs.opener import ContainedRoot
from ..http.core import Plan, RequestFacts
from ..http.listing import ALL_RIGHTS, Entry, PageRights
from ..http.target import Target
from ..model import ChunkSource
from ..pipeline.hooks import WRITE_METHODS, Admit, Hooks, WriteContent
from ..upload.service import ALLOW_WRITES, Uploads

__all__ = [
    "ALLOW_PAGE_WRITES",
    "PAGE_WRITE_METHODS",
    "Offer",
    "offered",
    "page_moves",
    "with_share",
]

# --upload without --webdav: the uploads' methods and MOVE.
PAGE_WRITE_METHODS = WRITE_METHODS | frozenset((b"MOVE",))
ALLOW_PAGE_WRITES = ALLOW_WRITES + b", MOVE"

# What the write features offer a listing request (its entries given).
Offer = Callable[[RequestFacts, list[Entry]], PageRights]

# With --webdav: the rows' actions only (the upload and new-folder forms
# post, which is no WebDAV method: its locks would not guard them); the
# editor's save is a PUT, a DAV method.
_ROWS = PageRights(delete=True, overwrite=True)
# Outside --webdav-prefix: the forms; rename and move would need a MOVE
# whose Destination is outside WebDAV's namespace (502), so no row
# actions; the editor's save is the uploads' PUT.
_FORMS = PageRights(upload=True, mkdir=True, overwrite=True)


def offered(webdav: bool, at_dav: Callable[[tuple[str, ...]], bool] | None) -> Offer:
    """The page's offer: ``--upload`` alone, every write control; with
    ``--webdav`` the rows' actions (under ``--webdav-prefix``, given as
    ``at_dav``: there, and the forms elsewhere)."""
    if not webdav:
        return lambda req, entries: ALL_RIGHTS
    if at_dav is None:
        return lambda req, entries: _ROWS
    test = at_dav
    return lambda req, entries: _ROWS if test(req.target.segments) else _FORMS


def with_share(offer: Offer | None) -> Offer:
    """``offer`` (None: no write feature) and the share links the login
    feature makes (``POST /.serverio/share``), whatever ``--upload`` says."""
    if offer is None:
        return lambda req, entries: _SHARE
    test = offer
    return lambda req, entries: dataclasses.replace(test(req, entries), share=True)


_SHARE = PageRights(share=True)


def _allow(target: Target) -> bytes:
    return ALLOW_PAGE_WRITES


def page_moves(
    config: Config,
    opener: Callable[[], ContainedRoot],
    files: FileCache,
    uploads: Uploads,
    hooks: Hooks,
) -> Hooks:
    """``hooks`` (the uploads' write step) with ``MOVE`` and a folder's
    ``DELETE`` answered by the WebDAV steps (no locks)."""
    from ..dav.service import DavService

    dav = DavService(config, opener, files, uploads)
    step = hooks.write
    assert step is not None

    async def write(
        req: RequestFacts, content: WriteContent, now: float, admit: Admit
    ) -> Plan | tuple[Plan, ChunkSource]:
        if req.method == b"MOVE" or (req.method == b"DELETE" and req.target.slash):
            return await dav.write(req, content, now, admit)
        return await step(req, content, now, admit)

    return dataclasses.replace(hooks, write=write, write_methods=PAGE_WRITE_METHODS, allow=_allow)
