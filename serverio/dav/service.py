"""WebDAV class 1 on the root (``--webdav``; RFC 4918, issue 29).

:class:`DavService` is the write step the server installs as the
pipeline's ``write`` hook with :data:`DAV_METHODS` as its methods
(:attr:`serverio.pipeline.hooks.Hooks.write_methods`) when ``--webdav``
is given: OPTIONS, PROPFIND, PROPPATCH, MKCOL, COPY, MOVE, LOCK, UNLOCK,
and PUT and DELETE (a file's are the uploads' own,
:class:`serverio.upload.service.Uploads`, after the lock guard; a
collection's DELETE is a tree removal here).  GET and HEAD stay on the
read path, untouched: a plain GET pays one set-membership test.

Every method: the target (and a COPY/MOVE's ``Destination``, parsed by
:func:`serverio.dav.ifheader.parse_destination` with the reads' target
rules) refused when hidden or a write temporary; the access hook asked
(``Kind.WRITE`` with the right it needs: upload for what it creates,
overwrite for what it changes, delete for what it removes, mkdir for
MKCOL, lock for LOCK and UNLOCK, so ``[[access]]`` and ``[[writable]]``
rules apply to every DAV write; a
PROPFIND or a COPY's source as a read of a file or listing; every member
a tree operation touches as well, :mod:`serverio.dav.methods`; a
PROPFIND's members through the listings' filter, :attr:`DavService.visible`;
a new depth-infinity LOCK as a tree write, ``AccessTarget(tree=True)``:
every rule that can reach a member); the target
opened under the root's containment in the ``write`` pool
(:func:`serverio.fs.writer.open_target`); the preconditions (If-Match,
If-None-Match, If-Unmodified-Since: 412) and the lock guard
(:mod:`serverio.dav.guard`, 412 / 423) decided; then one blocking
operation (:mod:`serverio.fs.davtree`) in the pool.  Every cache sees the
change at once (the warm-file entries forgotten: all of them after a
tree operation).  COPY, MOVE and DELETE live in :mod:`serverio.dav.methods`.
"""

from __future__ import annotations

import logging
import stat
from collections.abc import Awaitable, Callable
from typing import Final

from ..concurrency.blocking import PoolSaturated, run_blocking
from ..config import Config
from ..errors import HTTPError
from ..fs.davtree import (
    DirScan,
    Found,
    TreeJob,
    TreeTooLarge,
    lookup,
    make_collection,
    read_props,
    write_props,
)
from ..fs.filecache import FileCache
from ..fs.hide import hide_rules
from ..fs.opener import ContainedRoot
from ..fs.writer import WriteRefused
from ..http.access import AccessTarget, Kind, Right
from ..http.core import ALLOW, Plan, RequestFacts, error_plan
from ..http.listing import Entry
from ..http.target import Target, is_write_temp
from ..model import ChunkSource
from ..pipeline.hooks import WRITE_METHODS, Admit, WriteContent
from ..site.rules import match_path
from ..upload.decide import REFUSAL_STATUS, errno_status, refusal_problem
from ..upload.resolved import Resolving, linked_below, resolved_target
from ..upload.service import ALLOW_WRITES, CommitGate, Uploads
from . import methods
from .answers import (
    ALLOW_DAV,
    condition_plan,
    multistatus_plan,
    options_plan,
    status_plan,
    stream_plan,
)
from .common import (
    DavBase,
    field,
    read_access,
    read_body,
    refused_plan,
    rel,
    write_access,
)
from .fields import DAV_IF, DEPTH
from .guard import NO_LOCKS, Done, LockGuard, path_href
from .ifheader import Depth, parse_depth
from .props import apply_patch, dump_dead, load_dead, propfind_response
from .xml import (
    MULTISTATUS_HEAD,
    MULTISTATUS_TAIL,
    Propfind,
    Response,
    parse_propfind,
    parse_proppatch,
    response_xml,
)

__all__ = ["DAV_METHODS", "PREFIX_METHODS", "DavService"]

log = logging.getLogger("serverio")

DAV_METHODS: Final = frozenset(
    (
        b"OPTIONS",
        b"PROPFIND",
        b"PROPPATCH",
        b"MKCOL",
        b"COPY",
        b"MOVE",
        b"LOCK",
        b"UNLOCK",
        b"PUT",
        b"DELETE",
    )
)
# With --webdav-prefix the step is asked about these (DavService.takes):
# the DAV methods under the prefix, the uploads' elsewhere.
PREFIX_METHODS: Final = DAV_METHODS | WRITE_METHODS
_BATCH: Final = 256  # members per pool call of a PROPFIND listing

