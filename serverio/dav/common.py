"""What every WebDAV method step shares (:class:`DavBase`), and helpers.

:class:`serverio.dav.service.DavService` is a :class:`DavBase`; the steps
of :mod:`serverio.dav.methods` take one (no import of the service, so no
cycle).
"""

from __future__ import annotations

import stat
import time
from collections.abc import Callable, Sequence

from ..concurrency.blocking import Pool, run_blocking
from ..config import Config
from ..errors import HTTPError
from ..fs.davtree import TreeJob, copy_room, root_place
from ..fs.filecache import FileCache
from ..fs.opener import ContainedRoot
from ..fs.prepare import stat_facts
from ..fs.writer import Placement, WriteRefused, current_bytes, open_target, require_free
from ..http.access import AccessTarget, Kind, Right, served_target
from ..http.core import FileFacts, Plan, RequestFacts, content_digest, error_plan
from ..http.target import Target
from ..pipeline.hooks import Admit, WriteContent
from ..site.rules import match_path
from ..upload.service import Uploads
from .answers import condition_plan
from .fields import DAV_IF
from .guard import LockGuard, path_href
from .props import Locks
from .xml import MAX_XML_BYTES

__all__ = [
    "DavBase",
    "field",
    "read_access",
    "read_body",
    "refused_plan",
    "rel",
    "write_access",
]


def field(value: str | None) -> bytes | None:
    """A request field's raw bytes (None when absent)."""
    return None if value is None else value.encode("latin-1")


def rel(segments: Sequence[str]) -> str:
    """A guard path (``""`` for the root)."""
    return "/".join(segments)


async def read_body(content: WriteContent, limit: int = MAX_XML_BYTES) -> bytes:
    """A DAV request's XML body, whole (413 past ``limit``)."""
    parts: list[bytes] = []
    size = 0
    while (chunk := await content.next_chunk()) is not None:
        size += len(chunk)
        if size > limit:
            raise HTTPError(413, "XML body too large")
        parts.append(chunk)
    return b"".join(parts)


async def write_access(
    admit: Admit, target: Target, right: Right, also: Right | None = None
) -> Plan | None:
    """The access hook on a write of ``target`` needing ``right`` (or
    ``also``: either will do)."""
    return await admit(AccessTarget((match_path(target),), Kind.WRITE, right, also=also))


async def read_access(admit: Admit, target: Target, is_dir: bool) -> Plan | None:
    """The access hook on a read of ``target`` (a listing or a file)."""
    path = match_path(target)
    if is_dir and not path.endswith("/"):
        path += "/"
    return await admit(served_target(path))


def refused_plan(got: tuple[int, str], now: float) -> Plan:
    """The plan of a lock guard's refusal: 423 with
    ``DAV:lock-token-submitted`` naming the locked resource, or 412."""
    status, path = got
    if status == 423:
        return condition_plan(423, "lock-token-submitted", now, path_href(path))
    return error_plan(status, now)


