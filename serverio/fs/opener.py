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
* ``walk``, everywhere else (other POSIX systems, Linux without openat2 or
  with a seccomp filter refusing it): a traversal-resistant component walk,
  the design of Go 1.24's ``os.Root``.  See :meth:`RootOpener._walk`.

``--follow-symlinks`` is a plain ``openat(root_fd, relpath)``: the relative
path has no ``..`` segments (:mod:`serverio.http.target` refuses them), so only
symlinks can lead out, and the operator allowed that (it also trusts links
to hidden names).

Every open uses ``O_NONBLOCK`` (a FIFO cannot hang the opener), ``O_CLOEXEC``
and ``O_NOCTTY``; the caller validates the file type with ``fstat``.
Refusals are :class:`OSError` with ``EXDEV`` (leaves the root, or reaches a
hidden name), ``ELOOP`` (too many links); callers answer 404 for both.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from typing import Final

__all__ = ["MAX_SYMLINKS", "STRATEGIES", "RootOpener"]

OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
_NOFOLLOW: Final = OPEN_FLAGS | getattr(os, "O_NOFOLLOW", 0)
_DIR_NOFOLLOW: Final = _NOFOLLOW | getattr(os, "O_DIRECTORY", 0)

# Symlinks resolved per open before giving up with ELOOP (Linux's own limit
# is 40, MAXSYMLINKS).
MAX_SYMLINKS: Final = 40

# What O_NOFOLLOW reports for a symlink: ELOOP on Linux and macOS, EMLINK on
# FreeBSD, EFTYPE on NetBSD; O_DIRECTORY | O_NOFOLLOW gives ENOTDIR on Linux.
# Each is checked with readlinkat (EINVAL: it was not a symlink after all).
_MAYBE_LINK: Final = frozenset(
    e for e in (errno.ELOOP, errno.EMLINK, getattr(errno, "EFTYPE", None)) if e is not None
)

STRATEGIES: Final = ("openat2", "walk")

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


_syscall = None
if sys.platform.startswith("linux"):
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


def _escape() -> OSError:
    return OSError(errno.EXDEV, "resolves outside the served root")


def _hidden_name() -> OSError:
    return OSError(errno.EXDEV, "resolves through a hidden name")


class RootOpener:
    """Opens relative paths confined to one root directory.

    Holds one descriptor on the root for the server's lifetime; thread-safe
    (it keeps no per-call state), so preparation can run in worker threads.

    ``hidden``: serve names starting with a dot (``--hidden``).  Otherwise a
    path whose *resolved* form passes through such a name (``env.txt ->
    .env``) is refused like the name itself; ``.well-known`` directly under
    the root is not hidden (RFC 8615).

    ``strategy``: ``"openat2"`` or ``"walk"`` (see the module docstring);
    None picks ``openat2`` where the kernel allows it.  Forcing one is a test
    seam, not a user option.
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
        self.root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._root_parts = tuple(p for p in self.root.split("/") if p)
        resolve = _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS
        if not hidden:
            resolve |= _RESOLVE_NO_SYMLINKS
        self._how = _OpenHow(OPEN_FLAGS, 0, resolve)
        if strategy is None:
            strategy = "openat2" if self._probe_openat2() else "walk"
        elif strategy == "openat2" and not self._probe_openat2():
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
            os.close(self.root_fd)
            self.root_fd = -1

    def open(self, relpath: str) -> int:
        """Open ``relpath`` (no ``..`` segments) under the root.

        Raises :class:`OSError`; ``EXDEV`` means "refused": it would leave
        the root, or reach a hidden name.  ENOENT and ENOTDIR always mean
        "missing inside the root" (nothing outside was looked at).
        """
        if self.follow_symlinks:
            return os.open(relpath, OPEN_FLAGS, dir_fd=self.root_fd)
        if self.strategy == "openat2":
            assert _syscall is not None
            fd = _syscall(
                _SYS_OPENAT2,
                self.root_fd,
                relpath.encode("utf-8", "surrogateescape"),
                ctypes.byref(self._how),
                _HOW_SIZE,
            )
            if fd >= 0:
                return int(fd)
            err = ctypes.get_errno()
            # EXDEV: an escape, or an absolute symlink that may point back
            # inside.  ELOOP: a symlink (RESOLVE_NO_SYMLINKS), or a loop.
            # The walk decides both without leaving the root.
            if err != errno.EXDEV and err != errno.ELOOP:
                raise OSError(err, os.strerror(err))
        return self._walk(relpath)

    def _walk(self, relpath: str) -> int:
        """Open ``relpath`` one component at a time; never leaves the root.

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
        links = 0
        try:
            while pending:
                name = pending.pop()
                if name == "..":
                    if not dirs:
                        raise _escape()
                    os.close(dirs.pop())
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
                    if exc.errno not in _MAYBE_LINK and exc.errno != errno.ENOTDIR:
                        raise
                    try:
                        target = os.readlink(name, dir_fd=cur)
                    except OSError as rexc:
                        if rexc.errno == errno.EINVAL:
                            raise exc from None  # not a symlink: the open's own error
                        raise
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP)) from None
                    if target.startswith("/"):
                        rest = self._inside(target)
                        while dirs:
                            os.close(dirs.pop())
                        pending.extend(reversed(rest))
                    else:
                        pending.extend(p for p in reversed(target.split("/")) if p and p != ".")
                    continue
                if last:
                    return fd
                dirs.append(fd)
            # The path resolved to a directory already on the stack (or the
            # root): hand over its descriptor, or open the root afresh.
            if dirs:
                return dirs.pop()
            return os.open(".", OPEN_FLAGS | os.O_DIRECTORY, dir_fd=self.root_fd)
        finally:
            for d in dirs:
                os.close(d)

    def _inside(self, target: str) -> list[str]:
        """The components of absolute ``target`` below the root; EXDEV if it
        does not lie lexically under the root's real path."""
        parts = [p for p in target.split("/") if p and p != "."]
        n = len(self._root_parts)
        if tuple(parts[:n]) != self._root_parts:
            raise _escape()
        return parts[n:]