Visible = Callable[[RequestFacts, tuple[str, ...], list[Entry]], list[Entry]]
Step = Callable[
    [RequestFacts, WriteContent, float, Admit], Awaitable["Plan | tuple[Plan, ChunkSource]"]
]


class DavService(DavBase):
    """The WebDAV write step; one per server, on the uploads' pool.

    Cancellation handling: what an operation holds across its pool calls
    is a :class:`serverio.fs.davtree.TreeJob`, released in a ``finally``
    (an abandoned pool thread closes it and stops at its next member); a
    PROPFIND listing's body closes its job when the transport closes it.
    """

    def __init__(
        self,
        config: Config,
        opener: Callable[[], ContainedRoot],
        files: FileCache,
        uploads: Uploads,
        guard: LockGuard = NO_LOCKS,
    ) -> None:
        super().__init__(config, opener, files, uploads, guard)
        # The site's access rules on listed names (Site.visible_entries,
        # set by the server when it has auth rules): a PROPFIND lists the
        # members a listing would show this client, no others.
        self.visible: Visible | None = None
        self._steps: dict[bytes, Step] = {
            b"PROPFIND": self._propfind,
            b"PROPPATCH": self._proppatch,
            b"MKCOL": self._mkcol,
            b"PUT": self._put,
            b"DELETE": lambda *a: methods.delete(self, *a),
            b"COPY": lambda *a: methods.copy_move(self, *a),
            b"MOVE": lambda *a: methods.copy_move(self, *a),
            b"LOCK": self._lock,
            b"UNLOCK": self._unlock,
        }

    def allow(self, target: Target) -> bytes:
        """The methods ``target`` allows, for the core's OPTIONS and 405
        (the pipeline's ``allow`` hook, RFC 9110 §10.2.1): WebDAV's at or
        under ``--webdav-prefix`` (everywhere without one), the uploads'
        elsewhere."""
        if self.at_dav(target.segments):
            return ALLOW_DAV
        return ALLOW_WRITES if self.config.uploads.upload else ALLOW

    def takes(self, req: RequestFacts) -> bool:
        """Does :meth:`write` answer ``req`` (one of :data:`PREFIX_METHODS`;
        the pipeline's ``write_takes`` with ``--webdav-prefix``)?  Under the
        prefix the DAV methods (a POST there is the read path's 405);
        elsewhere the uploads' own (PUT, DELETE, the form's POST), as
        without ``--webdav``."""
        if self.at_dav(req.target.segments):
            return req.method in DAV_METHODS
        return req.method in WRITE_METHODS

    async def write(
        self, req: RequestFacts, content: WriteContent, now: float, admit: Admit
    ) -> Plan | tuple[Plan, ChunkSource]:
        """The answer to one DAV request (the pipeline's ``write`` hook);
        outside ``--webdav-prefix``, the uploads' answer.

        Cancellation handling: see the class; nothing is left held.
        """
        if self.top and not self.at_dav(req.target.segments):
            return await self.uploads.write(req, content, now, admit)
        # Every method's targets (source and destination) are decided on
        # where a symlink inside the root leads too (serverio.upload.resolved).
        uploads = self.uploads
        admit = Resolving.wrap(admit, uploads.pool, self.opener, now, uploads.resolving)
        if req.method == b"OPTIONS":
            return options_plan(self.guard.classes, now)
        target = req.target
        if is_write_temp(target.segments) or (target.hidden and not self.config.files.hidden):
            return error_plan(404 if req.method == b"PROPFIND" else 403, now)
        step = self._steps[req.method]
        try:
            return await step(req, content, now, admit)
        except WriteRefused as exc:
            # The reason said as the uploads say it (a refused name names its rule).
            value = exc.refusal.value
            return error_plan(REFUSAL_STATUS[value], now, problem=refusal_problem(value))
        except TreeTooLarge:
            return error_plan(403, now)  # over --webdav-max-tree: nothing was changed
        except PoolSaturated:
            return error_plan(503, now, close=True)
        except OSError as exc:
            status = errno_status(exc.errno)
            if status == 500:
                log.error("%s of %s failed: %s", req.method.decode(), target.relpath, exc)
            return error_plan(status, now)

    # ------------------------------------------------------------ methods

    async def _put(
        self, req: RequestFacts, content: WriteContent, now: float, admit: Admit
    ) -> Plan:
        segments = req.target.segments
        if not segments:
            return await self.uploads.write(req, content, now, admit)
        path = rel(segments)
        job = TreeJob()
        try:
            places = []
            if DAV_IF.of(req) is not None:  # its entity tags need the file's ETag
                places.append((path, await self.place(job, segments)))
            known = await self.known_etags(req, job, places)
            paths = [path, rel(segments[:-1])]
            got = self.guard.check(req, paths, depth_infinity=False, etag_of=known.get, now=now)
            if got is not None and got[0] == 423:
                # Replacing a file leaves its parent's membership as it
                # is (RFC 4918 §7.4): only a new member needs the
                # parent's token.  Looked at only when refused.
                place = places[0][1] if places else await self.place(job, segments)
                if place.current is not None:
                    paths = [path]
                    got = self.guard.check(
                        req, paths, depth_infinity=False, etag_of=known.get, now=now
                    )
        finally:
            self.release(job)
        if got is not None:
            return refused_plan(got, now)
        return await self.uploads.write(req, content, now, admit, self.gate(req, paths, known))

    def gate(self, req: RequestFacts, paths: list[str], known: dict[str, str | None]) -> CommitGate:
        """The check at the commit of a write that passed the guard when it
        started (:meth:`~serverio.dav.guard.LockGuard.committing`): a lock
        granted while its content streamed refuses it then (423, the
        temporary removed), and no LOCK covering it is granted until the
        commit ends.  The If field's entity tags are compared with the
        ETags seen when it started (``known``)."""

        def at_commit() -> Plan | Done:
            now = self.clock()
            got = self.guard.committing(req, paths, etag_of=known.get, now=now)
            return refused_plan(got, now) if isinstance(got, tuple) else got

        return at_commit

    async def _mkcol(
        self, req: RequestFacts, content: WriteContent, now: float, admit: Admit
    ) -> Plan:
        target = req.target
        if req.has_body:
            return error_plan(415, now)  # RFC 4918 §9.3.1: no MKCOL body is understood
        if not target.segments:
            return error_plan(405, now, allow=ALLOW_DAV)  # the root is always there
        refusal = await write_access(admit, target, Right.MKDIR)
        if refusal is not None:
            return refusal
        job = TreeJob()
        try:
            place = await self.place(job, target.segments)
            if place.current is not None:
                return error_plan(405, now, allow=ALLOW_DAV)  # §9.3.1: already mapped
            path = rel(target.segments)
            parent = rel(target.segments[:-1])
            refusal = await self.guarded(req, [path, parent], False, now, job, [(path, place)])
            if refusal is not None:
                return refusal
            await self.room(job, place, 0)
            await self.blocking(job, make_collection, place)
        finally:
            self.release(job)
        self.changed(path)
        self.uploads.stats.writes.directories += 1  # as the form's new folder
        return status_plan(201, now, target.url_path(slash=True))

    async def _propfind(
        self, req: RequestFacts, content: WriteContent, now: float, admit: Admit
    ) -> Plan | tuple[Plan, ChunkSource]:
        depth = parse_depth(field(DEPTH.of(req)), Depth.INFINITY)
        bound = self.config.uploads.webdav_depth_infinity
        if depth is Depth.INFINITY and not bound:
            return condition_plan(403, "propfind-finite-depth", now)  # RFC 4918 §9.1
        ask = parse_propfind(await read_body(content))
        path = rel(req.target.segments)
        small = self.config.files.small_file_size
        found = await run_blocking(self.pool, lookup, self.opener(), path, small)
        if found is None:
            # Nothing there: still decided as a read of that path first (and
            # of where a link on the way led), so a 404 below a protected
            # path tells no more than a 401 does (as for a GET).
            refusal = await read_access(admit, req.target, req.target.slash)
            return refusal if refusal is not None else error_plan(404, now)
        is_dir = stat.S_ISDIR(found.st.st_mode)
        refusal = await read_access(admit, req.target, is_dir)
        if refusal is not None:
            return refusal
        first = self.response(path, found, ask, now)
        if not is_dir or depth is Depth.ZERO:
            return multistatus_plan([first], now)
        limit = bound if depth is Depth.INFINITY else None
        return stream_plan(now), _Listing(self, req, ask, first, limit, now)

    def response(self, path: str, found: Found, ask: Propfind, now: float) -> Response:
        is_dir = stat.S_ISDIR(found.st.st_mode)
        href = path_href(path, collection=is_dir)
        return propfind_response(href, found, self.config, ask, self.locks(path, now))

    async def _proppatch(
        self, req: RequestFacts, content: WriteContent, now: float, admit: Admit
    ) -> Plan:
        target = req.target
        refusal = await write_access(admit, target, Right.OVERWRITE)
        if refusal is not None:
            return refusal
        ops = parse_proppatch(await read_body(content))
        path = rel(target.segments)
        job = TreeJob()
        try:
            place = await self.place(job, target.segments)
            if place.current is None:
                return error_plan(404, now)
            refusal = await self.guarded(req, [path], False, now, job, [(path, place)])
            if refusal is not None:
                return refusal
            stored = await self.blocking(job, read_props, place)
            dead = load_dead(stored if isinstance(stored, bytes) else None)
            new, stats = apply_patch(dead, ops)
            if new is not None:
                data = dump_dead(new)
                await self.room(job, place, len(data or b""))
                await self.blocking(job, write_props, place, data)
            is_dir = stat.S_ISDIR(place.current.st_mode)
        finally:
            self.release(job)
        return multistatus_plan([Response(path_href(path, collection=is_dir), stats)], now)

    async def _lock(
        self, req: RequestFacts, content: WriteContent, now: float, admit: Admit
    ) -> Plan:
        if self.guard.classes == b"1":
            return error_plan(405, now, allow=ALLOW_DAV)
        target = req.target
        refusal = await write_access(admit, target, Right.LOCK)
        if refusal is not None:
            return refusal
        body = await read_body(content)
        if body.strip() and _infinite(req):
            # A new depth-infinity lock covers every member, existing or not
            # (RFC 4918 §7.4): the client must be able to write each itself
            # (every auth rule and [[writable]] table that can reach below),
            # or it would lock their owners out (issue 41).
            refusal = await admit(
                AccessTarget((_collection(target),), Kind.WRITE, Right.LOCK, tree=True)
            )
            if refusal is not None:
                return refusal
            refusal = await self._lock_links(target, admit)
            if refusal is not None:
                return refusal
        path = rel(target.segments)
        small = self.config.files.small_file_size
        found = await run_blocking(self.pool, lookup, self.opener(), path, small)
        if found is None:
            # A lock on an unmapped URL makes an empty file (RFC 4918 §7.3).
            refusal = await write_access(admit, target, Right.UPLOAD)
            if refusal is not None:
                return refusal

        async def create() -> int:
            status: int = await methods.create_empty(self, req, now)
            return status

        async def etag() -> str | None:
            return await self.etag(target.segments)

        return await self.guard.lock(req, body, path, found is not None, now, create, etag)

    async def _lock_links(self, target: Target, admit: Admit) -> Plan | None:
        """A new depth-infinity LOCK covers what the in-root links below
        the collection lead to (:func:`~serverio.upload.resolved.linked_below`):
        the client must be able to lock each there too, or an anonymous
        lock of ``/c/`` would keep ``/c/lf -> ../a/b/x.txt``'s owner out of
        ``/c/lf``.  Only where rules can refuse (``[[auth]]``, ``[[access]]``,
        ``[[writable]]``): without them every client may lock everything.

        Cancellation handling: the walk is one pooled call (abandoned on
        cancel: its thread closes its own descriptors); nothing is locked
        before it and the answers of the access hook are in.  Past
        ``--webdav-max-tree`` it raises :class:`TreeTooLarge` (403)."""
        uploads = self.uploads
        if not uploads.resolving:
            return None
        limit = self.config.uploads.webdav_max_tree
        led = await run_blocking(
            uploads.pool, linked_below, self.opener(), rel(target.segments), limit
        )
        for path in led:
            refusal = await admit(
                AccessTarget((path,), Kind.WRITE, Right.LOCK, tree=path.endswith("/"))
            )
            if refusal is not None:
                return refusal
        return None

    async def _unlock(
        self, req: RequestFacts, content: WriteContent, now: float, admit: Admit
    ) -> Plan:
        if self.guard.classes == b"1":
            return error_plan(405, now, allow=ALLOW_DAV)
        refusal = await write_access(admit, req.target, Right.LOCK)
        if refusal is not None:
            return refusal
        return await self.guard.unlock(req, rel(req.target.segments), now)


