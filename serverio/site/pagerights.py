"""What a listing page offers its reader, decided by the access hook (pure).

The page shows a write control only where the reader has its right
(issue 44: "the page shows only the actions the signed-in user has"):
the upload form with ``upload`` on the listed folder, the new-folder form
with ``mkdir`` there, a signed-in reader's share links with ``share``
there, each row's rename, move and delete with ``delete`` on the row's
own path (a rename and a move remove the name where it is,
so they need what a ``DELETE`` needs; the destination's ``upload`` is
asked when the ``MOVE`` is made).  Each answer is the one access hook's
(:meth:`serverio.site.service.Site.access_now`), asked as the request
itself would ask it (``Kind.WRITE``: the ``[[writable]]`` tables, the
``[[access]]`` rules, the ``[[auth]]`` rules), with this request's
credentials, session or share link, decided now
(:meth:`~serverio.site.service.Site.access_now`); Basic credentials that
would need a password check are decided for the user they were verified
as within the hook's window (:meth:`~serverio.site.service.Site.may`;
the listing of a protected folder has just verified them), and give no
control when they were not.  The server still decides every
request the page makes; hiding a control is only what the page shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..http.access import Access, AccessTarget, Kind, Right, Verdict
from ..http.core import RequestFacts
from ..http.listing import Entry, PageRights
from ..http.pageassets import icon_of
from ..http.selection import EDITOR_MAX
from .rules import SiteRules, glob_below, match_path

__all__ = ["Hook", "page_rights"]


class Hook(Protocol):
    """The access hook's two synchronous questions
    (:class:`serverio.site.service.Site`)."""

    def access_now(
        self, target: AccessTarget, req: RequestFacts | None, user: str | None = None
    ) -> Access: ...

    def may(self, right: Right, path: str, user: str | None) -> bool: ...


class _Asking:
    """One page's questions: each right on a path, as ``req`` would ask."""

    def __init__(self, hook: Hook, req: RequestFacts) -> None:
        self.hook = hook
        self.req = req

    def shares(self, folder: str) -> bool:
        """May a signed-in reader make share links here (the login
        feature's ``POST /.serverio/share`` needs a verified user)?"""
        user = self.hook.access_now(AccessTarget((folder,), Kind.ENTRY), self.req).user
        return bool(user) and self.hook.may(Right.SHARE, folder, user)

    def may(self, path: str, right: Right) -> bool:
        hook = self.hook
        verdict = hook.access_now(AccessTarget((path,), Kind.WRITE, right), self.req).verdict
        if verdict is not Verdict.PENDING:
            return verdict is Verdict.ALLOW
        # Basic credentials the hook would verify with a password check:
        # shown only when it verified them within its window (the
        # listing's own check), as a listed name is (Kind.ENTRY).  An
        # [[access]] decision names their user, whose right is asked; an
        # [[auth]] rule's users all have the same (its rule index).
        seen = hook.access_now(AccessTarget((path,), Kind.ENTRY), self.req)
        if not seen.allowed:
            return False
        if seen.user:
            return hook.may(right, path, seen.user)
        return seen.rule >= 0


def page_rights(
    hook: Hook, req: RequestFacts, entries: Sequence[Entry], offer: PageRights
) -> PageRights:
    """The rights of ``offer`` (what the server's write features offer on
    this page) that the reader of ``req`` has on the listed folder and on
    each of its ``entries``.  The folder's ``delete`` is what most entries
    say, so that only the others carry their own (``odd``)."""
    ask = _Asking(hook, req)
    folder = match_path(req.target)
    upload = offer.upload and ask.may(folder, Right.UPLOAD)
    mkdir = offer.mkdir and ask.may(folder, Right.MKDIR)
    share = offer.share and bool(entries) and ask.shares(folder)
    base = folder if folder.endswith("/") else folder + "/"
    # One question per kind of entry instead of per entry when no rule can
    # tell the folder's entries apart (a 10,000-entry folder: 16,000
    # questions otherwise, issue 46's listing cost).
    uniform = _uniform(getattr(hook, "rules", None), base)
    delete, odd = _per_entry(ask, base, entries if offer.delete else (), Right.DELETE, uniform)
    # The editor opens text files up to its limit (serverio.http.selection):
    # only theirs is asked.
    editable = [e for e in entries if _editable(e)] if offer.overwrite else []
    overwrite, odd_w = _per_entry(ask, base, editable, Right.OVERWRITE, uniform)
    return PageRights(upload, mkdir, delete, odd, share, overwrite, odd_w)


def _editable(e: Entry) -> bool:
    return not e.is_dir and 0 <= e.size <= EDITOR_MAX and icon_of(e.name, False) == "t"


_WILD = frozenset("*?[]{}")


def _covers(pattern: str, folder: str) -> bool:
    """Does the glob ``pattern`` match every path below ``folder`` (a
    canonical match path ending in ``/``): ``LITERAL/**`` with ``LITERAL``
    the folder or one above it (``**`` matches any segments, dotted or
    not, and a trailing ``/``: serverio.fs.globs)?"""
    if pattern.startswith("**"):
        pattern = "/" + pattern
    if not pattern.endswith("/**"):
        return False
    literal = pattern[:-3]
    return not _WILD & set(literal) and folder.startswith(literal + "/")


def _uniform(rules: object, folder: str) -> bool:
    """Can no rule decide two entries of ``folder`` differently?  True when
    every ``[[access]]``, ``[[auth]]`` and ``[[writable]]`` glob (and the
    users rule's) either matches no path below the folder or every path
    below it; never with case folding (its second spellings are matched
    apart).  Then an entry's answer is any entry's of the same kind (a
    folder or a file, dotted or not: asked apart all the same)."""
    if not isinstance(rules, SiteRules) or rules.fold or rules.fold_under:
        return False
    top = rules.canonical(folder)
    users = () if rules.users is None else (rules.users,)
    for rule in (*rules.access, *rules.auth, *rules.writable, *users):
        if rule.match is None:
            continue  # every path
        pattern = rules.canonical(rule.pattern)
        if glob_below(pattern, top) and not _covers(pattern, top):
            return False
    return True


def _per_entry(
    ask: _Asking, base: str, entries: Sequence[Entry], right: Right, uniform: bool = False
) -> tuple[bool, frozenset[str]]:
    """``right`` on each entry: what most say, and the names that differ.
    ``uniform`` (:func:`_uniform`): asked once per kind of entry."""
    if not entries:
        return False, frozenset()
    if uniform:
        answers: dict[tuple[bool, bool], bool] = {}
        for e in entries:
            kind = (e.is_dir, e.name.startswith("."))
            if kind not in answers:
                answers[kind] = ask.may(base + e.name + ("/" if e.is_dir else ""), right)
        yes = frozenset(e.name for e in entries if answers[e.is_dir, e.name.startswith(".")])
    else:
        yes = frozenset(
            e.name for e in entries if ask.may(base + e.name + ("/" if e.is_dir else ""), right)
        )
    most = 2 * len(yes) >= len(entries)
    return most, frozenset(e.name for e in entries if (e.name in yes) != most)
