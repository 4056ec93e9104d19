"""Class 2 for the DAV service: :class:`TableLocks`, the lock guard over a
:class:`~serverio.dav.locks.LockTable` (RFC 4918 §6, §7, §9.10, §9.11).

It implements :class:`serverio.dav.guard.LockGuard` (the service asks it
before every write, tells it after every removal or move, and hands it
LOCK and UNLOCK); every decision is :mod:`serverio.dav.locks`' and every
answer :mod:`serverio.dav.lockplans`'.  The table lives in the process's
memory: locks are lost on restart, and each ``--workers`` process would
have its own (docs/features.md "Locking").

Principal: the user name of the request's Basic credentials when it has
them (the site's auth rules checked them before the guard is asked), else
the user a session cookie or a trusted proxy's header names (the login
feature attaches it to a write's request once the access hook accepts it:
:func:`serverio.site.principal.user_of`), else None: without
authentication every client is the same principal, as RFC 4918 §6.4
allows a server to treat them.  A user is one principal however they
signed in (Basic, the sign-in page, the proxy in front).  Client: the key of the
request's address (:func:`serverio.site.gate.client_key` of
``RequestFacts.client``), which the table's per-client bound counts.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import unquote, urlsplit

import trio

from ..errors import HTTPError
from ..http.core import Plan, RequestFacts, error_plan
from ..site.gate import client_key
from ..site.principal import user_of
from ..site.rules import parse_basic
from .fields import DAV_IF, DEPTH, LOCK_TOKEN, TIMEOUT
from .guard import Done, no_etag
from .ifheader import Depth, IfField, parse_depth, parse_if, parse_timeout
from .lockplans import (
    activelock,
    conflict_plan,
    denied_plan,
    full_plan,
    lock_plan,
    parse_lock_token,
    precondition_failed_plan,
    supportedlock,
    unlock_mismatch_plan,
    unlocked_plan,
)
from .locks import Lock, LockPath, LockRefusal, LockRefused, LockTable, check_request
from .xml import Element, parse_lockinfo

__all__ = ["TableLocks", "guard_path", "lock_path", "new_token"]


def new_token() -> str:
    """A fresh lock token (RFC 4918 §6.5: a URI unique across all resources
    for all time): an RFC 4122 §4.4 random UUID under ``urn:uuid:``
    (§20.7 recommends it)."""
    return f"urn:uuid:{uuid.uuid4()}"


def lock_path(path: str) -> LockPath:
    """A guard path (``a/b``, ``""`` or ``.`` for the root) as segments."""
    return tuple(path.split("/")) if path and path != "." else ()


def guard_path(path: LockPath) -> str:
    """Segments as a guard path (``""`` for the root)."""
    return "/".join(path)


def _tag_path(tag: str) -> LockPath | None:
    """The resource an If list's tag names (an absolute URI or path, §10.4.2):
    its path, decoded; None for what no path of this server can be (a
    ``..`` segment, an empty one).  The authority is not compared: every
    resource the request reaches is on this server, and a list tagged with
    another server's resource has, here, no state (§10.4.5)."""
    path = urlsplit(tag).path if "://" in tag else tag
    segments = tuple(unquote(s) for s in path.strip("/").split("/")) if path.strip("/") else ()
    if any(s in ("", ".", "..") for s in segments):
        return None
    return segments


def _principal(req: RequestFacts) -> str | None:
    basic = parse_basic(req.authorization)
    return basic[0] if basic is not None else user_of(req.authorization)


def _if_field(req: RequestFacts) -> IfField | None:
    value = DAV_IF.of(req)
    return parse_if([value.encode("latin-1")]) if value is not None else None


def _affected(paths: Sequence[str], depth_infinity: bool) -> list[tuple[LockPath, bool]]:
    """``paths`` with the depth each is changed at: Depth infinity reaches
    the members of a changed collection (§9.6.1, §9.9.2), never those of a
    parent that is there only because its membership changes (a proper
    ancestor of another of ``paths``)."""
    segs = [lock_path(p) for p in paths]
    out: list[tuple[LockPath, bool]] = []
    for s in dict.fromkeys(segs):
        parent_only = any(len(o) > len(s) and o[: len(s)] == s for o in segs)
        out.append((s, depth_infinity and not parent_only))
    return out


