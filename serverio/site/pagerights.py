"""What a listing page offers its reader, decided by the access hook (pure).

The page shows a write control only where the reader has its right
(issue 44: "the page shows only the actions the signed-in user has"):
the upload form with ``upload`` on the listed folder, the new-folder form
with ``mkdir`` there, each row's rename, move and delete with ``delete``
on the row's own path (a rename and a move remove the name where it is,
so they need what a ``DELETE`` needs; the destination's ``upload`` is
asked when the ``MOVE`` is made).  Each answer is the one access hook's
(:meth:`serverio.site.service.Site.access_now`), asked as the request
itself would ask it (``Kind.WRITE``: the ``[[writable]]`` tables, the
``[[access]]`` rules, the ``[[auth]]`` rules), with this request's
credentials or session, decided now: allowed, or pending the password
check of Basic credentials this request sent (the listing, under the same
rule, passed that check to be shown).  The server still decides every
request the page makes; hiding a control is only what the page shows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..http.access import Access, AccessTarget, Kind, Right, Verdict
from ..http.core import RequestFacts
from ..http.listing import Entry, PageRights
from .rules import match_path

__all__ = ["AccessNow", "page_rights"]

# Site.access_now's shape: a target and the request whose credentials ask.
AccessNow = Callable[[AccessTarget, RequestFacts], Access]


def _may(access_now: AccessNow, req: RequestFacts, path: str, right: Right) -> bool:
    verdict = access_now(AccessTarget((path,), Kind.WRITE, right), req).verdict
    return verdict is Verdict.ALLOW or verdict is Verdict.PENDING


def page_rights(
    access_now: AccessNow, req: RequestFacts, entries: Sequence[Entry], offer: PageRights
) -> PageRights:
    """The rights of ``offer`` (what the server's write features offer on
    this page) that the reader of ``req`` has on the listed folder and on
    each of its ``entries``.  The folder's ``delete`` is what most entries
    say, so that only the others carry their own (``odd``)."""
    folder = match_path(req.target)
    upload = offer.upload and _may(access_now, req, folder, Right.UPLOAD)
    mkdir = offer.mkdir and _may(access_now, req, folder, Right.MKDIR)
    if not offer.delete or not entries:
        return PageRights(upload=upload, mkdir=mkdir)
    base = folder if folder.endswith("/") else folder + "/"
    yes = frozenset(
        e.name
        for e in entries
        if _may(access_now, req, base + e.name + ("/" if e.is_dir else ""), Right.DELETE)
    )
    delete = 2 * len(yes) >= len(entries)
    odd = frozenset(e.name for e in entries if (e.name in yes) != delete)
    return PageRights(upload=upload, mkdir=mkdir, delete=delete, odd=odd)
