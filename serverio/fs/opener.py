"""Opening a path under the root without ever leaving it.

There is no check-then-open window, and nothing outside the root is ever
opened (an open has side effects: it releases a writer blocked on a FIFO,
wakes a tty or a tape drive, triggers an automount).  Two strategies, chosen
once when the opener is created:

* ``openat2``, Linux >= 5.6: ``openat2(root_fd, relpath, RESOLVE_BENEATH |
  RESOLVE_NO_MAGICLINKS)``.  The kernel refuses (EXDEV) any resolution step
  that would leave ``root_fd``, atomically with the open: one syscall, the
  cost of ``openat``.  Unless hidden names are served, ``RESOLVE_NO_SYMLINKS``
  is added as well: a path without symlinks is already checked lexically for
  dot segments (:mod:`serverio.http.target`); one with a symlink fails (ELOOP)
  and is resolved by the walk below, which sees every resolved name.  The
  walk also takes over on EXDEV, because RESOLVE_BENEATH refuses absolute
  symlinks even when they point back inside the root.
* ``walk``, other POSIX systems (macOS, FreeBSD, Linux without openat2 or
  with a seccomp filter refusing it, or without /proc): a
  traversal-resistant component walk, the design of Go 1.24's ``os.Root``.
  See :meth:`RootOpener._walk`.
* ``windows``, where ``os.open`` takes no ``dir_fd`` (Windows): the path is
  resolved by name under the root's real path, with the walk's rules, then
  opened and the opened handle verified.  See :class:`_ByName`.
  On Linux this strategy runs only as a test-forced simulation.

``--follow-symlinks`` is a plain ``openat(root_fd, relpath)``: the relative
path has no ``..`` segments (:mod:`serverio.http.target` refuses them), so only
symlinks can lead out, and the operator allowed that (it also trusts links
to hidden names).

Every open uses ``O_NONBLOCK`` (a FIFO cannot hang the opener), ``O_CLOEXEC``
and ``O_NOCTTY`` where the platform has them (``O_BINARY`` and ``O_NOINHERIT``
on Windows: text mode would rewrite line endings); the caller validates the
file type with ``fstat``.  No flag is looked up unconditionally at import
time: Windows lacks most of them.
Refusals are :class:`OSError` with ``EXDEV`` (leaves the root, or reaches a
hidden name), ``ELOOP`` (too many links); callers answer 404 for both.
``open_resolved`` raises :class:`Unreached` (an OSError with the same
errno) when it fails after following a symlink: how far it got, so the
site's rules on that place decide the error answer too.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import re
import stat
import sys
from collections.abc import Callable
from typing import Any, Final, Protocol

from . import winstat
from .winpath import may_be_short_name, windows_name_problem

__all__ = ["MAX_SYMLINKS", "STRATEGIES", "ContainedRoot", "RootOpener", "Unreached"]


def _flag(name: str) -> int:
    value: int = getattr(os, name, 0)
    return value


OPEN_FLAGS = (
    os.O_RDONLY
    | _flag("O_NONBLOCK")
    | _flag("O_CLOEXEC")
    | _flag("O_NOCTTY")
    | _flag("O_BINARY")
    | _flag("O_NOINHERIT")
)
_DIRECTORY: Final = _flag("O_DIRECTORY")
_NOFOLLOW: Final = OPEN_FLAGS | _flag("O_NOFOLLOW")
_DIR_NOFOLLOW: Final = _NOFOLLOW | _DIRECTORY
_WINDOWS: Final = sys.platform == "win32"
# Windows: os.lstat reports reparse points (symlinks, junctions, mount
# points) in st_file_attributes.
_REPARSE: Final = 0x400  # FILE_ATTRIBUTE_REPARSE_POINT

# Symlinks resolved per open before giving up with ELOOP (Linux's own limit
# is 40, MAXSYMLINKS).
MAX_SYMLINKS: Final = 40

# What O_NOFOLLOW reports for a symlink: ELOOP on Linux and macOS, EMLINK on
# FreeBSD, EFTYPE on NetBSD; O_DIRECTORY | O_NOFOLLOW gives ENOTDIR on Linux.
# Each is checked with readlinkat (EINVAL: it was not a symlink after all).
_MAYBE_LINK: Final = frozenset(
    e for e in (errno.ELOOP, errno.EMLINK, getattr(errno, "EFTYPE", None)) if e is not None
)

STRATEGIES: Final = ("openat2", "walk", "windows")

_SYS_OPENAT2 = 437  # the same number on every Linux architecture (new syscall table)
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


# libc syscall(2), typed loosely: the platform check below is a runtime one
# for the type checker too (mypy --platform win32 sees the same code).
_syscall: Any = None
_PLATFORM: str = sys.platform
if _PLATFORM.startswith("linux"):
    try:
        _libc = ctypes.CDLL(None, use_errno=True)
        _syscall = _libc.syscall
        _syscall.restype = ctypes.c_long
        _syscall.argtypes = (
            ctypes.c_long,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.POINTER(_OpenHow),
            ctypes.c_size_t,
        )
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        _syscall = None

_HOW_SIZE = ctypes.sizeof(_OpenHow)

# The same syscall(2) without argtypes, for the open of every request that
# misses the caches: its caller passes ready ctypes values (each a long, a
# pointer or the path's bytes), so nothing is converted per call (an open
# and close of a file under the root: 3.9 µs with argtypes, 3.4 without,
# docs/history/perf-round3.md; a Python int would go as a C int, so none
# is passed).
_syscall_bare: Any = None
_OPENAT2_ARGS: tuple[Any, ...] = ()
if _syscall is not None:
    _syscall_bare = _libc["syscall"]
    _syscall_bare.restype = ctypes.c_long
    _OPENAT2_ARGS = (ctypes.c_long(_SYS_OPENAT2), ctypes.c_size_t(_HOW_SIZE))


class Unreached(OSError):
    """:meth:`RootOpener.open_resolved` failed (any errno: ENOENT, ENOTDIR,
    EXDEV, ELOOP, ...) after following a symlink.  ``path``: how far the
    resolution got, below the root ("/"-separated): the real path of the
    deepest directory it reached, then the names it did not resolve
    (``"private/missing"`` for ``pub/link/missing`` with ``pub/link ->
    ../private``), made lexically (a ``..`` among them drops the name
    before it).

    The access hook decides the error answer on that path too
    (:func:`serverio.pipeline.request._admitted`): a missing name below a
    protected directory reached through a link answers what a protected
    existing name does, not a 404 that tells which names exist there.
    Not raised when no link was followed: the request path, checked
    before any open, is then that path.  Callers that look at ``errno``
    alone see the error the resolution met (the built-in subclass, such
    as FileNotFoundError, is not kept).
    """

    def __init__(self, errno_: int | None, strerror: str | None, path: str) -> None:
        super().__init__(errno_, strerror)
        self.path = path

    @classmethod
    def of(cls, exc: OSError, reached: list[str], rest: list[str]) -> Unreached:
        """``exc`` (raised below the directories ``reached``, with the
        names ``rest`` not resolved) as an Unreached."""
        names = list(reached)
        for name in rest:
            if name == "..":
                if names:
                    names.pop()
            elif name and name != ".":
                names.append(name)
        return cls(exc.errno, exc.strerror, "/".join(names))


def _escape() -> OSError:
    return OSError(errno.EXDEV, "resolves outside the served root")


def _hidden_name() -> OSError:
    return OSError(errno.EXDEV, "resolves through a hidden name")


class ContainedRoot(Protocol):
    """What resolution, listings and the warm-file cache open a request's
    path through: a :class:`RootOpener`, or a
    :class:`~serverio.fs.mounts.MountedRoot` (several, one per mount)."""

    @property
    def root_fd(self) -> int: ...

    @property
    def strategy(self) -> str: ...

    def open(self, relpath: str, /) -> int: ...

    def open_resolved(self, relpath: str, /) -> tuple[int, str | None]: ...

    def stat(self, relpath: str, /) -> os.stat_result: ...

    def lstat(self, relpath: str, /) -> os.stat_result: ...

    def directory_path(self, relpath: str, fd: int, /) -> str: ...

    def spa_path(self, relpath: str, spa: str, /) -> str | None: ...

    def close(self) -> None: ...


class RootOpener:
    """Opens relative paths confined to one root directory.

    Holds one descriptor on the root for the server's lifetime; thread-safe
    (it keeps no per-call state), so preparation can run in worker threads.

    ``hidden``: serve names starting with a dot (``--hidden``).  Otherwise a
    path whose *resolved* form passes through such a name (``env.txt ->
    .env``) is refused like the name itself; ``.well-known`` directly under
    the root is not hidden (RFC 8615).

    ``strategy``: ``"openat2"``, ``"walk"`` or ``"windows"`` (see the module
    docstring); None picks ``windows`` where ``os.open`` takes no
    ``dir_fd``, else ``openat2`` where the kernel allows it, else ``walk``.
    Forcing one is a test seam, not a user option.

    ``root_fd`` is -1 under ``windows`` (no directory descriptors there).
    """

    def __init__(
        self,
        root: str,
        *,
        follow_symlinks: bool,
        hidden: bool = False,
        strategy: str | None = None,
    ) -> None:
        if strategy is not None and strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}")
        self.root = os.path.realpath(root)
        self.follow_symlinks = follow_symlinks
        self.hidden = hidden
        if strategy is None and os.open not in os.supports_dir_fd:
            strategy = "windows"
        self.root_fd = -1
        self._root_parts = tuple(p for p in _split_native(self.root) if p)
        self._by_name = _ByName(
            self.root, self._root_parts, follow_symlinks=follow_symlinks, hidden=hidden
        )
        resolve = _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS
        # open_resolved never lets the kernel follow a link: a path with
        # one goes to the walk, which knows where it led.
        self._how_resolved = _OpenHow(OPEN_FLAGS, 0, resolve | _RESOLVE_NO_SYMLINKS)
        if not hidden:
            resolve |= _RESOLVE_NO_SYMLINKS
        self._how = _OpenHow(OPEN_FLAGS, 0, resolve)
        # _openat2's ready arguments (see _syscall_bare): the root's
        # descriptor as a long (set once opened, -1 once closed) and a
        # pointer to each open_how.
        self._root_arg = ctypes.c_long(-1)
        self._how_ref = ctypes.byref(self._how)
        self._how_resolved_ref = ctypes.byref(self._how_resolved)
        self.stat: Callable[[str], os.stat_result]
        """``os.stat`` of a relative path under the root (follows symlinks:
        callers compare identities with a file opened under containment)."""
        self.lstat: Callable[[str], os.stat_result]
        """``os.lstat`` of a relative path under the root (the entry itself,
        a symlink not followed): does the name exist at all?"""
        if strategy == "windows":
            if not os.path.isdir(self.root):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), root)
            self.stat = self._by_name.stat
            self.lstat = self._by_name.lstat
            self.strategy = strategy
            return
        self.root_fd = os.open(self.root, os.O_RDONLY | _DIRECTORY | _flag("O_CLOEXEC"))
        self._root_arg = ctypes.c_long(self.root_fd)
        self.stat = functools.partial(os.stat, dir_fd=self.root_fd)
        self.lstat = functools.partial(os.stat, dir_fd=self.root_fd, follow_symlinks=False)
        if strategy is None:
            strategy = "openat2" if self._probe_openat2() else "walk"
        elif strategy == "openat2" and not self._probe_openat2():
            self.close()
            raise OSError(errno.ENOSYS, "openat2 is not available")
        self.strategy = strategy

    def _probe_openat2(self) -> bool:
        if _syscall is None:
            return False
        fd = _syscall(_SYS_OPENAT2, self.root_fd, b".", ctypes.byref(self._how), _HOW_SIZE)
        if fd < 0:
            return False  # ENOSYS (old kernel) or EPERM (seccomp filter)
        os.close(fd)
        return True

    def close(self) -> None:
        if self.root_fd >= 0:
            self._root_arg = ctypes.c_long(-1)  # never a number the closed one may get again
            os.close(self.root_fd)
            self.root_fd = -1

    def open(self, relpath: str) -> int:
        """Open ``relpath`` (no ``..`` segments) under the root.

        Raises :class:`OSError`; ``EXDEV`` means "refused": it would leave
        the root, or reach a hidden name.  ENOENT and ENOTDIR always mean
        "missing inside the root" (nothing outside was looked at).
        """
        if self.strategy == "windows":
            return self._by_name.open(relpath)[0]
        if self.follow_symlinks:
            return os.open(relpath, OPEN_FLAGS, dir_fd=self.root_fd)
        if self.strategy == "openat2":
            fd = self._openat2(relpath, self._how_ref)
            if fd >= 0:
                return fd
        return self._walk(relpath)[0]

    def open_resolved(self, relpath: str) -> tuple[int, str | None]:
        """:meth:`open`, and where the resolution led: the path below the
        root (``"a/b"``, ``""`` for the root itself) when it followed a
        symlink, None when it followed none (``relpath`` is then the path
        opened).  The site's rules are decided on that path too
        (:func:`serverio.http.access.resolved_path`).

        The same resolution as the open, so the answer names what the
        descriptor is (no second lookup a swapped link could fool).  A path
        without links costs what :meth:`open` costs (one ``openat2`` with
        ``RESOLVE_NO_SYMLINKS``, even with ``--hidden``); one with a link is
        resolved by the walk.  With ``--follow-symlinks`` the kernel follows
        the links and the path is the real path of the opened name, looked
        up again by name (the operator trusts the tree's links there); None
        when it lies outside the root (no rule matches the outside).

        A failure after following a link raises :class:`Unreached` with
        how far the resolution got (under every strategy; never without a
        link, and :meth:`open` never does), so that a missing name below
        a protected directory reached through a link is refused like an
        existing one.
        """
        if self.strategy == "windows":
            return self._by_name.open(relpath, report=True)
        if self.follow_symlinks:
            try:
                fd = os.open(relpath, OPEN_FLAGS, dir_fd=self.root_fd)
            except OSError as exc:
                raise _unreached_following(exc, self.root, self._root_parts, relpath) from None
            return fd, _real_below(self.root, self._root_parts, relpath)
        if self.strategy == "openat2":
            fd = self._openat2(relpath, self._how_resolved_ref)
            if fd >= 0:
                return fd, None
        return self._walk(relpath, report=True)

    def _openat2(self, relpath: str, how: Any) -> int:
        """One ``openat2`` under the root with the ``open_how`` that ``how``
        points to (``self._how_ref`` or ``self._how_resolved_ref``): the
        descriptor, or -1 when the walk must decide (EXDEV: an escape, or
        an absolute symlink that may point back inside; ELOOP: a symlink
        under ``RESOLVE_NO_SYMLINKS``, or a loop).  Any other error is
        raised."""
        assert _syscall_bare is not None
        number, size = _OPENAT2_ARGS
        fd = _syscall_bare(
            number, self._root_arg, relpath.encode("utf-8", "surrogateescape"), how, size
        )
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err != errno.EXDEV and err != errno.ELOOP:
            raise OSError(err, os.strerror(err))
        return -1

    def _walk(self, relpath: str, report: bool = False) -> tuple[int, str | None]:
        """Open ``relpath`` one component at a time; never leaves the root.
        Returns the descriptor and, when a symlink was followed, the path it
        resolved to below the root (see :meth:`open_resolved`).  With
        ``report``, a failure after a link is raised as :class:`Unreached`
        (the directories resolved, then the names still pending).

        Each component is opened with ``openat(dir_fd, name, O_NOFOLLOW |
        O_NONBLOCK | O_CLOEXEC)`` (plus ``O_DIRECTORY`` for all but the
        last) relative to the directory opened before it.  A symlink makes
        that open fail; its target is read with ``readlinkat`` and resolved
        here, at most :data:`MAX_SYMLINKS` per call (then ELOOP):

        * relative targets are resolved against the walk's own stack of
          directory descriptors: ``..`` pops one, and ``..`` at the root is
          refused (EXDEV) without opening anything;
        * absolute targets are compared, component by component, with the
          root's real path: inside it, the rest is resolved from the root
          descriptor; anywhere else (or through ``..`` before reaching it)
          they are refused (EXDEV).  The outside is never opened, so a link
          that reaches the root through another symlink is refused too.

        Unless ``hidden``, every name opened is checked: one starting with a
        dot (other than ``.well-known`` directly under the root) is refused
        (EXDEV), whether the request or a symlink target named it.
        """
        pending = [p for p in reversed(relpath.split("/")) if p and p != "."]
        dirs: list[int] = []  # descriptors opened below the root (owned), deepest last
        names: list[str] = []  # the name of each of ``dirs`` (the resolved path)
        links = 0
        try:
            while pending:
                name = pending.pop()
                if name == "..":
                    if not dirs:
                        raise _escape()
                    os.close(dirs.pop())
                    names.pop()
                    continue
                if name == "." or not name:
                    continue
                if not self.hidden and name[0] == "." and (dirs or name != ".well-known"):
                    raise _hidden_name()
                last = not pending
                cur = dirs[-1] if dirs else self.root_fd
                try:
                    fd = os.open(name, _NOFOLLOW if last else _DIR_NOFOLLOW, dir_fd=cur)
                except OSError as exc:
                    target = _link_target(exc, name, cur)
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP)) from None
                    self._push_walk_target(target, pending, dirs, names)
                    continue
                if last:
                    return fd, _followed(links, [*names, name])
                dirs.append(fd)
                names.append(name)
            # The path resolved to a directory already on the stack (or the
            # root): hand over its descriptor, or open the root afresh.
            resolved = _followed(links, names)
            if dirs:
                return dirs.pop(), resolved
            return os.open(".", OPEN_FLAGS | _DIRECTORY, dir_fd=self.root_fd), resolved
        except OSError as exc:
            if not report or not links:
                raise
            raise Unreached.of(exc, names, [name, *reversed(pending)]) from None
        finally:
            for d in dirs:
                os.close(d)

    def _push_walk_target(
        self, target: str, pending: list[str], dirs: list[int], names: list[str]
    ) -> None:
        """Resolve a link's ``target`` next in :meth:`_walk`: an absolute one
        from the root descriptor (the walk's ``dirs`` closed; EXDEV outside
        the root), a relative one from the link's directory."""
        if target.startswith("/"):
            rest = _inside(target, self._root_parts)
            while dirs:
                os.close(dirs.pop())
            names.clear()
            pending.extend(reversed(rest))
        else:
            pending.extend(p for p in reversed(target.split("/")) if p and p != ".")

    def spa_path(self, relpath: str, spa: str) -> str | None:
        """The ``--spa`` file answering a missing ``relpath``: ``spa`` itself
        (one root; :class:`~serverio.fs.mounts.MountedRoot` picks the
        matched mount's)."""
        return spa

    def directory_path(self, relpath: str, fd: int) -> str:
        """The path to list for the directory opened as ``fd`` from ``relpath``
        (``windows`` strategy: no directory descriptor to scan).

        Resolved again with the same containment, and its identity compared
        with ``fd``'s: EXDEV if the name now leads elsewhere."""
        check = self._by_name.open(relpath)[0]
        try:
            a, b = os.fstat(check), os.fstat(fd)
        finally:
            os.close(check)
        if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
            raise _swapped()
        return _resolved_path(self, relpath)


class _ByName:
    """The ``windows`` strategy of :class:`RootOpener`, for platforms whose
    ``os.open`` takes no ``dir_fd``: each path resolved by name under the
    root's real path (``root``; ``root_parts``: its components) with the
    walk's rules, then opened and the opened handle verified.  Keeps no
    per-call state (thread-safe, as its opener)."""

    def __init__(
        self, root: str, root_parts: tuple[str, ...], *, follow_symlinks: bool, hidden: bool
    ) -> None:
        self.root = root
        self._root_parts = root_parts
        self.follow_symlinks = follow_symlinks
        self.hidden = hidden

    def stat(self, relpath: str) -> os.stat_result:
        # The change time as st_ctime_ns (winstat): the caches' identity.
        return winstat.stat(os.path.join(self.root, relpath))

    def lstat(self, relpath: str) -> os.stat_result:
        return os.lstat(os.path.join(self.root, relpath))

    def open(self, relpath: str, report: bool = False) -> tuple[int, str | None]:
        """Resolve ``relpath`` by name under the root, open it, verify the
        handle; with the resolved path when a link was followed (see
        :meth:`RootOpener.open_resolved`; ``report``: a failure after a link is
        raised as :class:`Unreached`).

        The ``windows`` strategy, for platforms whose ``os.open`` takes no
        ``dir_fd``.  Resolution follows :meth:`RootOpener._walk`'s rules with
        ``os.lstat`` and ``os.readlink`` on full paths below the root's real
        path instead of descriptors: ``..`` at the root, absolute targets
        elsewhere and hidden names are refused (EXDEV), at most
        :data:`MAX_SYMLINKS` links (ELOOP); every name is also checked by
        :func:`~serverio.fs.winpath.windows_name_problem` (EXDEV) and an
        8.3-shaped name must be listed under that exact spelling.  Only a
        regular file or a directory is opened (a FIFO or device found by
        ``lstat`` is ENOENT before any open).

        There is no descriptor to resolve relative to, so a component can
        be swapped for a link between the check and the open.  The opened
        handle is therefore verified: its ``fstat`` identity (volume serial
        and file index on Windows) must be the one ``lstat`` saw, every
        directory on the way must still be the directory seen (not a link
        now), and on Windows ``GetFinalPathNameByHandleW`` must name a path
        under the root.  A swap in between is refused (EXDEV); what remains
        is that such a racing open may have touched a file outside the root
        before being refused, which ``openat2`` and the walk rule out.
        """
        if self.follow_symlinks:
            try:
                fd = self._open_following(relpath)
            except OSError as exc:
                if not report:
                    raise
                raise _unreached_following(exc, self.root, self._root_parts, relpath) from None
            return fd, _real_below(self.root, self._root_parts, relpath)
        final, parts, seen, links = self._walk(relpath, report)
        if final is None:  # the root, or a directory already resolved
            resolved = _followed(links, parts)
            path = os.path.join(self.root, *parts)
            final = (path, os.lstat(path) if parts else os.stat(path))
            if parts:
                parts.pop()
                seen.pop()
        else:
            resolved = _followed(links, [*parts, os.path.basename(final[0])])
        ancestors = [
            (os.path.join(self.root, *parts[: i + 1]), ident) for i, ident in enumerate(seen)
        ]
        try:
            return self._open_verified(final[0], final[1], ancestors), resolved
        except OSError as exc:
            if not report or resolved is None:
                raise
            raise Unreached.of(exc, [], resolved.split("/")) from None

    def _open_following(self, relpath: str) -> int:
        """``--follow-symlinks`` under the ``windows`` strategy: the names are
        checked (each spelling as listed), the links followed by the system."""
        segs = [seg for seg in relpath.split("/") if seg and seg != "."]
        for i, seg in enumerate(segs):
            _check_windows_name(os.path.join(self.root, *segs[:i]), seg)
        path = os.path.join(self.root, relpath)
        return self._open_verified(path, os.stat(path), [])

    def _walk(
        self, relpath: str, report: bool = False
    ) -> tuple[tuple[str, os.stat_result] | None, list[str], list[tuple[int, int]], int]:
        """:meth:`RootOpener._walk`'s rules by name: the final component's path and
        ``lstat`` (None when ``relpath`` ends at a directory already
        resolved), the resolved components below the root, the identity
        of each directory among them and how many links were followed.
        ``report``: as :meth:`RootOpener._walk`'s."""
        # The request's own segments are split on "/" only: a "\\" inside
        # one (an encoded %5C) is part of that name, which
        # windows_name_problem then refuses.  Split on the native
        # separators instead, "a%5Cb" would open a/b while the site rules
        # (which see the segments) matched the one name "a\\b".  Link
        # targets below are native paths and split natively.
        pending = [p for p in reversed(relpath.split("/")) if p and p != "."]
        parts: list[str] = []  # resolved components below the root
        seen: list[tuple[int, int]] = []  # identity of each directory in parts
        links = 0
        final: tuple[str, os.stat_result] | None = None
        try:
            while pending:
                name = pending.pop()
                if name == "..":
                    if not parts:
                        raise _escape()
                    parts.pop()
                    seen.pop()
                    continue
                if name == "." or not name:
                    continue
                if not self.hidden and name[0] == "." and (parts or name != ".well-known"):
                    raise _hidden_name()
                parent = os.path.join(self.root, *parts)
                _check_windows_name(parent, name)
                path = os.path.join(parent, name)
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode) or getattr(st, "st_file_attributes", 0) & _REPARSE:
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
                    self._push_link_target(os.readlink(path), pending, parts, seen)
                    continue
                if pending:
                    if not stat.S_ISDIR(st.st_mode):
                        raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
                    parts.append(name)
                    seen.append((st.st_dev, st.st_ino))
                    continue
                final = (path, st)
        except OSError as exc:
            if not report or not links:
                raise
            raise Unreached.of(exc, parts, [name, *reversed(pending)]) from None
        return final, parts, seen, links

    def _push_link_target(
        self, target: str, pending: list[str], parts: list[str], seen: list[tuple[int, int]]
    ) -> None:
        """Resolve a link's ``target`` next: an absolute one from the root
        (refused outside it), a relative one from the link's directory."""
        if _is_absolute(target):
            rest = self._inside_native(target)
            parts.clear()
            seen.clear()
            pending.extend(reversed(rest))
        else:
            pending.extend(p for p in reversed(_split_native(target)) if p and p != ".")

    def _open_verified(
        self, path: str, st: os.stat_result, ancestors: list[tuple[str, tuple[int, int]]]
    ) -> int:
        """Open what ``st`` describes at ``path``; EXDEV if the handle is not it."""
        is_dir = stat.S_ISDIR(st.st_mode)
        if not is_dir and not stat.S_ISREG(st.st_mode):
            raise OSError(errno.ENOENT, "not a regular file or a directory")
        fd = _open_native(path, is_dir, follow=self.follow_symlinks)
        try:
            opened = os.fstat(fd)
            if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
                raise _swapped()
            for apath, ident in ancestors:
                ast = os.lstat(apath)
                if not stat.S_ISDIR(ast.st_mode) or (ast.st_dev, ast.st_ino) != ident:
                    raise _swapped()
            if not self.follow_symlinks and not self._final_path_is(fd, path):
                raise _swapped()
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _inside_native(self, target: str) -> list[str]:
        """:func:`_inside` for native absolute targets (Windows: either
        separator, ``\\\\?\\`` prefixes, case-insensitive drive and names)."""
        if not _WINDOWS:
            return _inside(target, self._root_parts)
        for prefix in ("\\\\?\\UNC\\", "\\??\\", "\\\\?\\"):
            if target.startswith(prefix):
                target = target[len(prefix) :]
                break
        parts = [p for p in _split_native(target) if p and p != "."]
        n = len(self._root_parts)
        if [p.casefold() for p in parts[:n]] != [p.casefold() for p in self._root_parts]:
            raise _escape()
        return parts[n:]

    def _final_path_is(self, fd: int, path: str) -> bool:
        """Is the handle's final path ``path`` itself (case-insensitively)?
        Windows asks ``GetFinalPathNameByHandleW`` (no answer: refused),
        which names the file by its long names with links resolved.  So
        besides containment this refuses any alias the resolution did not
        see: an 8.3 short name in whatever form the filesystem makes them
        (NTFS ``SECRET~1.TXT``, Wine's ``_HID~NSX``, Samba's mangling) for
        a hidden name or for any other, whether or not it contains ``~``.
        Hiding therefore never depends on the spelling of a name.
        Elsewhere this strategy only runs as a simulation, which asks
        ``/proc/self/fd`` as a stand-in where it exists and skips the check
        where it does not."""
        final = _final_path(fd)
        if final is None:
            return not _WINDOWS
        got = [p.casefold() for p in _split_native(final) if p]
        want = [p.casefold() for p in _split_native(path) if p]
        return got == want


