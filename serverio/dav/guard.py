"""The lock seam of the WebDAV service (RFC 4918 §6, §7): :class:`LockGuard`.

The DAV service (:mod:`serverio.dav.service`) asks its guard before every
write and tells it after every removal or move; PROPFIND asks it for the
``DAV:lockdiscovery`` and ``DAV:supportedlock`` values; LOCK and UNLOCK
are the guard's own answers.  :data:`NO_LOCKS` is class 1 (no locking):
``DAV: 1``, LOCK and UNLOCK answered 405, every write allowed unless the
request's ``If`` field (§10.4) fails, both properties empty.  A class 2
implementation (a lock table) replaces it without touching the service.

Vocabulary shared by every method:

* a *path* is a resource's decoded relative path: the request target's
  segments joined with ``/``, no leading or trailing slash, ``""`` for
  the root (:attr:`serverio.http.target.Target.relpath`).  Its href (the
  ``DAV:lockroot``, the tag of an If list) is
  :func:`serverio.dav.xml.href_of` of its segments (``collection=True``
  for a collection);
* ``paths`` (:meth:`LockGuard.check`) is every resource the method
  changes: the target; its parent collection when the method creates or
  removes a member (PUT of a new file, MKCOL, DELETE, MOVE's source and
  destination, COPY's destination); the ``Destination`` of COPY / MOVE.
  ``depth_infinity``: the method also changes every member of the
  collections among ``paths`` (DELETE, MOVE of a collection, COPY
  onto one), so a lock on a member counts too (§9.6.1, §9.9.2);
* ``etag_of(path)``: the current strong ETag of one of ``paths`` (the
  service stat'ed them), None for one that does not exist or is not
  among them; for ``If`` lists tagged with an entity tag (§10.4.2);
* every method is synchronous and pure but :meth:`LockGuard.lock` and
  :meth:`LockGuard.unlock` (which may create an empty resource through
  ``create``); none does blocking I/O on the event loop;
* a write that streams content (a PUT) is checked twice: when it starts
  (:meth:`LockGuard.check`) and again right before its commit
  (:meth:`LockGuard.committing`), which also marks the commit in
  progress until its ``done`` is called: a LOCK that would cover a
  resource being committed waits for that commit to end, so no lock is
  granted between a write's last check and its rename (no lost update).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Protocol, TypeAlias
from urllib.parse import unquote, urlsplit

from ..http.core import Plan, RequestFacts, error_plan
from .fields import DAV_IF
from .ifheader import ResourceState, parse_if
from .xml import Element, href_of

__all__ = ["NO_LOCKS", "Done", "LockGuard", "NoLocks", "no_etag", "path_href"]

# What :meth:`LockGuard.committing` returns when the commit may go on: the
# call that ends the commit's mark (in a ``finally``, on the event loop).
Done: TypeAlias = Callable[[], None]


async def no_etag() -> str | None:
    """No current ETag (a LOCK's ``etag`` when nothing looks one up)."""
    return None


def path_href(path: str, *, collection: bool = False) -> str:
    """The href of a guard *path* (see the module docstring)."""
    return href_of(tuple(path.split("/")) if path else (), collection=collection)


class LockGuard(Protocol):
    """What the DAV service asks of the locks (one per server)."""

    # The DAV response field of OPTIONS (§10.1): b"1" (no locks) or b"1, 2".
    classes: bytes

    def check(
        self,
        req: RequestFacts,
        paths: Sequence[str],
        *,
        depth_infinity: bool,
        etag_of: Callable[[str], str | None],
        now: float,
    ) -> tuple[int, str] | None:
        """May ``req`` change ``paths``?  None: yes.  Else the status to
        answer and the path it is about: 423 Locked with the path of the
        locked resource (the service answers with
        ``DAV:lock-token-submitted`` naming its href, §9.6.1, §6.4), or 412
        Precondition Failed when the ``If`` field (:data:`~serverio.dav.fields.DAV_IF`)
        does not hold (§10.4.1), with the request's own path."""
        ...

    def committing(
        self,
        req: RequestFacts,
        paths: Sequence[str],
        *,
        etag_of: Callable[[str], str | None],
        now: float,
    ) -> tuple[int, str] | Done:
        """The check of :meth:`check` again (depth 0), at the commit of a
        write that passed it when it started: its refusal, or the call
        that ends the commit's mark.  Until that call, a LOCK covering one
        of ``paths`` waits (:meth:`lock`).  Synchronous: the check and the
        mark are one step of the event loop, so no LOCK is granted between
        them."""
        ...

    def discovery(self, path: str, now: float) -> Sequence[Element]:
        """The ``DAV:activelock`` elements of the locks on ``path`` (direct
        or inherited through a depth-infinity lock), for the
        ``DAV:lockdiscovery`` property (§15.8); empty without locks."""
        ...

    def supported(self) -> Sequence[Element]:
        """The ``DAV:lockentry`` elements of ``DAV:supportedlock`` (§15.10);
        empty when no lock is supported."""
        ...

    def moved(self, src: str, dst: str | None) -> None:
        """``src`` (and, for a collection, its members) was moved to
        ``dst`` (MOVE), or removed (``dst`` None: DELETE, or the
        destination a MOVE or COPY overwrote).  Called after the change
        succeeded, before the answer."""
        ...

    async def lock(
        self,
        req: RequestFacts,
        body: bytes,
        path: str,
        exists: bool,
        now: float,
        create: Callable[[], Awaitable[int]],
        etag: Callable[[], Awaitable[str | None]] = no_etag,
    ) -> Plan:
        """The answer to a LOCK of ``path`` (``body``: the request's
        content, at most :data:`serverio.dav.xml.MAX_XML_BYTES`, possibly
        empty for a refresh; ``exists``: is there a resource now).  To
        lock an unmapped URL (§7.3) it awaits ``create()``, which makes
        an empty file there and returns 201, or the error status.
        ``etag()``: the resource's current strong ETag (None: no file),
        awaited only when the request's ``If`` field has an entity tag
        (§10.4.2).  A new lock that would cover a write being committed
        (:meth:`committing`) waits for that commit to end first.  The
        service has already admitted the request (``Kind.WRITE``).

        Cancellation handling: no lock is recorded unless the answer is
        returned; ``create`` is the service's (atomic, like a PUT); a
        cancelled wait for a commit holds nothing.
        """
        ...

    async def unlock(self, req: RequestFacts, path: str, now: float) -> Plan:
        """The answer to an UNLOCK of ``path`` (the ``Lock-Token`` field is
        the Lock-Token field): 204, or 400 / 409 (§9.11).

        Cancellation handling: it holds nothing across an await.
        """
        ...


class NoLocks:
    """Class 1: no locks.  Writes are refused only when an ``If`` field
    fails (a state token never matches: no lock exists; entity tags are
    compared with ``etag_of``)."""

    classes: bytes = b"1"

    def check(
        self,
        req: RequestFacts,
        paths: Sequence[str],
        *,
        depth_infinity: bool,
        etag_of: Callable[[str], str | None],
        now: float,
    ) -> tuple[int, str] | None:
        value = DAV_IF.of(req)
        if value is None:
            return None
        field = parse_if([value.encode("latin-1")])
        if field is None:
            return None
        here = "/".join(req.target.segments)  # a guard path: "" for the root

        def state(resource: str) -> ResourceState:
            return ResourceState(etag_of(_tag_path(resource)), frozenset())

        if field.holds(path_href(here), state):
            return None
        return 412, here

    def committing(
        self,
        req: RequestFacts,
        paths: Sequence[str],
        *,
        etag_of: Callable[[str], str | None],
        now: float,
    ) -> tuple[int, str] | Done:
        got = self.check(req, paths, depth_infinity=False, etag_of=etag_of, now=now)
        return _nothing if got is None else got

    def discovery(self, path: str, now: float) -> Sequence[Element]:
        return ()

    def supported(self) -> Sequence[Element]:
        return ()

    def moved(self, src: str, dst: str | None) -> None:
        return None

    async def lock(
        self,
        req: RequestFacts,
        body: bytes,
        path: str,
        exists: bool,
        now: float,
        create: Callable[[], Awaitable[int]],
        etag: Callable[[], Awaitable[str | None]] = no_etag,
    ) -> Plan:
        return error_plan(405, now)

    async def unlock(self, req: RequestFacts, path: str, now: float) -> Plan:
        return error_plan(405, now)


def _nothing() -> None:
    return None


def _tag_path(resource: str) -> str:
    """A guard path from an href: an If list's tag (an absolute URI or
    an absolute path, as sent) or the request's own href."""
    path = urlsplit(resource).path if "://" in resource else resource
    return unquote(path).strip("/")


NO_LOCKS: Final[LockGuard] = NoLocks()