class TableLocks:
    """:class:`~serverio.dav.guard.LockGuard` with a lock table: ``DAV: 1, 2``."""

    classes: bytes = b"1, 2"

    def __init__(self, table: LockTable) -> None:
        self.table = table
        # Writes being committed (:meth:`committing`): path -> how many.
        # A LOCK that would cover one waits for ``_ended``, set (and
        # dropped) whenever a commit ends.
        self._commits: dict[LockPath, int] = {}
        self._ended: trio.Event | None = None

    def check(
        self,
        req: RequestFacts,
        paths: Sequence[str],
        *,
        depth_infinity: bool,
        etag_of: Callable[[str], str | None],
        now: float,
    ) -> tuple[int, str] | None:
        """The If field must hold (412) and every lock on ``paths`` have a
        token submitted (423: the path of its lock-root);
        :func:`serverio.dav.locks.check_request`."""
        denied = check_request(
            self.table,
            _if_field(req),
            lock_path(req.target.relpath),
            _affected(paths, depth_infinity),
            etag_of=lambda p: etag_of(guard_path(p)),
            resolve=_tag_path,
            principal=_principal(req),
            now=now,
        )
        if denied is None:
            return None
        if denied.status == 423 and denied.lock is not None:
            return 423, guard_path(denied.lock.root)
        return 412, req.target.relpath

    def committing(
        self,
        req: RequestFacts,
        paths: Sequence[str],
        *,
        etag_of: Callable[[str], str | None],
        now: float,
    ) -> tuple[int, str] | Done:
        """:meth:`check` again at a write's commit (a lock granted while
        its content streamed counts now), then the commit's mark: a LOCK
        covering one of ``paths`` waits until ``done()``."""
        got = self.check(req, paths, depth_infinity=False, etag_of=etag_of, now=now)
        if got is not None:
            return got
        marked = tuple(dict.fromkeys(lock_path(p) for p in paths))
        commits = self._commits
        for p in marked:
            commits[p] = commits.get(p, 0) + 1
        ended = False

        def done() -> None:
            nonlocal ended
            if ended:
                return
            ended = True
            for p in marked:
                left = commits[p] - 1
                if left:
                    commits[p] = left
                else:
                    del commits[p]
            if self._ended is not None:
                self._ended.set()
                self._ended = None

        return done

    def _busy(self, here: LockPath, infinite: bool) -> bool:
        """Is a write being committed to what a lock on ``here`` covers?"""
        n = len(here)
        return any(p == here or (infinite and p[:n] == here) for p in self._commits)

    async def _settled(
        self, here: LockPath, infinite: bool, etag: Callable[[], Awaitable[str | None]] | None
    ) -> str | None:
        """Wait until no commit covered by a lock on ``here`` is in
        progress; then the resource's ETag when ``etag`` is given (looked
        up again if a commit began meanwhile).  The caller grants the lock
        with no await after this returns."""
        while True:
            while self._busy(here, infinite):
                if self._ended is None:
                    self._ended = trio.Event()
                await self._ended.wait()
            tag = None if etag is None else await etag()
            if not self._busy(here, infinite):
                return tag

    def discovery(self, path: str, now: float) -> Sequence[Element]:
        return tuple(activelock(lk, now) for lk in self.table.covering(lock_path(path), now))

    def supported(self) -> Sequence[Element]:
        return tuple(supportedlock().elements())

    def moved(self, src: str, dst: str | None) -> None:
        # §9.9 (MOVE), §9.6.1 (DELETE): the locks of the source are not
        # moved, they are gone with it; so are those of a destination the
        # MOVE replaced (§9.9.3: as if deleted first, its token submitted).
        # An ancestor's depth-infinity lock applies to the moved resource
        # by path, as to any new member (§7.4).
        self.table.forget(lock_path(src))
        if dst is not None:
            self.table.forget(lock_path(dst))

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
        """LOCK: a refresh (no body, §9.10.2) or a new lock (§9.10.1); of an
        unmapped URL, a locked empty resource made by ``create`` (§7.3).
        A new lock first waits for the commits it would cover
        (:meth:`committing`); an ``If`` field's entity tags are compared
        with ``etag()``, looked up after that wait.

        Cancellation handling: the new lock is removed unless ``create``
        returned a success (a ``finally``: a cancelled or failed create
        leaves no lock behind); a cancelled wait holds nothing.
        """
        try:
            info = parse_lockinfo(body)
            field = _if_field(req)
            timeouts = parse_timeout(_raw(TIMEOUT.of(req)))
            depth = parse_depth(_raw(DEPTH.of(req)), Depth.INFINITY)
        except HTTPError as exc:
            return error_plan(exc.status, now)
        here = lock_path(path)
        principal = _principal(req)
        if info is None:
            if field is None:
                return error_plan(400, now)  # a refresh names its lock (§9.10.2)
            tag = await etag() if _has_etag(field) else None
            return self._refresh(req, field, (here, tag), timeouts, principal, now)
        if depth is Depth.ONE:
            return error_plan(400, now)  # §9.10.3: 0 or infinity only
        infinite = depth is Depth.INFINITY
        tag = await self._settled(here, infinite, etag if _has_etag(field) else None)
        # Nothing awaited from here to the grant: no commit starts between.
        # Locking an unmapped URL adds a member to its parent (§7.3).
        affected = [] if exists or not here else [(here[:-1], False)]
        denied = check_request(
            self.table,
            field,
            here,
            affected,
            etag_of=lambda p: tag if p == here else None,
            resolve=_tag_path,
            principal=principal,
            now=now,
        )
        if denied is not None:
            return denied_plan(denied, now)
        try:
            new = self.table.grant(
                here,
                info,
                collection=bool(exists and req.target.slash) or not here,
                infinite=infinite,
                timeouts=timeouts,
                principal=principal,
                now=now,
                client=client_key(req.client),
            )
        except LockRefused as exc:
            if exc.refusal is LockRefusal.CONFLICT:
                return conflict_plan(exc.lock, now)
            return full_plan(now)  # the table, the client's share, or the resource's
        return await self._made(new, exists, now, create)

    async def _made(
        self, new: Lock, exists: bool, now: float, create: Callable[[], Awaitable[int]]
    ) -> Plan:
        created = False
        kept = exists
        try:
            if not exists:
                status = await create()
                if status >= 300:
                    return error_plan(status, now)
                created, kept = status == 201, True
        finally:
            if not kept:
                self.table.discard(new.token)
        return lock_plan(self.table.covering(new.root, now), now, new=new, created=created)

    def _refresh(
        self,
        req: RequestFacts,
        field: IfField,
        at: tuple[LockPath, str | None],
        timeouts: tuple[int | None, ...],
        principal: str | None,
        now: float,
    ) -> Plan:
        here, tag = at  # the resource and its current ETag (None: not looked up)
        denied = check_request(
            self.table,
            field,
            here,
            [],
            etag_of=lambda p: tag if p == here else None,
            resolve=_tag_path,
            principal=principal,
            now=now,
        )
        if denied is not None:
            return denied_plan(denied, now)
        fresh = self.table.refresh(
            here, field.tokens, timeouts=timeouts, principal=principal, now=now
        )
        if not fresh:
            return precondition_failed_plan(now)
        return lock_plan(self.table.covering(here, now), now)

    async def unlock(self, req: RequestFacts, path: str, now: float) -> Plan:
        """UNLOCK (§9.11): 204; 400 without a Lock-Token; 409 when it names
        no lock on ``path``; 403 for another principal's lock.

        Cancellation handling: it holds nothing across an await (it has
        none).
        """
        try:
            token = parse_lock_token(_raw(LOCK_TOKEN.of(req)))
        except HTTPError as exc:
            return error_plan(exc.status, now)
        try:
            self.table.release(token, lock_path(path), _principal(req), now)
        except LockRefused as exc:
            if exc.refusal is LockRefusal.NOT_OWNER:
                return error_plan(403, now)
            return unlock_mismatch_plan(now)
        return unlocked_plan(now)


def _has_etag(field: IfField | None) -> bool:
    """Does the If field compare an entity tag (§10.4.2)?"""
    return field is not None and any(
        c.etag is not None for lst in field.lists for c in lst.conditions
    )


def _raw(value: str | None) -> bytes | None:
    return value.encode("latin-1") if value is not None else None
