"""The WebDAV steps that change trees: DELETE, COPY, MOVE (RFC 4918 §9.6,
§9.8, §9.9), and the empty resource a LOCK of an unmapped URL makes.

Each takes the service (a :class:`~serverio.dav.common.DavBase`) and runs
its blocking work through a :class:`~serverio.fs.davtree.TreeJob`.  The
order: the Destination (502 for another server, 403 for a hidden or
temporary name, the source itself or a path inside it), Depth and
Overwrite, the access hook on both ends, both placements under
containment, 412 for ``Overwrite: F`` onto an existing resource and for
a failed If-Match / If-None-Match / If-Unmodified-Since on the source,
the lock guard on everything changed; then an existing destination is
removed first unless a file replaces a file (one atomic rename, §9.8.4,
§9.9.3), and the operation runs.  201 when the destination was new,
204 when it existed, 207 with the members that failed.

Members (issue 41): a tree operation touches every member of its
collections, so before anything changes the members are listed (at most
``--webdav-max-tree``, :func:`~serverio.fs.davtree.list_tree`) and the
same access hook as a single file is asked on each — a COPY's source
members as reads (the file or listing), a MOVE's and a DELETE's as
``delete``, every member a COPY or MOVE makes at the destination as
``put``, and an existing destination a collection replaces (or that is
a collection) with every member as ``delete`` (a file replacing a file
stays ``put``, as a PUT over it).  The first refusal answers the whole
request (401 with its challenge, 403, 429, 503) and nothing is changed;
the operation then touches only the members that were asked about (one
made meanwhile is left alone and named in a 207).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from ..fs.davtree import TreeJob, copy_tree, list_tree, move_tree, remove_tree, write_props
from ..fs.opener import ContainedRoot
from ..fs.writer import Placement, Refusal, WriteRefused
from ..http.access import AccessTarget, Kind, Right, served_target
from ..http.core import Plan, RequestFacts, error_plan
from ..http.extra import HOST
from ..http.target import Target, is_write_temp
from ..pipeline.hooks import Admit, WriteContent
from ..upload.decide import errno_status, has_preconditions, precondition_status
from ..upload.resolved import resolved_target
from .answers import multistatus_plan, status_plan
from .common import DavBase, field, read_access, rel, write_access
from .fields import DEPTH, DESTINATION, OVERWRITE
from .guard import path_href
from .ifheader import Depth, parse_depth, parse_destination, parse_overwrite
from .xml import Response

__all__ = ["copy_move", "create_empty", "delete"]

# The members the access hook allowed, for each end of a tree operation
# (None: no collection's members are touched there).
Checked = tuple[frozenset[str] | None, frozenset[str] | None]


def _failures(base: str, failed: list[tuple[str, int]], now: float) -> Plan:
    """207 naming each member that failed (§9.6.1: not its ancestors)."""
    out = []
    for sub, code in failed:
        path = f"{base}/{sub.rstrip('/')}" if base else sub.rstrip("/")
        out.append(
            Response(path_href(path, collection=sub.endswith("/")), status=errno_status(code))
        )
    return multistatus_plan(out, now)


def _is_dir(place: Placement) -> bool:
    return place.current is not None and stat.S_ISDIR(place.current.st_mode)


async def _drop_props(svc: DavBase, segments: tuple[str, ...]) -> None:
    """Remove the dead properties of a deleted file (its own pool call)."""
    job = TreeJob()
    try:
        place = await svc.place(job, segments)
        await svc.blocking(job, write_props, place, None)
    finally:
        svc.release(job)


def _member_path(base: str, sub: str, is_dir: bool) -> str:
    """The match path of member ``sub`` of collection ``base`` (a guard
    path): ``/base/sub``, ``/base/sub/`` for a collection."""
    path = f"/{base}/{sub}" if base else "/" + sub
    return path + "/" if is_dir else path


def _reading(path: str) -> AccessTarget:
    return served_target(path)  # a file or a listing, as a GET of it


def _deleting(path: str) -> AccessTarget:
    return AccessTarget((path,), Kind.WRITE, Right.DELETE)


def _putting(path: str) -> AccessTarget:
    # A member made anew below a destination that did not exist, or whose
    # old members were removed (the delete right asked for each first).
    return AccessTarget((path,), Kind.WRITE, Right.UPLOAD)


async def _admit_members(
    admit: Admit,
    base: str,
    members: list[tuple[str, bool]],
    target: Callable[[str], AccessTarget],
) -> Plan | None:
    """The access hook on every member of collection ``base`` (as
    ``target`` makes it): the first refusal, or None.  A rule passed once
    is not checked again (the pipeline records it)."""
    for sub, is_dir in members:
        refusal = await admit(target(_member_path(base, sub, is_dir)))
        if refusal is not None:
            return refusal
    return None


async def delete(
    svc: DavBase, req: RequestFacts, content: WriteContent, now: float, admit: Admit
) -> Plan:
    """DELETE (§9.6): a file through the uploads' own step (its
    preconditions, its counters), then its dead properties; a collection
    with every member (Depth infinity, the only depth allowed, §9.6.1),
    at most ``--webdav-max-tree``."""
    target = req.target
    if svc.is_top(target.segments):
        return error_plan(403, now)  # the root (or --webdav-prefix's top) is never removed
    if parse_depth(field(DEPTH.of(req)), Depth.INFINITY) is not Depth.INFINITY:
        return error_plan(400, now)
    refusal = await write_access(admit, target, Right.DELETE)
    if refusal is not None:
        return refusal
    path = rel(target.segments)
    job = TreeJob()
    try:
        try:
            place = await svc.place(job, target.segments)
        except WriteRefused as exc:
            if exc.refusal is Refusal.NO_PARENT:
                return error_plan(404, now)
            raise
        if place.current is None:
            return error_plan(404, now)
        parent = rel(target.segments[:-1])
        refusal = await svc.guarded(req, [path, parent], _is_dir(place), now, job, [(path, place)])
        if refusal is not None:
            return refusal
        if not _is_dir(place):
            svc.release(job)

            async def allowed(_: object) -> Plan | None:
                return None  # admitted above

            plan = await svc.uploads.write(req, content, now, allowed)
            if plan.status == 204:
                await _drop_props(svc, target.segments)
                svc.guard.moved(path, None)
            return plan
        status = precondition_status(req, None, now)  # a collection has no ETag
        if status is not None:
            return error_plan(status, now)
        limit = svc.config.uploads.webdav_max_tree
        # Every member is removed: each needs the delete right on its own.
        listed = await _listed(svc, job, place)
        refusal = await _admit_members(admit, path, listed, _deleting)
        if refusal is not None:
            return refusal
        members = frozenset(sub for sub, _ in listed)
        failed = await svc.blocking(job, remove_tree, place, limit, job.stopped, members)
    finally:
        svc.release(job)
    svc.changed(path, tree=True)
    assert isinstance(failed, list)
    if failed:
        return _failures(path, failed, now)
    svc.guard.moved(path, None)
    return status_plan(204, now)


async def copy_move(
    svc: DavBase, req: RequestFacts, content: WriteContent, now: float, admit: Admit
) -> Plan:
    """COPY (§9.8) or MOVE (§9.9) of the target to its Destination."""
    move = req.method == b"MOVE"
    target = req.target
    asked = _destination(svc, req, move, now)
    if not isinstance(asked, tuple):
        return asked
    dt, depth = asked
    src_path, dst_path = rel(target.segments), rel(dt.segments)
    overwrite = parse_overwrite(field(OVERWRITE.of(req)))
    if move:
        refusal = await write_access(admit, target, Right.DELETE)
    else:
        refusal = await read_access(admit, target, target.slash)
    if refusal is None:
        # The destination is made (UPLOAD) or replaced (OVERWRITE, and
        # DELETE asked below when it is a collection or replaces one).
        refusal = await write_access(admit, dt, Right.UPLOAD, Right.OVERWRITE)
    if refusal is not None:
        return refusal
    job = TreeJob()
    try:
        try:
            src = await svc.place(job, target.segments)
        except WriteRefused as exc:
            if exc.refusal is Refusal.NO_PARENT:
                return error_plan(404, now)
            raise
        if src.current is None:
            return error_plan(404, now)
        if not _is_dir(src) and not stat.S_ISREG(src.current.st_mode):
            return error_plan(403, now)  # a symlink or a special file is never copied
        dst = await svc.place(job, dt.segments)
        # The same three refusals on where the ends lie: an in-root link on
        # the way (pub/la -> ../a) can put the destination inside the source,
        # or the source inside the destination, which the URLs do not show
        # (a MOVE into itself was a 500; replacing a collection that holds
        # the source removed the source, then failed).
        real = await svc.blocking(job, _real_ends, svc.opener(), src_path, dst_path)
        assert isinstance(real, tuple)
        if _nested(*real):
            return error_plan(403, now)
        existed = dst.current is not None
        if existed and not overwrite:
            return error_plan(412, now)  # §9.8.4, §10.6
        # Now that the destination is known: made anew, or replaced.
        right = Right.OVERWRITE if existed else Right.UPLOAD
        refusal = await write_access(admit, dt, right)
        if refusal is not None:
            return refusal
        infinity = depth is Depth.INFINITY
        checked = await _checks(svc, job, req, admit, (src, dst), dt, infinity, now)
        if not isinstance(checked, tuple):
            return checked
        # A COPY leaves its source as it is: only a MOVE's is changed (§9.8).
        paths = [dst_path, rel(dt.segments[:-1])]
        if move:
            paths += [src_path, rel(target.segments[:-1])]
        tree = _is_dir(src) or _is_dir(dst)
        ends = [(src_path, src), (dst_path, dst)]
        refusal = await svc.guarded(req, paths, tree, now, job, ends)
        if refusal is not None:
            return refusal
        await svc.copy_room(job, src, dst, move, infinity)  # --min-free-space
        plan = await _run(svc, job, req, (src, dst), dst_path, infinity, checked, now)
    finally:
        svc.release(job)
    svc.changed(src_path, dst_path, tree=True)
    if plan is not None:
        return plan
    if existed:
        svc.guard.moved(dst_path, None)  # the resource it replaced is gone
    if move:
        svc.guard.moved(src_path, dst_path)
    if existed:
        return status_plan(204, now)
    return status_plan(201, now, dt.url_path(slash=_is_dir(src)))


def _destination(
    svc: DavBase, req: RequestFacts, move: bool, now: float
) -> Plan | tuple[Target, Depth]:
    """A COPY's or MOVE's Destination and Depth, or the answer refusing
    them: 502 for another server or namespace, 403 for the root, a
    temporary or hidden name, or a destination onto, inside or holding
    the source, 400 for a Depth the method does not take."""
    target = req.target
    dest = parse_destination(
        field(DESTINATION.of(req)),
        scheme="https" if req.tls else "http",
        host=HOST.of(req) or "",
    )
    if dest.foreign or dest.target is None or not svc.at_dav(dest.target.segments):
        # §9.8.5, §9.9.4: another server, or another URL namespace (outside
        # --webdav-prefix, where no DAV method is served).
        return error_plan(502, now)
    dt = dest.target
    hidden = svc.config.files.hidden
    if svc.is_top(target.segments) or svc.is_top(dt.segments):
        return error_plan(403, now)  # the root (or the prefix's top) is never moved or replaced
    if is_write_temp(dt.segments) or (dt.hidden and not hidden):
        return error_plan(403, now)
    src_path, dst_path = rel(target.segments), rel(dt.segments)
    if dst_path == src_path or dst_path.startswith(src_path + "/"):
        return error_plan(403, now)  # onto itself, or into itself
    if src_path.startswith(dst_path + "/"):
        # Onto a collection that contains it: replacing the destination
        # would remove the source first (Apache's mod_dav: 403 too).
        return error_plan(403, now)
    depth = parse_depth(field(DEPTH.of(req)), Depth.INFINITY)
    if depth is Depth.ONE or (move and depth is not Depth.INFINITY):
        return error_plan(400, now)  # §9.8.3, §9.9.2
    return dt, depth


def _real_ends(opener: ContainedRoot, src: str, dst: str) -> tuple[str, str]:
    """Where a COPY's or MOVE's two ends lie below the root (``a/b``): each
    end's directory resolved (an in-root link on the way followed), its
    last name as it is, as the placements name them.  Blocking: the pool."""
    out = []
    for path in (src, dst):
        real = resolved_target(opener, "/" + path, False)
        out.append(path if real is None else real.strip("/"))
    return out[0], out[1]


def _nested(src: str, dst: str) -> bool:
    """Onto itself, into itself, or onto a collection holding it."""
    return dst == src or dst.startswith(src + "/") or src.startswith(dst + "/")


async def _checks(
    svc: DavBase,
    job: TreeJob,
    req: RequestFacts,
    admit: Admit,
    ends: tuple[Placement, Placement],
    dt: Target,
    infinity: bool,
    now: float,
) -> Plan | Checked:
    """412 when the source's preconditions fail (RFC 9110 §13.1), as PUT;
    then the access hook on every member the operation touches (see the
    module doc): the refusal, or the members allowed at each end.
    ``ends``: the source and destination placed; ``dt``: the
    Destination's target (parsed once, by :func:`copy_move`);
    ``infinity``: Depth infinity (a collection's members are copied)."""
    src, dst = ends
    if has_preconditions(req):
        facts = await svc.current_facts(job, src)
        status = precondition_status(req, facts, now)
        if status is not None:
            return error_plan(status, now)
    dst_path = rel(dt.segments)
    dst_members = src_members = None
    if dst.current is not None and (_is_dir(src) or _is_dir(dst)):
        # The destination is deleted first (§9.8.4, §9.9.3): removing an
        # existing resource needs the delete right, not put's.
        refusal = await write_access(admit, dt, Right.DELETE)
        if refusal is None and _is_dir(dst):
            listed = await _listed(svc, job, dst)
            refusal = await _admit_members(admit, dst_path, listed, _deleting)
            dst_members = frozenset(sub for sub, _ in listed)
        if refusal is not None:
            return refusal
    if _is_dir(src) and infinity:
        listed = await _listed(svc, job, src)
        src_path = rel(req.target.segments)
        # A COPY reads each member, a MOVE removes it; both make it anew.
        source = _deleting if req.method == b"MOVE" else _reading
        refusal = await _admit_members(admit, src_path, listed, source)
        if refusal is None:
            refusal = await _admit_members(admit, dst_path, listed, _putting)
        if refusal is not None:
            return refusal
        src_members = frozenset(sub for sub, _ in listed)
    return src_members, dst_members


async def _listed(svc: DavBase, job: TreeJob, place: Placement) -> list[tuple[str, bool]]:
    """The members of the collection at ``place``
    (:func:`~serverio.fs.davtree.list_tree`, in the job's pool call), at
    most ``--webdav-max-tree``."""
    limit = svc.config.uploads.webdav_max_tree
    listed = await svc.blocking(job, list_tree, place.dir_fd, place.name, limit)
    assert isinstance(listed, list)
    return listed


async def _run(
    svc: DavBase,
    job: TreeJob,
    req: RequestFacts,
    ends: tuple[Placement, Placement],
    dst_path: str,
    infinity: bool,
    checked: Checked,
    now: float,
) -> Plan | None:
    """Clear the destination when it must be, then copy or move (only
    the members ``checked`` holds); a 207 with the members that failed
    (named below ``dst_path``, the destination's path), or None."""
    limit = svc.config.uploads.webdav_max_tree
    src, dst = ends
    src_members, dst_members = checked
    if dst.current is not None and (_is_dir(src) or _is_dir(dst)):
        failed = await svc.blocking(job, remove_tree, dst, limit, job.stopped, dst_members)
        assert isinstance(failed, list)
        if failed:
            return _failures(dst_path, failed, now)
        dst.current = None
    if req.method == b"MOVE":
        failed = await svc.blocking(job, move_tree, src, dst, limit, job.stopped, src_members)
    else:
        failed = await svc.blocking(
            job, copy_tree, src, dst, infinity, limit, job.stopped, src_members
        )
    assert isinstance(failed, list)
    return _failures(dst_path, failed, now) if failed else None


async def create_empty(svc: DavBase, req: RequestFacts, now: float) -> int:
    """An empty file at ``req``'s target for a LOCK of an unmapped URL
    (RFC 4918 §7.3): 201, or the error status (409 without a parent)."""
    job = TreeJob()
    try:
        try:
            place = await svc.place(job, req.target.segments)
        except WriteRefused as exc:
            return 409 if exc.refusal is Refusal.NO_PARENT else 403
        if place.current is not None:
            return 200
        await svc.room(job, place, 0)  # --min-free-space
        await svc.blocking(job, _create, place)
    finally:
        svc.release(job)
    svc.changed(rel(req.target.segments))
    return 201


def _create(place: Placement) -> None:
    """An empty regular file at ``place`` (O_EXCL: never over another)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(place.name, flags, 0o666, dir_fd=place.dir_fd)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.fsync(place.dir_fd)