def _inside(target: str, root_parts: tuple[str, ...]) -> list[str]:
    """The components of absolute ``target`` below the root (``root_parts``:
    the components of its real path); EXDEV if it does not lie lexically
    under it."""
    parts = [p for p in target.split("/") if p and p != "."]
    n = len(root_parts)
    if tuple(parts[:n]) != root_parts:
        raise _escape()
    return parts[n:]


def _link_target(exc: OSError, name: str, dir_fd: int) -> str:
    """The target of ``name`` in ``dir_fd``, whose ``O_NOFOLLOW`` open
    failed with ``exc`` (:data:`_MAYBE_LINK`, or ENOTDIR under
    ``O_DIRECTORY``); ``exc`` itself is raised when it is no symlink
    (``readlinkat`` says EINVAL) or failed for another reason."""
    if exc.errno not in _MAYBE_LINK and exc.errno != errno.ENOTDIR:
        raise exc
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError as rexc:
        if rexc.errno == errno.EINVAL:
            raise exc from None  # not a symlink: the open's own error
        raise


def _followed(links: int, names: list[str]) -> str | None:
    """The resolved path below the root ("/"-joined ``names``) when a
    resolution followed ``links`` symlinks; None when it followed none."""
    return "/".join(names) if links else None


def _real_below(root: str, root_parts: tuple[str, ...], relpath: str) -> str | None:
    """``--follow-symlinks``: the real path of ``relpath`` below ``root``
    ("/"-separated; ``root_parts``: its components), None when it is
    ``relpath`` itself or lies outside the root."""
    real = os.path.realpath(os.path.join(root, relpath))
    parts = [p for p in _split_native(real) if p]
    n = len(root_parts)
    if [_fold(p) for p in parts[:n]] != [_fold(p) for p in root_parts]:
        return None
    below = "/".join(parts[n:])
    return None if below == "/".join(p for p in relpath.split("/") if p and p != ".") else below


