"""Opening a path under the root without ever leaving it.

There is no check-then-open window: the containment check is made by the
kernel during the open itself, or on the already-opened descriptor.

* ``--follow-symlinks``: a plain ``openat(root_fd, relpath)``.  The relative
  path has no ``..`` segments (:mod:`serverio.http.target` refuses them), so only
  symlinks can lead out, and the operator allowed that.
* Otherwise, on Linux >= 5.6: ``openat2(root_fd, relpath,
  RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)``.  The kernel refuses (EXDEV) any
  resolution step that would leave ``root_fd``, atomically with the open.  One
  syscall, same cost as ``openat``.
* RESOLVE_BENEATH also refuses *absolute* symlinks, even ones pointing back
  inside the root; for those (EXDEV), and where openat2 is unavailable, we
  open normally and then verify the opened descriptor's real path through
  ``/proc/self/fd``.  The verification looks at the object we will actually
  serve, so swapping a symlink after the check changes nothing.

Every open uses ``O_NONBLOCK`` (a FIFO cannot hang the opener) and
``O_CLOEXEC``; the caller validates the file type with ``fstat``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

__all__ = ["RootOpener"]

OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)

_SYS_OPENAT2 = 437  # the same number on every Linux architecture (new syscall table)
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

_HOW = _OpenHow(OPEN_FLAGS, 0, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
_HOW_SIZE = ctypes.sizeof(_OpenHow)


class RootOpener:
    """Opens relative paths confined to one root directory.

    Holds one descriptor on the root for the server's lifetime; thread-safe
    (it keeps no per-call state), so preparation can run in worker threads.
    """

    def __init__(self, root: str, *, follow_symlinks: bool) -> None:
        self.root = os.path.realpath(root)
        self.follow_symlinks = follow_symlinks
        self.root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.use_openat2 = _syscall is not None and not follow_symlinks
        if self.use_openat2 and not self._probe_openat2():
            self.use_openat2 = False
        self._prefix = self.root.rstrip("/") + "/"
        self._proc = os.path.isdir("/proc/self/fd")

    def _probe_openat2(self) -> bool:
        assert _syscall is not None
        fd = _syscall(_SYS_OPENAT2, self.root_fd, b".", ctypes.byref(_HOW), _HOW_SIZE)
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

        Raises :class:`OSError`; ``EXDEV`` means "would leave the root".
        """
        if self.follow_symlinks:
            return os.open(relpath, OPEN_FLAGS, dir_fd=self.root_fd)
        if self.use_openat2:
            assert _syscall is not None
            fd = _syscall(
                _SYS_OPENAT2,
                self.root_fd,
                relpath.encode("utf-8", "surrogateescape"),
                ctypes.byref(_HOW),
                _HOW_SIZE,
            )
            if fd >= 0:
                return int(fd)
            err = ctypes.get_errno()
            if err != errno.EXDEV:
                raise OSError(err, os.strerror(err))
            # EXDEV: an escape, or an absolute symlink that may point back
            # inside.  Decide on the opened descriptor below.
        fd = os.open(relpath, OPEN_FLAGS, dir_fd=self.root_fd)
        try:
            self._verify(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _verify(self, fd: int) -> None:
        if self._proc:
            real = os.readlink(f"/proc/self/fd/{fd}")
        else:  # pragma: no cover - non-Linux: best effort via the path
            real = os.path.realpath(f"/dev/fd/{fd}")
        if real != self.root and not real.startswith(self._prefix):
            raise OSError(errno.EXDEV, "resolves outside the served root")
