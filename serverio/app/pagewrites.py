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
from typing import TYPE_CHECKING

from ..config import Config
from ..fs.filecache import FileCache
from ..fs.opener import ContainedRoot
from ..http.core import RequestFacts
from ..http.listing import ALL_RIGHTS, Entry, PageRights
from ..http.target import Target
from ..pipeline.hooks import Hooks, WriteRoute

if TYPE_CHECKING:  # the uploads are imported only where they are on
    from ..upload.service import Uploads

__all__ = [
    "Offer",
    "offered",
    "page_moves",
    "with_share",
]

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
    """--upload without --webdav: the uploads' methods and MOVE (in Allow)."""
    from ..upload.service import ALLOW_WRITES  # loaded already: page_moves made the route

    return ALLOW_WRITES + b", MOVE"


def page_moves(
    config: Config,
    opener: Callable[[], ContainedRoot],
    files: FileCache,
    uploads: Uploads,
    hooks: Hooks,
) -> Hooks:
    """``hooks`` (the uploads' write step) with ``MOVE`` and a folder's
    ``DELETE`` answered by the WebDAV steps (no locks): a write stage of
    their own ahead of the uploads' (``Hooks.write_ahead``), asked only
    for those two methods, so that a ``PUT`` never passes through here."""
    from ..dav.service import DavService

    dav = DavService(config, opener, files, uploads)
    route = WriteRoute(dav.write, _MOVES, _moves, None, "page-moves")
    return dataclasses.replace(hooks, write_ahead=(*hooks.write_ahead, route), allow=_allow)


# The methods of the page's moves: MOVE, and DELETE (of a folder: _moves).
_MOVES = frozenset((b"MOVE", b"DELETE"))


def _moves(req: RequestFacts) -> bool:
    """A ``MOVE``, or the ``DELETE`` of a folder (a path ending in ``/``);
    a file's ``DELETE`` is the uploads' step's."""
    return req.method == b"MOVE" or req.target.slash
