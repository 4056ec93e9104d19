"""The access hook of a write step, on the resolved target too (issue 41 item 7).

A write names its target by the request path; a symlink inside the root
on the way (``pub/link -> ../private``) would let a PUT, a DELETE, a form
upload or a WebDAV method change (or read) what ``[[auth]]`` and
``[[writable]]`` rules protect under the link's target.  :class:`Resolving`
wraps the pipeline's :data:`~serverio.pipeline.hooks.Admit` for one
request: each target it is asked about is decided as asked, then, when a
link was followed to reach it, once more on where it led
(:func:`serverio.http.access.resolved_path`): both must pass.  Without
``[[auth]]`` or ``[[writable]]`` rules the hook is used as it is.

Where the target led is asked of the same contained opener the write then
places through (:meth:`~serverio.fs.opener.RootOpener.open_resolved`, in
the ``write`` pool): the directory a write lands in (the target's parent,
and the name below it; a form's folder itself), or for a read (a WebDAV
source, a PROPFIND) the target itself, else its parent.  That is a resolution of its own, before
the write's placement: a link that a local user swaps in between is not
seen by it (an HTTP client cannot make links: neither uploads nor WebDAV
create them).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import replace

from ..concurrency.blocking import Pool, PoolSaturated, run_blocking
from ..fs.davtree import TreeTooLarge
from ..fs.opener import ContainedRoot, Unreached
from ..http.access import AccessTarget, Kind, resolved_path
from ..http.core import Plan, error_plan
from ..pipeline.hooks import Admit
from .decide import errno_status

__all__ = ["Resolving", "linked_below", "resolved_target"]

# What the resolution may meet that the write itself then answers (404,
# 409, 403): nothing there, or a path containment refuses.
_NOT_THERE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EXDEV, errno.ELOOP})


def _resolve(opener: ContainedRoot, relpath: str) -> str | None:
    """Where ``relpath`` leads (``open_resolved``), the descriptor closed."""
    fd, real = opener.open_resolved(relpath)
    os.close(fd)
    return real


def resolved_target(opener: ContainedRoot, path: str, itself: bool) -> str | None:
    """The match path ``path`` (``/a/b``, ``/a/`` for a directory) leads to
    through a symlink inside the root, or None when no link is on its way
    (or nothing is there: the write answers that itself).  ``itself``:
    follow the last name too (a read); else only the directory the name
    is in (a write never writes through a link at the name: 409), unless
    ``path`` names a directory (a form's folder, a collection).

    A resolution that fails past a link
    (:class:`~serverio.fs.opener.Unreached`) gives how far it got (with
    the name, for a write's parent), whatever the error: a missing name
    below a protected directory is decided like an existing one.

    Blocking: run in the ``write`` pool.  Raises OSError for anything but
    a missing or refused path.
    """
    segments = [s for s in path.split("/") if s]
    if not segments:
        return None  # the root: no link on the way
    is_dir = path.endswith("/")
    if itself or is_dir:
        try:
            real = _resolve(opener, "/".join(segments))
        except Unreached as exc:
            # Failed past a link: decided on how far it got (a missing name
            # below a protected directory tells nothing); the write itself
            # then answers the error.
            return resolved_path(exc.path, is_dir)
        except OSError as exc:
            if exc.errno not in _NOT_THERE:
                raise
        else:
            return None if real is None else resolved_path(real, is_dir)
    try:
        parent = _resolve(opener, "/".join(segments[:-1]) or ".")
    except Unreached as exc:
        return resolved_path(f"{exc.path}/{segments[-1]}", is_dir)
    except OSError as exc:
        if exc.errno not in _NOT_THERE:
            raise
        return None
    if parent is None:
        return None
    return resolved_path(f"{parent}/{segments[-1]}" if parent else segments[-1], is_dir)


def linked_below(opener: ContainedRoot, relpath: str, limit: int) -> list[str]:
    """The match paths the in-root symlinks below collection ``relpath``
    lead to (``/a/b/x.txt``, ``/a/`` for a directory), the links in the
    directories they lead to included: every resource a depth-infinity
    LOCK of the collection would cover that its own path's rules do not
    name (a lock is on the URL namespace, RFC 4918 §7.4, and
    ``/c/lf -> ../a/b/x.txt`` makes ``/c/lf`` the resource
    ``/a/b/x.txt``).  Empty when ``relpath`` is no directory (or missing).

    Each directory is scanned once by where it really is (a link back to
    an ancestor ends there); a link that leaves the root, or through a
    hidden name (EXDEV), or loops (ELOOP), leads to nothing served and is
    skipped; a dangling one (ENOENT, ENOTDIR past the link) is decided on
    how far it got (:class:`~serverio.fs.opener.Unreached`), as a write's
    target is.
    Every entry scanned counts: :class:`~serverio.fs.davtree.TreeTooLarge`
    past ``limit`` (``--webdav-max-tree``), as for the other tree methods.

    Blocking: run in the ``write`` pool.  Each directory descriptor is
    closed once scanned, before the next is opened.
    """
    try:
        fd, real = opener.open_resolved(relpath or ".")
    except OSError:
        return []  # nothing there (or refused): no member to lock
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            return []
    finally:
        os.close(fd)
    top = relpath if real is None else real
    led: list[str] = []
    seen = {top}
    pending = [top]
    count = 0
    while pending:
        here = pending.pop()
        for name, is_link, is_dir in _scan(opener, here):
            count += 1
            if count > limit:
                raise TreeTooLarge
            member = f"{here}/{name}" if here else name
            if is_dir:
                if member not in seen:  # below a real directory: real too
                    seen.add(member)
                    pending.append(member)
            elif is_link:
                target = _led_to(opener, member)
                if target is None:
                    continue
                real_path, real_dir = target
                led.append(resolved_path(real_path, real_dir))
                if real_dir and real_path not in seen:
                    seen.add(real_path)
                    pending.append(real_path)
    return led


def _scan(opener: ContainedRoot, relpath: str) -> list[tuple[str, bool, bool]]:
    """The entries of the real directory ``relpath``: (name, is a symlink,
    is a directory not through a link); none when it cannot be opened."""
    try:
        fd = opener.open(relpath or ".")
    except OSError:
        return []
    try:
        source: int | str = fd if opener.root_fd >= 0 else opener.directory_path(relpath, fd)
        with os.scandir(source) as it:
            return [(e.name, e.is_symlink(), e.is_dir(follow_symlinks=False)) for e in it]
    except OSError:
        return []
    finally:
        os.close(fd)


def _led_to(opener: ContainedRoot, relpath: str) -> tuple[str, bool] | None:
    """Where the symlink ``relpath`` leads below the root and whether that
    is a directory; how far it got when nothing is there; None when it
    leaves the root, passes a hidden name or loops (nothing served)."""
    try:
        fd, real = opener.open_resolved(relpath)
    except Unreached as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return exc.path, False  # dangling: a file made there would be covered
        return None
    except OSError:
        return None
    try:
        is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
    finally:
        os.close(fd)
    return (relpath if real is None else real), is_dir


class Resolving:
    """An :data:`~serverio.pipeline.hooks.Admit` that decides a target's
    resolved target too (see the module doc).

    Cancellation handling: the resolution is a pooled call (an abandoned
    thread closes its own descriptor); a cancelled check decides nothing.
    """

    __slots__ = ("_admit", "_now", "_opener", "_pool")

    def __init__(
        self, admit: Admit, pool: Pool, opener: Callable[[], ContainedRoot], now: float
    ) -> None:
        self._admit = admit
        self._pool = pool
        self._opener = opener
        self._now = now

    @classmethod
    def wrap(
        cls,
        admit: Admit,
        pool: Pool,
        opener: Callable[[], ContainedRoot],
        now: float,
        rules: bool,
    ) -> Admit:
        """``admit`` deciding resolved targets too; itself without
        ``rules`` (no ``[[auth]]`` nor ``[[writable]]`` table), or when it
        already does."""
        if not rules or isinstance(admit, Resolving):
            return admit
        return cls(admit, pool, opener, now)

    async def __call__(self, target: AccessTarget) -> Plan | None:
        refusal = await self._admit(target)
        if refusal is not None:
            return refusal
        itself = target.kind is not Kind.WRITE
        led: list[str] = []
        try:
            for path in target.paths:
                real = await run_blocking(self._pool, resolved_target, self._opener(), path, itself)
                if real is not None:
                    led.append(real)
        except PoolSaturated:
            return error_plan(503, self._now, close=True)
        except OSError as exc:
            return error_plan(errno_status(exc.errno), self._now)
        for real in led:  # each on its own: every rule that matches must pass
            refusal = await self._admit(replace(target, paths=(real,)))
            if refusal is not None:
                return refusal
        return None
