"""Mounts and a route prefix: several contained roots behind one opener.

``--mount ROUTE=DIR`` serves DIR under ROUTE; ``--route-prefix PREFIX``
serves the whole site (``-d DIR`` and every mount) under PREFIX, and
nothing outside it.  :class:`MountedRoot` has the surface of a
:class:`~serverio.fs.opener.RootOpener` (``open``, ``stat``,
``directory_path``, ``spa_path``, ``root_fd``, ``close``) and is handed
to everything that opens a request's path (resolution, listings,
READMEs, the warm-file cache's revalidation).  Each path it is given is
a request's relative path (``docs/a.txt``: the decoded segments of
:mod:`serverio.http.target`, which has already refused ``..``, ``.``,
encoded slashes, backslashes and NUL); :func:`match_mount` picks the
mount, and the rest of the path is opened by *that mount's own*
``RootOpener`` (its own root descriptor and containment strategy), so a
path can never resolve outside the mount it matched.

Because every layer above keeps working with the full URL path, every
cache keyed by path (the warm-file cache, listings, compression, ETag
hashes) keys by the path as served: two mounts' ``a.txt`` never share an
entry.  Without mounts or a prefix the server uses its ``RootOpener``
directly (:func:`open_root`): the warm path is unchanged.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence

from ..config import Config
from .opener import RootOpener, Unreached

__all__ = ["LazyRoot", "MountedRoot", "match_mount", "mount_table", "open_root"]


def match_mount(routes: Sequence[str], relpath: str) -> tuple[int, str] | None:
    """The mount serving ``relpath`` and the path inside it (pure).

    ``routes`` are relative routes (``"docs"``, ``"a/b"``, ``""`` for a
    mount at ``/``), longest first (:func:`mount_table` sorts them);
    ``relpath`` is a request's relative path (``"."`` for ``/``).  The
    first, hence longest, route that is ``relpath`` or a whole-segment
    prefix of it wins: ``docs`` matches ``docs`` and ``docs/x``, never
    ``docsx``.  Returns (index into ``routes``, the rest: ``"."`` for the
    mount's root), or None when no route matches (outside a route
    prefix).
    """
    for i, route in enumerate(routes):
        if not route:
            return i, relpath
        if relpath == route:
            return i, "."
        if relpath.startswith(route) and relpath[len(route)] == "/":
            return i, relpath[len(route) + 1 :]
    return None


def mount_table(cfg: Config) -> tuple[tuple[str, str], ...]:
    """(relative route, directory) of every mount, longest route first:
    ``-d DIR`` at the route prefix (``""`` without one), each ``--mount``
    below the prefix.  Empty when there is neither (one plain root)."""
    files = cfg.files
    if not files.mounts and not files.route_prefix:
        return ()
    prefix = (files.route_prefix or "").lstrip("/")
    root = cfg.root or os.path.realpath(cfg.directory)
    table = [(prefix, root)]
    for route, directory in files.mounts:
        table.append(((prefix + route if prefix else route[1:]).lstrip("/"), directory))
    # Longest first, so the first match is the longest prefix.  Routes are
    # unique (FilesPolicy.validate), so the order is total.
    table.sort(key=lambda item: (-item[0].count("/") - bool(item[0]), item[0]))
    return tuple(table)


def _missing() -> OSError:
    return OSError(errno.ENOENT, "outside every mount")


class MountedRoot:
    """Several contained roots, chosen per path by the longest route.

    Thread-safe as its openers are (it keeps no per-call state).  A path
    outside every route (only possible under ``--route-prefix``) is
    ENOENT: the caller's 404, with nothing opened.
    """

    def __init__(self, routes: Sequence[str], openers: Sequence[RootOpener]) -> None:
        self.routes = tuple(routes)
        self.openers = tuple(openers)

    def _pick(self, relpath: str) -> tuple[RootOpener, str]:
        found = match_mount(self.routes, relpath)
        if found is None:
            raise _missing()
        return self.openers[found[0]], found[1]

    @property
    def strategy(self) -> str:
        """The containment strategy (one per platform and kernel, so every
        mount's opener has the same)."""
        return self.openers[0].strategy

    @property
    def root_fd(self) -> int:
        """-1 when some mount has no directory descriptor (``windows``):
        listings are then scanned by path (:meth:`directory_path`)."""
        return -1 if any(o.root_fd < 0 for o in self.openers) else self.openers[0].root_fd

    def open(self, relpath: str) -> int:
        """Open ``relpath`` under the mount it names (RootOpener.open's errors)."""
        opener, rest = self._pick(relpath)
        return opener.open(rest)

    def open_resolved(self, relpath: str) -> tuple[int, str | None]:
        """RootOpener.open_resolved under the mount ``relpath`` names; the
        resolved path (and an :class:`~serverio.fs.opener.Unreached`'s) is
        given in the request's space (the mount's route before the path
        inside it)."""
        found = match_mount(self.routes, relpath)
        if found is None:
            raise _missing()
        route = self.routes[found[0]]
        try:
            fd, resolved = self.openers[found[0]].open_resolved(found[1])
        except Unreached as exc:
            if not route:
                raise
            raise Unreached(exc.errno, exc.strerror, f"{route}/{exc.path}".rstrip("/")) from None
        if resolved is None or not route:
            return fd, resolved
        return fd, f"{route}/{resolved}" if resolved else route

    def stat(self, relpath: str) -> os.stat_result:
        """``os.stat`` of ``relpath`` under its mount (RootOpener.stat)."""
        opener, rest = self._pick(relpath)
        return opener.stat(rest)

    def lstat(self, relpath: str) -> os.stat_result:
        """``os.lstat`` of ``relpath`` under its mount (RootOpener.lstat)."""
        opener, rest = self._pick(relpath)
        return opener.lstat(rest)

    def directory_path(self, relpath: str, fd: int) -> str:
        """The path to scan for the directory ``fd`` opened from ``relpath``."""
        opener, rest = self._pick(relpath)
        return opener.directory_path(rest, fd)

    def spa_path(self, relpath: str, spa: str) -> str | None:
        """The ``--spa`` file answering a missing ``relpath``: the SPA file
        of the mount that matched (``docs/index.html`` for a path under
        ``/docs``); None outside every mount (no fallback there)."""
        found = match_mount(self.routes, relpath)
        if found is None:
            return None
        route = self.routes[found[0]]
        return f"{route}/{spa}" if route else spa

    def close(self) -> None:
        for opener in self.openers:
            opener.close()


def open_root(cfg: Config) -> RootOpener | MountedRoot:
    """The contained root(s) of ``cfg``: a plain RootOpener without mounts
    and route prefix, else a MountedRoot with one RootOpener per mount.

    Raises OSError when a directory cannot be opened (the ones opened
    before are closed)."""
    table = mount_table(cfg)
    follow, hidden = cfg.files.follow_symlinks, cfg.files.hidden
    if not table:
        return RootOpener(cfg.root, follow_symlinks=follow, hidden=hidden)
    openers: list[RootOpener] = []
    try:
        for _, directory in table:
            openers.append(RootOpener(directory, follow_symlinks=follow, hidden=hidden))
    except OSError:
        for opener in openers:
            opener.close()
        raise
    return MountedRoot([route for route, _ in table], openers)


class LazyRoot:
    """The contained root of ``cfg``, opened (:func:`open_root`) on the first
    call and kept; :meth:`forget` drops it (the caller closed it, or keeps
    it open for abandoned threads), and the next call opens it again.  The
    callable the features that open a request's path are handed (the
    handler, the content service, uploads, WebDAV, archives): a server that
    never serves never opens its root."""

    __slots__ = ("_cfg", "opened")

    def __init__(self, cfg: Config) -> None:
        self._cfg = cfg
        self.opened: RootOpener | MountedRoot | None = None

    def __call__(self) -> RootOpener | MountedRoot:
        opened = self.opened
        if opened is None:
            opened = self.opened = open_root(self._cfg)
        return opened

    def forget(self) -> None:
        self.opened = None
