"""Resumable uploads, the blocking part: the upload's files and lock.

An incomplete upload is two hidden files in its target's directory (the
same filesystem and the same containment as a PUT's temporary; never
listed, served, archived or reachable over WebDAV: their names start with
:data:`~serverio.http.target.WRITE_TEMP_PREFIX`):

* ``.serverio-tmp-up-<id>``: the bytes received so far, appended in
  order; its size, once fsynced, is the upload's offset (so the offset a
  client is told is only ever durable bytes, unless ``--no-fsync``);
* ``.serverio-tmp-up-<id>.info``: what the upload is (the target's name,
  the length once known, the expiry, the protocol, the client, the
  ``Repr-Digest`` to check, ``If-None-Match: *``), JSON, replaced
  atomically when it changes.

An upload is held by one request at a time: :func:`open_upload` takes an
exclusive, non-blocking lock on the data file (``flock`` on POSIX, a
``msvcrt`` byte-range lock on Windows), which every process sharing the
directory sees, so two replicas appending at the same offset cannot both
win.  Nothing is at the target's name until :meth:`Held.commit`: the last
byte is in, the digest matches, then one rename.

Every function here is blocking and runs in the uploads' ``write`` pool;
the system calls go through :data:`serverio.fs.writer.SYS` (the fault
injection seam of the write path).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import stat
import sys
import time
from dataclasses import asdict, dataclass
from typing import Final

from ..fs.opener import ContainedRoot
from ..fs.writer import (
    NO_REPLACE,
    SYS,
    Placement,
    Refusal,
    WriteRefused,
    open_target,
    writable_current,
)
from ..http.target import KEPT_TEMP_PREFIX, WRITE_TEMP_PREFIX

__all__ = [
    "INFO_SUFFIX",
    "TEMP_PREFIX",
    "Busy",
    "Held",
    "Info",
    "Missing",
    "create_upload",
    "open_upload",
    "scan_uploads",
    "sweep_uploads",
]

# The names of a resumable upload's files (a write temporary's prefix,
# so every reader of the tree skips them as it skips a PUT's).
TEMP_PREFIX: Final = KEPT_TEMP_PREFIX
INFO_SUFFIX: Final = ".info"
_NEW_SUFFIX: Final = ".new"
_ID_HEX: Final = 24  # 96 random bits
_OPEN: Final = (
    os.O_RDWR
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_CREATE: Final = _OPEN | os.O_CREAT | os.O_EXCL
_INFO_MAX: Final = 64 * 1024
# Windows: the byte a lock covers (far past any file's end, so locking
# it never blocks a read or write of the data).
_LOCK_AT: Final = 1 << 62
# The sweeper's bounds (as serverio.fs.writer.sweep's).
SWEEP_DIRS: Final = 100_000
SWEEP_SECONDS: Final = 30.0


class Busy(Exception):
    """Another request (here or on another replica) holds the upload."""


class Missing(Exception):
    """No such upload (completed, cancelled, expired and swept, or never)."""


@dataclass(slots=True)
class Info:
    """What an upload is (its ``.info`` file)."""

    name: str  # the target's name in its directory
    length: int | None
    created: float
    expires: float
    tus: bool
    client: str
    repr_digest: str | None = None  # Repr-Digest given at creation (raw)
    create_only: bool = False  # If-None-Match: * at creation
    v: int = 1

    def dumps(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def loads(cls, data: bytes) -> Info:
        raw = json.loads(data)
        if not isinstance(raw, dict) or raw.get("v") != 1:
            raise ValueError("unknown upload info")
        info = cls(**raw)
        if not isinstance(info.name, str) or not isinstance(info.expires, (int, float)):
            raise ValueError("bad upload info")
        return info


if sys.platform == "win32":  # pragma: no cover - Windows only
    import msvcrt

    def _try_lock(fd: int) -> bool:
        """An exclusive lock on ``fd`` without waiting; False when held
        elsewhere: a byte-range lock on one byte far past the data (so it
        never blocks a read or write of it), released when ``fd`` closes."""
        pos = os.lseek(fd, 0, os.SEEK_CUR)
        os.lseek(fd, _LOCK_AT, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        finally:
            os.lseek(fd, pos, os.SEEK_SET)
        return True

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        """An exclusive lock on ``fd`` without waiting; False when held
        elsewhere.  ``flock``: per open file description, so two
        descriptors of one process exclude each other too (an abandoned
        thread's holds); released when ``fd`` closes."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = SYS.write(fd, view)  # type: ignore[arg-type]
        view = view[n:]


class Held:
    """One upload opened and locked for one request: the directory
    (:class:`~serverio.fs.writer.Placement`), the data file's descriptor
    at its end, its :class:`Info` and durable ``offset``.

    Cancellation handling: blocking methods run in the ``write`` pool;
    :meth:`close` (idempotent) unlocks and closes both descriptors and is
    called by the owner's ``finally`` (or by the abandoned thread that
    still runs a step).  Bytes written before a cancellation stay in the
    file: the next :func:`open_upload` fsyncs and reports them.
    """

    def __init__(self, place: Placement, fd: int, upload_id: str, info: Info, sync: bool) -> None:
        self.place = place
        self.fd = fd
        self.upload_id = upload_id
        self.info = info
        self.sync = sync
        self.offset = 0
        self.hasher: hashlib._Hash | None = None  # this request's content checksum
        self.dir_segments: tuple[str, ...] = ()  # the target's directory, from the root

    @property
    def data_name(self) -> str:
        return TEMP_PREFIX + self.upload_id

    def write(self, chunks: list[bytes]) -> None:
        """Append ``chunks`` (their bytes count toward the offset only once
        :meth:`durable` says so)."""
        start = self.offset
        for data in chunks:
            _write_all(self.fd, data)
            self.offset += len(data)
            if self.hasher is not None:
                self.hasher.update(data)
        if self.sync and sys.platform == "linux" and self.offset > start:
            # Start the writeback of what was just written (DONTNEED writes
            # dirty pages back asynchronously, then drops them: upload data
            # is not read again), so the part's closing fsync waits for
            # little: the disk works while the next batch arrives, as it
            # does for a single PUT's one fsync at the end.
            os.posix_fadvise(self.fd, start, self.offset - start, os.POSIX_FADV_DONTNEED)

    def durable(self) -> int:
        """fsync (unless ``--no-fsync``) and the offset now on disk."""
        if self.sync:
            SYS.fsync(self.fd)
        return self.offset

    def truncate(self, offset: int) -> None:
        """Back to ``offset`` (a part whose checksum failed is not appended)."""
        os.ftruncate(self.fd, offset)
        os.lseek(self.fd, offset, os.SEEK_SET)
        self.offset = offset
        if self.sync:
            SYS.fsync(self.fd)

    def save_info(self) -> None:
        """Replace the info file (the length became known)."""
        _write_info(self.place, self.upload_id, self.info, self.sync, replace=True)

    def digest_matches(self, expected: dict[str, bytes]) -> bool:
        """Does the whole file have the digests ``expected`` (Repr-Digest:
        RFC 9530 names ``sha-256``, ``sha-512``)?  Reads it again."""
        algos = {"sha-256": "sha256", "sha-512": "sha512"}
        hashers = {k: hashlib.new(algos[k]) for k in expected if k in algos}
        if not hashers:
            return True
        os.lseek(self.fd, 0, os.SEEK_SET)  # os.pread: not on Windows
        try:
            while data := os.read(self.fd, 1 << 20):
                for h in hashers.values():
                    h.update(data)
        finally:
            os.lseek(self.fd, 0, os.SEEK_END)
        return all(h.digest() == expected[k] for k, h in hashers.items())

    def commit(self, no_replace: bool) -> os.stat_result:
        """Make the data the target: fsync, one rename (no-replace under
        ``If-None-Match: *``), remove the info file, fsync the directory.
        Raises :class:`~serverio.fs.writer.WriteRefused` (``EXISTS``, or
        the target became a directory) and leaves the upload intact."""
        place = self.place
        if self.sync:
            SYS.fsync(self.fd)
        st = SYS.fstat(self.fd)
        path, kw = place.at(place.name)
        try:
            now: os.stat_result | None = SYS.lstat(path, **kw)
        except FileNotFoundError:
            now = None
        if no_replace and now is not None:
            raise WriteRefused(Refusal.EXISTS)
        refusal = writable_current(now)
        if refusal is not None:
            raise WriteRefused(refusal)
        src, _ = place.at(self.data_name)
        try:
            if no_replace:
                NO_REPLACE(place, self.data_name, place.name)
            else:
                fd = kw.get("dir_fd")
                SYS.replace(src, path, src_dir_fd=fd, dst_dir_fd=fd)
        except FileExistsError:
            raise WriteRefused(Refusal.EXISTS) from None
        _unlink(place, self.data_name + INFO_SUFFIX)
        if self.sync and place.dir_fd >= 0:
            SYS.fsync(place.dir_fd)
        return st

    def remove(self) -> None:
        """Cancel: both files gone (DELETE of the upload resource, expiry)."""
        _unlink(self.place, self.data_name)
        _unlink(self.place, self.data_name + INFO_SUFFIX)

    def close(self) -> None:
        """Unlock and close (closing releases the lock); idempotent."""
        fd, self.fd = self.fd, -1
        try:
            if fd >= 0:
                SYS.close(fd)
        finally:
            self.place.close()


def _unlink(place: Placement, name: str) -> None:
    path, kw = place.at(name)
    try:
        SYS.unlink(path, **kw)
    except FileNotFoundError:
        pass


def _write_info(place: Placement, upload_id: str, info: Info, sync: bool, replace: bool) -> None:
    name = TEMP_PREFIX + upload_id + INFO_SUFFIX
    target = name + _NEW_SUFFIX if replace else name
    path, kw = place.at(target)
    if replace:
        _unlink(place, target)
    fd = SYS.open(path, _CREATE, 0o600, **kw)
    try:
        _write_all(fd, info.dumps())
        if sync:
            SYS.fsync(fd)
    finally:
        SYS.close(fd)
    if replace:
        final, _ = place.at(name)
        dfd = kw.get("dir_fd")
        SYS.replace(path, final, src_dir_fd=dfd, dst_dir_fd=dfd)


def create_upload(
    opener: ContainedRoot,
    segments: tuple[str, ...],
    hidden: bool,
    min_free: int,
    info: Info,
    sync: bool,
) -> Held:
    """A new upload for the file ``segments`` names: its directory opened
    under containment (with ``open_target``'s refusals: a bad name, no
    directory, less than ``min_free`` bytes free), the target checked
    (a directory or special file there: refused), the data file created
    and locked, the info file written (fsynced, and the directory, unless
    ``--no-fsync``)."""
    place = open_target(opener, segments, hidden, min_free)
    try:
        refusal = writable_current(place.current)
        if refusal is not None:
            raise WriteRefused(refusal)
        if info.create_only and place.current is not None:
            raise WriteRefused(Refusal.EXISTS)
        info.name = place.name
        for _ in range(8):
            upload_id = secrets.token_hex(_ID_HEX // 2)
            path, kw = place.at(TEMP_PREFIX + upload_id)
            try:
                fd = SYS.open(path, _CREATE, 0o666, **kw)
            except FileExistsError:
                continue
            break
        else:
            raise OSError(errno.EEXIST, "no free upload name")
        held = Held(place, fd, upload_id, info, sync)
        held.dir_segments = segments[:-1]
    except BaseException:
        place.close()
        raise
    try:
        if not _try_lock(fd):
            raise Busy(upload_id)
        _write_info(place, upload_id, info, sync, replace=False)
        if sync and place.dir_fd >= 0:
            SYS.fsync(place.dir_fd)
    except BaseException:
        held.remove()
        held.close()
        raise
    return held


def open_upload(
    opener: ContainedRoot, segments: tuple[str, ...], upload_id: str, hidden: bool, sync: bool
) -> Held:
    """The upload ``upload_id`` of the file ``segments`` names, locked,
    its offset durable (fsynced now: bytes a killed process wrote are
    reported only once they are on disk).  Raises :class:`Missing`
    (no such upload) or :class:`Busy` (held by another request)."""
    if len(upload_id) != _ID_HEX or not all(c in "0123456789abcdef" for c in upload_id):
        raise Missing(upload_id)
    try:
        place = open_target(opener, segments, hidden)
    except WriteRefused:
        raise Missing(upload_id) from None
    try:
        path, kw = place.at(TEMP_PREFIX + upload_id)
        try:
            fd = SYS.open(path, _OPEN, **kw)
        except (FileNotFoundError, NotADirectoryError):
            raise Missing(upload_id) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Missing(upload_id) from None
            raise
    except BaseException:
        place.close()
        raise
    held = Held(place, fd, upload_id, Info("", None, 0.0, 0.0, False, ""), sync)
    held.dir_segments = segments[:-1]
    try:
        if not stat.S_ISREG(SYS.fstat(fd).st_mode):
            raise Missing(upload_id)
        if not _try_lock(fd):
            raise Busy(upload_id)
        info_path, _ = place.at(TEMP_PREFIX + upload_id + INFO_SUFFIX)
        try:
            ifd = SYS.open(info_path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0), **kw)
        except FileNotFoundError:
            raise Missing(upload_id) from None
        try:
            data = os.read(ifd, _INFO_MAX)
        finally:
            SYS.close(ifd)
        try:
            held.info = Info.loads(data)
        except (ValueError, TypeError):
            raise Missing(upload_id) from None
        if held.info.name != place.name:
            raise Missing(upload_id)  # another target's upload
        size = os.lseek(fd, 0, os.SEEK_END)
        held.offset = size
        held.durable()
    except BaseException:
        held.close()
        raise
    return held


def _uploads_in(path: str) -> list[str]:
    try:
        with os.scandir(path) as it:
            return [
                e.name[len(TEMP_PREFIX) : -len(INFO_SUFFIX)]
                for e in it
                if e.name.startswith(TEMP_PREFIX) and e.name.endswith(INFO_SUFFIX)
            ]
    except OSError:
        return []


def scan_uploads(root: str) -> list[tuple[str, str, Info, int]]:
    """Every upload under ``root``: (directory, id, info, size of its
    data); bounded like :func:`sweep_uploads`; symlinks never followed."""
    out: list[tuple[str, str, Info, int]] = []
    for path, names in _walk(root):
        for upload_id in names:
            base = os.path.join(path, TEMP_PREFIX + upload_id)
            try:
                with open(base + INFO_SUFFIX, "rb") as f:
                    info = Info.loads(f.read(_INFO_MAX))
                size = os.lstat(base).st_size
            except (OSError, ValueError, TypeError):
                continue
            out.append((path, upload_id, info, size))
    return out


def _walk(root: str) -> list[tuple[str, list[str]]]:
    started = time.monotonic()
    pending = [root]
    found: list[tuple[str, list[str]]] = []
    visited = 0
    while pending and visited < SWEEP_DIRS and time.monotonic() - started < SWEEP_SECONDS:
        path = pending.pop()
        visited += 1
        try:
            with os.scandir(path) as it:
                entries = list(it)
        except OSError:
            continue
        names: list[str] = []
        ours = False
        for e in entries:
            try:
                if e.name.startswith(TEMP_PREFIX):
                    ours = True
                    if e.name.endswith(INFO_SUFFIX):
                        names.append(e.name[len(TEMP_PREFIX) : -len(INFO_SUFFIX)])
                elif e.is_dir(follow_symlinks=False) and not e.name.startswith(WRITE_TEMP_PREFIX):
                    pending.append(e.path)
            except OSError:
                continue
        if ours:
            found.append((path, names))
    return found


def sweep_uploads(root: str, now: float, orphan_after: float) -> list[tuple[str, int]]:
    """Remove every expired upload under ``root`` (both files; one held by
    a request is left for the next sweep), and data files without an info
    file older than ``orphan_after`` seconds (a creation killed between
    its two files).  Returns (client, length-or-size) of each removed.

    Cancellation handling: holds nothing across uploads; an abandoned
    sweep runs to its bounds."""
    removed: list[tuple[str, int]] = []
    for path, upload_id, info, size in scan_uploads(root):
        if info.expires > now:
            continue
        base = os.path.join(path, TEMP_PREFIX + upload_id)
        try:
            fd = SYS.open(base, _OPEN)
        except OSError:
            fd = -1
        try:
            if fd >= 0 and not _try_lock(fd):
                continue  # a request holds it: next time
            for name in (base, base + INFO_SUFFIX):
                try:
                    SYS.unlink(name)
                except FileNotFoundError:
                    pass
            removed.append((info.client, info.length if info.length is not None else size))
        except OSError:
            continue
        finally:
            if fd >= 0:
                SYS.close(fd)
    cutoff = now - orphan_after
    for path, _ in _walk(root):
        _orphans(path, cutoff)
    return removed


def _orphans(path: str, cutoff: float) -> None:
    try:
        with os.scandir(path) as it:
            names = {e.name: e for e in it if e.name.startswith(TEMP_PREFIX)}
    except OSError:
        return
    for name, e in names.items():
        if name.endswith(INFO_SUFFIX) or (name + INFO_SUFFIX) in names:
            continue
        try:
            if e.stat(follow_symlinks=False).st_mtime < cutoff:
                SYS.unlink(e.path)
        except OSError:
            continue