def _unreached_following(
    exc: OSError, root: str, root_parts: tuple[str, ...], relpath: str
) -> OSError:
    """``--follow-symlinks``: ``exc`` as :class:`Unreached` when a link on
    the way led elsewhere inside the root (the real path of the part that
    exists, then the names that do not, as ``os.path.realpath`` makes it);
    else ``exc`` itself."""
    below = _real_below(root, root_parts, relpath)
    if below is None:
        return exc
    return Unreached(exc.errno, exc.strerror, below)


def _fold(name: str) -> str:
    # Windows compares the root's components case-insensitively.
    return name.casefold() if _WINDOWS else name


def _resolved_path(opener: RootOpener, relpath: str) -> str:
    """The real path of ``relpath`` under the root (symlinks resolved)."""
    return os.path.realpath(os.path.join(opener.root, relpath))


def _check_windows_name(parent: str, name: str) -> None:
    """Refuse (EXDEV) a name Windows would reinterpret, and an 8.3-shaped
    alias: the name must be listed in ``parent`` under this exact spelling."""
    if windows_name_problem(name) is not None:
        raise _windows_name()
    if may_be_short_name(name) and name not in os.listdir(parent):
        raise _windows_name()  # an alias: the long name is not this spelling


def _windows_name() -> OSError:
    return OSError(errno.EXDEV, "a name Windows would reinterpret")


