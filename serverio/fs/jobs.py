"""The blocking work of the content follow-ups: listing scans, compression, hashing.

(A listing's page is rendered by :func:`serverio.http.listing.render_listing`,
run in the same pool: fs reads and scans, it renders no HTML.)

:class:`serverio.pipeline.content.ContentService` orchestrates the
follow-ups on the trio side (caches, single flights, fallbacks); the
functions here are what it runs in the ``work`` pool through
:func:`~serverio.run_blocking`, never on the event loop: they read files and
directories, compress and hash.  Like :mod:`serverio.fs.prepare`, they are
synchronous and never touch trio.

Every function here that reads a descriptor receives an :class:`OwnedFd`
and closes its descriptor itself, exactly once, even when its caller has
been cancelled and the thread abandoned.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from dataclasses import dataclass
from typing import Any, Final

from ..http.codecs import compress_bytes
from ..http.core import content_hasher
from ..http.dates import http_seconds
from ..http.listing import Entry, entries_digest
from ..http.target import WRITE_TEMP_PREFIX
from ..model import Identity
from . import winstat
from .opener import ContainedRoot
from .reads import pread

__all__ = [
    "OwnedFd",
    "Scan",
    "compress_file",
    "hash_bytes",
    "hash_file",
    "hash_for_etag",
    "scan_directory",
    "scan_listing",
]

READ_CHUNK = 1 << 20

_HASHES: Final = {"sha-256": "sha256", "sha-512": "sha512"}


# --------------------------------------------------------- owned descriptors


class OwnedFd:
    """A descriptor handed to a worker thread; whoever claims it closes it.

    The thread claims it when it starts.  If the thread never starts (its
    caller was cancelled while queued, or the pool refused it), the job
    releases it instead.  The lock makes "claim" atomic between the two, so
    the descriptor is closed exactly once and never while in use.
    """

    __slots__ = ("_fd", "_lock")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()

    def claim(self) -> int:
        with self._lock:
            fd, self._fd = self._fd, -1
        return fd

    def release(self) -> None:
        fd = self.claim()
        if fd >= 0:
            os.close(fd)


def _read_exact(fd: int, size: int) -> bytes | None:
    parts = []
    offset = 0
    while offset < size:
        chunk = pread(fd, min(READ_CHUNK, size - offset), offset)
        if not chunk:
            return None  # the file shrank
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)


def _unchanged(fd: int, size: int, mtime_ns: int) -> bool:
    st = os.fstat(fd)
    return st.st_size == size and st.st_mtime_ns == mtime_ns


def compress_file(owned: OwnedFd, coding: str, size: int, mtime_ns: int) -> bytes | None:
    """Read exactly ``size`` bytes of the file and compress them (blocking).

    Returns None if the file changed under us (the cache key would lie).

    Cancellation handling: runs in a worker thread; if its job is cancelled
    the thread finishes anyway, closes its descriptor, and the result is
    dropped by :func:`~serverio.run_blocking`.
    """
    fd = owned.claim()
    if fd < 0:
        return None
    try:
        data = _read_exact(fd, size)
        if data is None or not _unchanged(fd, size, mtime_ns):
            return None
    finally:
        os.close(fd)
    return compress_bytes(coding, data)


def hash_file(owned: OwnedFd, algorithm: str, size: int, mtime_ns: int) -> bytes | None:
    """The digest of exactly ``size`` bytes of the opened file (blocking).

    The bytes hashed are the opened file's, the same inode the response is
    served from.  None if the file changed while we read it.

    Cancellation handling: as :func:`compress_file`.
    """
    fd = owned.claim()
    if fd < 0:
        return None
    try:
        h = hashlib.new(_HASHES[algorithm])
        if not _hash_span(h, fd, size) or not _unchanged(fd, size, mtime_ns):
            return None
        return h.digest()
    finally:
        os.close(fd)


def _hash_span(h: Any, fd: int, size: int) -> bool:
    """Feed the first ``size`` bytes of ``fd`` to ``h`` in READ_CHUNK
    positional reads; False if the file is shorter now."""
    offset = 0
    while offset < size:
        chunk = pread(fd, min(READ_CHUNK, size - offset), offset)
        if not chunk:
            return False
        h.update(chunk)
        offset += len(chunk)
    return True


def hash_for_etag(owned: OwnedFd, ident: Identity) -> bytes | None:
    """The ETag content hash of the opened file (blocking), or None if its
    identity is no longer ``ident`` after the read (it changed meanwhile).

    Cancellation handling: as :func:`compress_file`.
    """
    fd = owned.claim()
    if fd < 0:
        return None
    try:
        h = content_hasher()
        if not _hash_span(h, fd, ident[2]):
            return None
        st = winstat.fstat(fd)
        if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != ident:
            return None
        return h.digest()
    finally:
        os.close(fd)


def hash_bytes(algorithm: str, data: bytes) -> bytes:
    return hashlib.new(_HASHES[algorithm], data).digest()


# ------------------------------------------------------------------ listing


def _listable_name(name: str, *, hidden: bool, at_root: bool) -> bool:
    """Would a request for this name pass :func:`serverio.http.target.parse_target`
    and the hidden policy?  Names that cannot be served are not listed.
    Every other name has a URL: a backslash is linked as ``%5C``, a byte
    that is not UTF-8 (scandir gives it as a surrogate, as the target
    parser does) as its own ``%XX``."""
    if name.startswith("."):
        if name.startswith(WRITE_TEMP_PREFIX):
            return False  # an upload's temporary file, even with --hidden
        return hidden or (at_root and name == ".well-known")
    return True


def scan_directory(
    owned: OwnedFd,
    opener: ContainedRoot,
    relpath: str,
    hidden: bool,
    limit: int,
    real: str | bool | None = False,
) -> tuple[list[Entry], bool]:
    """Scan one directory (blocking): the entries a client could fetch.

    Applies the serving policy to every name: hidden names unless
    ``hidden``; symlinks are resolved through ``opener`` (the same
    containment as a request: a link leaving the root is not listed unless
    the opener follows symlinks; a dangling one never is); only regular
    files and directories.  Stops after ``limit`` entries; the boolean says
    whether it stopped early.

    Where directories cannot be scanned through a descriptor (the opener's
    ``windows`` strategy: no ``dir_fd``, no ``scandir(fd)``) the directory
    is listed by path: the opener resolves ``relpath`` again under the same
    containment and checks it is still the directory ``owned`` holds.

    ``real``: False (no auth rules), or where the directory's own open led
    through a symlink (its resolved path, None: no link): each entry then
    carries where it leads, if a link is on its way
    (:attr:`~serverio.http.listing.Entry.real`; a link entry's target
    through ``open_resolved``), for the rules of the resolved target.

    Cancellation handling: runs in a worker thread; if the requester is
    cancelled the thread finishes the scan, closes the directory descriptor
    it owns, and the result is dropped.
    """
    fd = owned.claim()
    if fd < 0:
        return [], False
    resolving = real is not False
    base = real if isinstance(real, str) else None
    at_root = relpath == "."
    prefix = "" if at_root else relpath + "/"
    entries: list[Entry] = []
    truncated = False
    try:
        source = fd if opener.root_fd >= 0 else opener.directory_path(relpath, fd)
        with os.scandir(source) as it:
            for de in it:
                name = de.name
                if not _listable_name(name, hidden=hidden, at_root=at_root):
                    continue
                try:
                    st = de.stat(follow_symlinks=False)
                    led = None if base is None else f"{base}/{name}" if base else name
                    if stat.S_ISLNK(st.st_mode):
                        if resolving:
                            link_fd, led = opener.open_resolved(prefix + name)
                        else:
                            link_fd = opener.open(prefix + name)
                        try:
                            st = os.fstat(link_fd)
                        finally:
                            os.close(link_fd)
                except OSError:
                    continue  # vanished, escapes the root, dangling, forbidden
                if stat.S_ISDIR(st.st_mode):
                    is_dir = True
                elif stat.S_ISREG(st.st_mode):
                    is_dir = False
                else:
                    continue  # FIFO, socket, device: never served
                if len(entries) >= limit:
                    truncated = True
                    break
                mtime = http_seconds(st.st_mtime_ns)
                size = -1 if is_dir else st.st_size
                entries.append(Entry(name, is_dir, size, mtime, led))
    finally:
        os.close(fd)
    return entries, truncated


@dataclass(frozen=True, slots=True)
class Scan:
    """What :func:`scan_listing` found: the entries and the directory's identity."""

    entries: list[Entry]
    truncated: bool
    dev: int
    ino: int
    digest: bytes  # serverio.http.listing.entries_digest


def scan_listing(
    owned: OwnedFd,
    opener: ContainedRoot,
    relpath: str,
    hidden: bool,
    limit: int,
    real: str | bool | None = False,
) -> Scan:
    """Scan one directory (blocking) and digest what was found (``real``:
    see :func:`scan_directory`).

    Cancellation handling: as :func:`scan_directory`.
    """
    fd = owned.claim()
    if fd < 0:
        return Scan([], False, 0, 0, b"")
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    entries, truncated = scan_directory(OwnedFd(fd), opener, relpath, hidden, limit, real)
    return Scan(entries, truncated, st.st_dev, st.st_ino, entries_digest(entries, truncated))
