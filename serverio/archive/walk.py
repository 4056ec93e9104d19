"""The blocking edge of folder archives: scan a directory, open a member,
read a span (each run in the ``fs`` pool by :mod:`serverio.archive.stream`).

Every open goes through the root's contained opener
(:class:`serverio.fs.opener.RootOpener`: openat2, the component walk or
the Windows strategy), and every scan is the listing's own
(:func:`serverio.fs.jobs.scan_listing`: hidden names, containment of
symlinks, regular files and directories only), so an archive holds
exactly what the listings under it show.

Descriptors cross threads as :class:`~serverio.fs.jobs.OwnedFd`: the
thread claims one when it starts and hands it back in its result, so a
caller cancelled while the thread runs leaves the result (and its
descriptor) to ``run_blocking``'s ``late_close``, and a caller cancelled
before the thread started still holds the descriptor and closes it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import NamedTuple

from ..fs.jobs import OwnedFd, Scan, scan_listing
from ..fs.opener import ContainedRoot
from ..fs.reads import pread

__all__ = ["Opened", "Read", "close_opened", "close_read", "open_member", "read_span", "scan_at"]


def scan_at(
    opener: ContainedRoot, relpath: str, hidden: bool, limit: int, resolving: bool = False
) -> Scan:
    """Open ``relpath`` through the contained opener and scan it (blocking).
    ``resolving`` (the site has auth rules): the entries say where a
    symlink on their way leads (:func:`~serverio.fs.jobs.scan_directory`).

    Raises OSError (gone, refused, not a directory).

    Cancellation handling: runs in a worker thread; abandoned, it finishes
    and closes the directory itself (:func:`scan_listing` owns it)."""
    real: str | bool | None = False
    if resolving:
        fd, real = opener.open_resolved(relpath)
    else:
        fd = opener.open(relpath)
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise NotADirectoryError(relpath)
    except OSError:
        os.close(fd)
        raise
    return scan_listing(OwnedFd(fd), opener, relpath, hidden, limit, real)


class Opened(NamedTuple):
    """A member opened for reading: its descriptor and its facts then."""

    fd: int
    size: int
    mtime: float
    mode: int


def open_member(opener: ContainedRoot, relpath: str, led: str | bool | None = False) -> Opened:
    """Open a regular file through the contained opener (blocking).

    ``led``: False (no auth rules), or where the walk found the member
    leads (its ``Entry.real``, the target its rules were decided on): the
    open must lead there still (a link swapped since: EXDEV).

    Raises OSError (gone, refused, no longer a regular file)."""
    if led is False:
        fd = opener.open(relpath)
    else:
        fd, real = opener.open_resolved(relpath)
        if real != led:
            os.close(fd)
            raise OSError(errno.EXDEV, "leads elsewhere than when it was walked")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(21, "not a regular file")  # EISDIR
    except OSError:
        os.close(fd)
        raise
    return Opened(fd, st.st_size, st.st_mtime, st.st_mode)


def close_opened(opened: Opened) -> None:
    """``late_close`` of :func:`open_member`: its caller left."""
    os.close(opened.fd)


class Read(NamedTuple):
    """A span read: the descriptor handed back, how many bytes were read
    (short or 0: the file shrank) and their encoding."""

    fd: int
    length: int
    encoded: bytes


def read_span(owned: OwnedFd, offset: int, size: int, encode: Callable[[bytes], bytes]) -> Read:
    """Read ``size`` bytes at ``offset`` of the member ``owned`` holds and
    ``encode`` them (blocking: the compression runs in the pool thread, off
    the event loop; zlib releases the GIL); the descriptor comes back in
    the result (-1: it was closed before the thread started, nothing read).
    One call at a time per archive, so the encoder is never shared."""
    fd = owned.claim()
    if fd < 0:
        return Read(-1, 0, b"")
    try:
        data = pread(fd, size, offset)
        return Read(fd, len(data), encode(data) if data else b"")
    except BaseException:
        os.close(fd)
        raise


def close_read(read: Read) -> None:
    """``late_close`` of :func:`read_span`: its caller left."""
    if read.fd >= 0:
        os.close(read.fd)