def _infinite(req: RequestFacts) -> bool:
    """Does the LOCK ask for depth infinity (the default, §9.10.3)?  A
    malformed Depth is the guard's 400."""
    try:
        return parse_depth(field(DEPTH.of(req)), Depth.INFINITY) is Depth.INFINITY
    except HTTPError:
        return False


def _collection(target: Target) -> str:
    """``target``'s match path as a collection's (``/a/b/``): what a
    depth-infinity lock covers is below it."""
    path = match_path(target)
    return path if path.endswith("/") else path + "/"


class _Listing:
    """The body of a PROPFIND of a collection: the target's response,
    then its members in batches from the pool (Depth 1; Depth infinity
    descends, at most ``limit`` resources), each batch serialised as it
    is sent: memory bounded whatever the directory's size.

    Cancellation handling: :meth:`close` (the transport's, once) releases
    the job; a batch read still running in an abandoned thread closes the
    scan's descriptors as it ends.
    """

    def __init__(
        self,
        svc: DavService,
        req: RequestFacts,
        ask: Propfind,
        first: Response,
        limit: int | None,
        now: float,
    ) -> None:
        path = rel(req.target.segments)
        self.svc = svc
        self.req = req
        self.ask = ask
        self.first: Response | None = first
        self.limit = limit
        self.now = now
        self.pending = [path]
        self.count = 1
        self.scan: DirScan | None = None
        self.scan_path = path
        # Where the target leads when an in-root link is on its way (a
        # PROPFIND of /pub/la/ with pub/la -> ../a: "a"), found before the
        # first scan: its members' rules are decided there too.  Members
        # are never links (DirScan), so a member's real path is this plus
        # its path below the target.
        self.top = path
        self.real_top: str | None = None
        self.resolved = svc.visible is None  # no auth rules: nothing to decide
        self.job = TreeJob()
        self.ended = False
        self.batch_size = _BATCH  # 0 once the Depth infinity bound is reached

    async def next_chunk(self) -> bytes:
        if self.first is not None:
            first, self.first = self.first, None
            return MULTISTATUS_HEAD + response_xml(first)
        svc = self.svc
        while True:
            if self.scan is None:
                if not self.pending:
                    if self.ended:
                        return b""
                    self.ended = True
                    return MULTISTATUS_TAIL
                self.scan_path = path = self.pending.pop()
                cfg = svc.config
                if not self.resolved:
                    real = await svc.blocking(
                        self.job, resolved_target, svc.opener(), f"/{path}/", True
                    )
                    self.real_top = real.strip("/") if isinstance(real, str) else None
                    self.resolved = True
                scan = await svc.blocking(
                    self.job,
                    DirScan,
                    svc.opener(),
                    path,
                    cfg.files.hidden,
                    cfg.files.small_file_size,
                )
                assert isinstance(scan, DirScan)
                self.job.hold(scan.close)
                self.scan = scan
            batch = await svc.blocking(self.job, self.scan.batch, self.batch_size)
            assert isinstance(batch, list)
            if not batch:
                self.job.closers.remove(self.scan.close)
                self.scan.close()
                self.scan = None
                continue
            hide = hide_rules(svc.config.files.hide, svc.config.files.hide_tables)
            if hide.active:  # --hide: not a member of a listing (still served by URL)
                batch = [f for f in batch if not hide.hides(self.scan_path, f.name)]
            chunk = b"".join(self._responses(batch))
            if chunk:  # never b"" before the end: that would end the body
                return chunk

    def _responses(self, batch: list[Found]) -> list[bytes]:
        """The batch's responses: the members a listing of the directory
        shows this client (the site's access rules on listed names, as
        :meth:`~serverio.site.service.Site.visible_entries` decides for
        listings and archives; a protected collection is not descended
        into either); with Depth infinity, its collections are
        queued and nothing past ``limit`` resources is answered (the rest
        of the walk is dropped: the bound, ``--webdav-depth-infinity``)."""
        out = []
        base = self.scan_path
        for found in self._visible(batch):
            if self.limit is not None and self.count >= self.limit:
                self.pending.clear()
                self.batch_size = 0  # the scan ends at the next pull
                break
            path = f"{base}/{found.name}" if base else found.name
            self.count += 1
            out.append(response_xml(self.svc.response(path, found, self.ask, self.now)))
            if self.limit is not None and stat.S_ISDIR(found.st.st_mode):
                self.pending.append(path)
        return out

    def _visible(self, batch: list[Found]) -> list[Found]:
        visible = self.svc.visible
        if visible is None:
            return batch
        real = self._real(self.scan_path)
        entries = [
            Entry(
                f.name,
                stat.S_ISDIR(f.st.st_mode),
                0,
                None,
                None if real is None else f"{real}/{f.name}" if real else f.name,
            )
            for f in batch
        ]
        segments = tuple(self.scan_path.split("/")) if self.scan_path else ()
        kept = {id(e) for e in visible(self.req, segments, entries)}
        return [f for f, e in zip(batch, entries, strict=True) if id(e) in kept]

    def _real(self, scan_path: str) -> str | None:
        """Where the directory ``scan_path`` (the target or below it) lies
        when the target was reached through a link, else None."""
        if self.real_top is None:
            return None
        below = scan_path[len(self.top) :].strip("/")
        return "/".join(p for p in (self.real_top, below) if p)

    def close(self) -> None:
        if self.job.release():
            self.job.close()