class DavBase:
    """The service's state and the steps' shared helpers.

    Cancellation handling: :meth:`place` and :meth:`blocking` run in the
    pool as a :class:`~serverio.fs.davtree.TreeJob`'s thread; the caller
    :meth:`release`\\ s the job in a ``finally``.
    """

    def __init__(
        self,
        config: Config,
        opener: Callable[[], ContainedRoot],
        files: FileCache,
        uploads: Uploads,
        guard: LockGuard,
    ) -> None:
        self.config = config
        self.opener = opener
        self.files = files
        self.uploads = uploads
        self.guard = guard
        self.pool: Pool = uploads.pool
        # The lock table's clock (epoch seconds, as the pipeline's ``now``)
        # for a check made later than the request's start (a commit).
        self.clock: Callable[[], float] = time.time
        # --webdav-prefix's segments (() for the whole root): DAV is served
        # at and under them; the top itself is never removed or moved.
        prefix = config.uploads.webdav_prefix
        self.top: tuple[str, ...] = tuple(prefix[1:].split("/")) if prefix else ()

    def at_dav(self, segments: tuple[str, ...]) -> bool:
        """Is ``segments`` at or under the WebDAV prefix?"""
        return segments[: len(self.top)] == self.top

    def is_top(self, segments: tuple[str, ...]) -> bool:
        """Is ``segments`` the served top (the root, or the prefix) or above it?"""
        return len(segments) <= len(self.top)

    # ------------------------------------------------------------ helpers

    async def blocking(self, job: TreeJob, fn: Callable[..., object], *args: object) -> object:
        """``fn(*args)`` in the pool as ``job``'s thread."""
        return await run_blocking(self.pool, job.run, fn, *args)

    async def place(self, job: TreeJob, segments: tuple[str, ...]) -> Placement:
        """``segments``' placement (the root's own for none), held by ``job``."""
        if not segments:
            got: Placement = await run_blocking(
                self.pool, root_place, self.opener(), late_close=Placement.close
            )
        else:
            got = await run_blocking(
                self.pool,
                open_target,
                self.opener(),
                segments,
                self.config.files.hidden,
                late_close=Placement.close,
            )
        job.hold(got.close)
        if got.dir_fd < 0:
            # The windows containment strategy works by path: the tree
            # operations need directory descriptors (docs/features.md).
            raise HTTPError(501, "WebDAV needs directory descriptors")
        return got

    async def room(self, job: TreeJob, place: Placement, need: int) -> None:
        """``--min-free-space`` before a DAV write of ``need`` bytes into
        ``place``'s filesystem (a dead-property file; 0 for a new
        collection or an empty file: the reserve alone):
        :class:`~serverio.fs.writer.WriteRefused` ``NO_SPACE`` (507) when
        it would leave less free.  Nothing is looked at without a reserve."""
        reserve = self.config.uploads.min_free_space
        if reserve:
            await self.blocking(job, require_free, place, reserve + need)

    async def copy_room(
        self, job: TreeJob, src: Placement, dst: Placement, move: bool, infinity: bool
    ) -> None:
        """:meth:`room` for a COPY (or a MOVE across filesystems) of
        ``src`` to ``dst``: the bytes of the file or of the tree
        (:func:`serverio.fs.davtree.copy_room`)."""
        reserve = self.config.uploads.min_free_space
        if reserve:
            limit = self.config.uploads.webdav_max_tree
            await self.blocking(job, copy_room, src, dst, move, infinity, limit, reserve)

    @staticmethod
    def release(job: TreeJob) -> None:
        if job.release():
            job.close()

    async def current_facts(self, job: TreeJob, place: Placement) -> FileFacts | None:
        """The facts (so the ETag) a GET of ``place``'s file shows; None:
        no file there (a collection has no ETag here)."""
        cur = place.current
        if cur is None or not stat.S_ISREG(cur.st_mode):
            return None
        limit = self.config.files.small_file_size
        data = await self.blocking(job, current_bytes, place, limit)
        digest = content_digest(data) if isinstance(data, bytes) else None
        return stat_facts(cur, self.config, digest)

    async def etag(self, segments: tuple[str, ...]) -> str | None:
        """The current strong ETag of the file at ``segments`` (the one a
        GET sends), None for no file there (or a collection)."""
        job = TreeJob()
        try:
            try:
                place = await self.place(job, segments)
            except WriteRefused:
                return None
            facts = await self.current_facts(job, place)
        finally:
            self.release(job)
        return None if facts is None else facts.etag or None

    async def guarded(
        self,
        req: RequestFacts,
        paths: Sequence[str],
        infinity: bool,
        now: float,
        job: TreeJob | None = None,
        places: Sequence[tuple[str, Placement]] = (),
    ) -> Plan | None:
        """The lock guard's refusal (412, or 423 naming the locked
        resource), or None.  With an ``If`` field, the ETags of
        ``places`` (path and placement, held by ``job``) are looked up
        for its entity-tag conditions (RFC 4918 §10.4.2)."""
        known = await self.known_etags(req, job, places)
        got = self.guard.check(req, paths, depth_infinity=infinity, etag_of=known.get, now=now)
        return None if got is None else refused_plan(got, now)

    async def known_etags(
        self, req: RequestFacts, job: TreeJob | None, places: Sequence[tuple[str, Placement]]
    ) -> dict[str, str | None]:
        """The current ETags of ``places`` when the request has an ``If``
        field (else none: nothing compares them)."""
        known: dict[str, str | None] = {}
        if DAV_IF.of(req) is not None and job is not None:
            for path, place in places:
                facts = await self.current_facts(job, place)
                known[path] = None if facts is None else facts.etag or None
        return known

    def locks(self, path: str, now: float) -> Locks:
        return Locks(self.guard.supported(), self.guard.discovery(path, now))

    def changed(self, *paths: str, tree: bool = False) -> None:
        """Every cache sees a write: the warm-file entries of ``paths``
        (every entry after a tree operation: members moved with it)."""
        if tree:
            self.files.clear()
            return
        for path in paths:
            self.files.forget(path or ".")