def _swapped() -> OSError:
    return OSError(errno.EXDEV, "the path changed while it was opened")


_SEPARATORS: Final = re.compile(r"[\\/]" if _WINDOWS else "/")


def _split_native(path: str) -> list[str]:
    return _SEPARATORS.split(path)


def _is_absolute(target: str) -> bool:
    if _WINDOWS:
        return target[:1] in ("/", "\\") or target[1:2] == ":"
    return target.startswith("/")


def _open_native(path: str, is_dir: bool, *, follow: bool) -> int:
    """A descriptor on ``path``.  On Windows both kinds are opened with
    CreateFileW: a directory needs FILE_FLAG_BACKUP_SEMANTICS (``os.open``
    refuses directories), and a file is shared for reading, writing *and
    deleting*, so a deploy can replace or delete a file while it is being
    served, as on POSIX (``os.open`` omits FILE_SHARE_DELETE: ``os.replace``
    over a file being sent failed with PermissionError)."""
    if _WINDOWS:  # pragma: no cover - Windows only
        if is_dir:
            return _open_windows_directory(path)
        return _open_windows_file(path, follow=follow)
    return os.open(path, OPEN_FLAGS if follow else _NOFOLLOW)


if sys.platform == "win32":  # pragma: no cover - Windows only
    import msvcrt
    from ctypes import wintypes

    # CreateFileW and CloseHandle as serverio.fs.winstat declares them.
    _kernel32 = winstat.kernel32
    _CreateFileW = winstat.CreateFileW
    _GetFinalPathNameByHandleW = _kernel32.GetFinalPathNameByHandleW
    _GetFinalPathNameByHandleW.restype = wintypes.DWORD
    _GetFinalPathNameByHandleW.argtypes = (
        wintypes.HANDLE,
        wintypes.LPWSTR,
        wintypes.DWORD,
        wintypes.DWORD,
    )
    _INVALID_HANDLE = winstat.INVALID_HANDLE

    def _open_windows_directory(path: str) -> int:
        # FILE_READ_ATTRIBUTES; share read|write (not delete: the directory
        # cannot be renamed away while it is listed); OPEN_EXISTING;
        # FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT.
        handle = _CreateFileW(path, 0x80, 0x1 | 0x2, None, 3, 0x02000000 | 0x00200000, None)
        if handle is None or handle == _INVALID_HANDLE:
            raise ctypes.WinError(ctypes.get_last_error())
        return msvcrt.open_osfhandle(handle, os.O_RDONLY | os.O_BINARY)

    def _open_windows_file(path: str, *, follow: bool) -> int:
        # GENERIC_READ; FILE_SHARE_READ|FILE_SHARE_WRITE|FILE_SHARE_DELETE;
        # OPEN_EXISTING; FILE_ATTRIBUTE_NORMAL, plus FILE_FLAG_OPEN_REPARSE_POINT
        # unless links are followed.  No security attributes: the handle is
        # not inherited (O_NOINHERIT); O_BINARY: no CRLF or Ctrl+Z translation.
        flags = 0x80 if follow else 0x80 | 0x00200000
        handle = _CreateFileW(path, 0x80000000, 0x1 | 0x2 | 0x4, None, 3, flags, None)
        if handle is None or handle == _INVALID_HANDLE:
            err = ctypes.get_last_error()
            raise OSError(None, ctypes.FormatError(err), path, err)
        try:
            return msvcrt.open_osfhandle(handle, os.O_RDONLY | os.O_BINARY)
        except BaseException:
            _kernel32.CloseHandle(handle)
            raise

    def _final_path(fd: int) -> str | None:
        handle = msvcrt.get_osfhandle(fd)
        buf = ctypes.create_unicode_buffer(32768)
        n = _GetFinalPathNameByHandleW(handle, buf, len(buf), 0)  # VOLUME_NAME_DOS
        if n == 0 or n >= len(buf):
            return None
        value: str = buf.value
        return value[4:] if value.startswith("\\\\?\\") else value

else:

    def _open_windows_directory(path: str) -> int:
        raise OSError(errno.ENOSYS, "only on Windows")

    def _open_windows_file(path: str, *, follow: bool) -> int:
        raise OSError(errno.ENOSYS, "only on Windows")

    def _final_path(fd: int) -> str | None:
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
