"""The atomic, cancellation-safe write path (blocking; issue 29).

Every write streams into a temporary file and becomes visible only whole:

1. :func:`open_target` opens the target's directory through the root's
   containment (:meth:`serverio.fs.opener.RootOpener.open`: no symlink
   leading out, no hidden name unless ``--hidden``), checks the final name
   with :func:`serverio.fs.names.check_name` (no dotfile unless
   hidden, no Windows-reserved name, no upload temporary) and ``lstat``\\ s
   it there: the facts of the current file (for the preconditions), or
   the reason it cannot be written (a directory, a symlink, not a regular
   file, the directory missing);
2. :meth:`WriteJob.create` creates ``.serverio-tmp-<random>`` in that
   directory with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (never through an
   existing name); :meth:`WriteJob.write` appends each chunk as it arrives;
3. :meth:`WriteJob.commit`: ``fsync``, then ``os.replace`` (or, when the
   client must not overwrite, ``If-None-Match: *``, a no-replace rename:
   :data:`NO_REPLACE`, the one platform strategy), then ``fsync`` of the
   directory (POSIX: the rename itself is durable).

Nothing here returns an HTTP status: refusals are :class:`WriteRefused`
with a :class:`Refusal` (the upload feature maps them), ``OSError`` for
the rest.  Every system call goes through :data:`SYS`, so tests inject
faults (a full disk, a failing fsync, a rename that fails).

The temporary name starts with :data:`~serverio.http.target.WRITE_TEMP_PREFIX`,
which listings and request resolution hide even with ``--hidden``;
:func:`sweep` removes the ones a killed process left, at start-up.
"""

from __future__ import annotations

import enum
import errno
import hashlib
import os
import secrets
import shutil
import stat
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..http.core import content_hasher
from ..http.target import KEPT_TEMP_PREFIX, WRITE_TEMP_PREFIX
from .names import UnsafeName, check_name
from .opener import ContainedRoot

__all__ = [
    "NO_REPLACE",
    "SYS",
    "Placement",
    "Refusal",
    "WriteJob",
    "WriteRefused",
    "current_bytes",
    "delete_file",
    "make_directory",
    "make_parents",
    "open_target",
    "place_write",
    "require_free",
    "sweep",
    "writable_current",
]


def _flag(name: str) -> int:
    value: int = getattr(os, name, 0)
    return value


_WINDOWS: Final = sys.platform == "win32"
_CREATE: Final = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | _flag("O_NOFOLLOW")
    | _flag("O_CLOEXEC")
    | _flag("O_NOCTTY")
    | _flag("O_BINARY")
    | _flag("O_NOINHERIT")
)
_READ: Final = os.O_RDONLY | _flag("O_NOFOLLOW") | _flag("O_CLOEXEC") | _flag("O_NONBLOCK")
# A write whose size was not known up front (a chunked PUT, a form's file)
# looks at the free space again after at most this many bytes.
_FREE_EVERY: Final = 1 << 20


class Refusal(enum.Enum):
    """Why a write cannot be made (the value is the log text)."""

    NAME = "unsafe name"  # check_name refused it, or containment did
    NO_PARENT = "parent directory missing"
    DIRECTORY = "target is a directory"
    NOT_FILE = "target is not a regular file"  # a symlink, a FIFO, a device
    EXISTS = "target exists"  # the no-replace rename found a file
    CHANGED = "target changed since its preconditions were decided"
    MISSING = "target does not exist"  # DELETE of nothing
    NO_SPACE = "not enough free space"


class WriteRefused(Exception):
    """A write (or delete) serverio will not make, with its reason."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.value)
        self.refusal = refusal


class Sys:
    """The system calls of the write path, as attributes: the fault
    injection seam (tests replace one with a failing one)."""

    def __init__(self) -> None:
        self.open: Callable[..., int] = os.open
        self.write: Callable[[int, bytes], int] = os.write
        self.fsync: Callable[[int], None] = os.fsync
        self.close: Callable[[int], None] = os.close
        self.fstat: Callable[[int], os.stat_result] = os.fstat
        self.replace: Callable[..., None] = os.replace
        self.rename: Callable[..., None] = os.rename
        self.link: Callable[..., None] = os.link
        self.unlink: Callable[..., None] = os.unlink
        self.mkdir: Callable[..., None] = os.mkdir
        self.lstat: Callable[..., os.stat_result] = os.lstat
        self.free: Callable[[Placement], int] = _free_bytes


@dataclass(slots=True)
class Placement:
    """The target's directory (opened under containment), its checked
    name, and what is there now (``current``: its ``lstat``, None when
    absent).  Owns ``dir_fd`` (-1 under the ``windows`` strategy, where
    ``dir_path`` is used, checked against the opened handle)."""

    dir_fd: int
    dir_path: str
    name: str
    current: os.stat_result | None
    # Where the directory lies below the root, as resolved ("a/b", "" for
    # the root; an in-root link's target, not its name), and the root's
    # descriptor (not owned): the WebDAV dead-property store is keyed by
    # that path at that root (serverio.fs.davtree).
    real: str = ""
    root_fd: int = -1

    def at(self, name: str) -> tuple[str, dict[str, Any]]:
        """``name`` in the directory: the path and the ``dir_fd`` keyword."""
        if self.dir_fd >= 0:
            return name, {"dir_fd": self.dir_fd}
        return os.path.join(self.dir_path, name), {}

    def close(self) -> None:
        fd, self.dir_fd = self.dir_fd, -1
        if fd >= 0:
            SYS.close(fd)


def _free_bytes(place: Placement) -> int:
    """Bytes free to an unprivileged writer on the target's filesystem."""
    if place.dir_fd >= 0 and sys.platform != "win32":
        st = os.statvfs(place.dir_fd)
        return int(st.f_bavail * st.f_frsize)
    return shutil.disk_usage(place.dir_path).free


SYS: Final = Sys()


def require_free(place: Placement, min_free: int) -> None:
    """``--min-free-space``: :class:`WriteRefused` ``NO_SPACE`` when fewer
    than ``min_free`` bytes are free on ``place``'s filesystem (the
    reserve plus what the caller is about to write); blocking (one
    ``statvfs``).

    Cancellation handling: blocking, run in the ``write`` pool; it holds
    nothing.
    """
    if min_free and SYS.free(place) < min_free:
        raise WriteRefused(Refusal.NO_SPACE)


def _lstat(place: Placement, name: str) -> os.stat_result | None:
    path, kw = place.at(name)
    try:
        return SYS.lstat(path, **kw)
    except FileNotFoundError:
        return None


def open_target(
    opener: ContainedRoot, segments: tuple[str, ...], hidden: bool, min_free: int = 0
) -> Placement:
    """The :class:`Placement` of ``segments`` (the request's decoded path,
    at least one segment); blocking.

    Raises :class:`WriteRefused`: ``NAME`` (the last segment is not a safe
    name, or the directory is refused by containment), ``NO_PARENT`` (the
    directory is missing or not a directory), ``NO_SPACE`` (fewer than
    ``min_free`` bytes free, ``--min-free-space``).  A directory, symlink
    or special file at the name is reported in ``current``; the caller
    refuses it (:func:`writable_current`).

    Cancellation handling: blocking, run in the ``write`` pool with
    ``late_close=Placement.close``, so an abandoned call's directory
    descriptor is closed when it returns.
    """
    try:
        name = check_name(segments[-1], hidden=hidden, windows=_WINDOWS)
    except UnsafeName:
        raise WriteRefused(Refusal.NAME) from None
    if name != segments[-1]:
        raise WriteRefused(Refusal.NAME)  # not NFC: another name than the one asked for
    parent = "/".join(segments[:-1])
    try:
        fd, resolved = opener.open_resolved(parent or ".")
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise WriteRefused(Refusal.NO_PARENT) from None
        if exc.errno in (errno.EXDEV, errno.ELOOP):
            raise WriteRefused(Refusal.NAME) from None
        raise
    real = (parent if resolved is None else resolved).strip("/")
    place = Placement(fd, "", name, None, "" if real == "." else real, opener.root_fd)
    try:
        if not stat.S_ISDIR(SYS.fstat(fd).st_mode):
            raise WriteRefused(Refusal.NO_PARENT)
        if opener.strategy == "windows":
            place.dir_path = opener.directory_path(parent or ".", fd)
            place.close()
        place.current = _lstat(place, name)
        require_free(place, min_free)
    except BaseException:
        place.close()
        raise
    return place


def place_write(
    opener: ContainedRoot,
    segments: tuple[str, ...],
    hidden: bool,
    min_free: int,
    job: Callable[[Placement], WriteJob],
    create: bool,
) -> WriteJob:
    """The start of a write in one blocking step: :func:`open_target`, the
    job ``job`` makes on the placement, and, with ``create``, its
    temporary (:meth:`WriteJob.create`) unless the name holds what may not
    be replaced (``refusal``).  The caller decides its preconditions and
    rights on ``job.place.current`` after; a refusal then removes the
    temporary as any unfinished write's is removed (:meth:`WriteJob.discard`).

    Cancellation handling: blocking, run in the ``write`` pool with
    ``late_close=WriteJob.discard``, so an abandoned call's temporary is
    removed and its descriptors closed when it returns.
    """
    place = open_target(opener, segments, hidden, min_free)
    try:
        made = job(place)
    except BaseException:
        place.close()
        raise
    if create and made.refusal is None:
        try:
            made.create()
        except BaseException:
            made.discard()
            raise
    return made


def writable_current(current: os.stat_result | None) -> Refusal | None:
    """Why the thing at the name cannot be replaced (or deleted), or None."""
    if current is None or stat.S_ISREG(current.st_mode):
        return None
    if stat.S_ISDIR(current.st_mode):
        return Refusal.DIRECTORY
    return Refusal.NOT_FILE  # a symlink is never written through, nor replaced


def _same(a: os.stat_result | None, b: os.stat_result | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns) == (
        b.st_dev,
        b.st_ino,
        b.st_size,
        b.st_mtime_ns,
    )


def _rename_no_replace(place: Placement, src: str, dst: str) -> None:
    """Make ``src`` visible as ``dst`` only if ``dst`` does not exist
    (EEXIST otherwise).  POSIX: ``link`` then ``unlink`` of the temporary
    (link never replaces; the temporary's name is gone right after).
    Windows: ``os.rename``, which never replaces there."""
    s, kw = place.at(src)
    d, _ = place.at(dst)
    if _WINDOWS:
        SYS.rename(s, d)
        return
    fd = kw.get("dir_fd")
    # The temporary is a regular file we made: following it or not is the
    # same; not every platform's link() takes follow_symlinks=False.
    SYS.link(s, d, src_dir_fd=fd, dst_dir_fd=fd)
    SYS.unlink(s, **kw)


def _rename_replace(place: Placement, src: str, dst: str) -> None:
    s, kw = place.at(src)
    d, _ = place.at(dst)
    fd = kw.get("dir_fd")
    SYS.replace(s, d, src_dir_fd=fd, dst_dir_fd=fd)


# The one platform strategy for "create, never overwrite" (If-None-Match: *).
NO_REPLACE: Final = _rename_no_replace


def _fsync_dir(place: Placement) -> None:
    """POSIX: make the rename durable (the directory entry)."""
    if place.dir_fd >= 0:
        SYS.fsync(place.dir_fd)


class WriteJob:
    """One write in progress: its :class:`Placement`, its temporary file
    and what was written; every method but :meth:`release` is blocking and
    runs in the writer pool through :meth:`run`.

    Cancellation handling: the trio side calls :meth:`release` in a
    ``finally``.  If no thread is inside a step, it returns True and the
    caller runs :meth:`discard` (shielded, in the pool). If a thread is
    inside one (its caller was cancelled and abandoned it), it returns
    False: that thread discards the temporary itself as the step ends,
    so the temporary never outlives the thread that may still write it.
    """

    def __init__(
        self,
        place: Placement,
        *,
        sync: bool = True,
        hash_max: int | None = None,
        min_free: int = 0,
    ) -> None:
        self.place = place
        # Why the thing at the name may not be replaced (nor deleted): a
        # directory, a symlink or special file (writable_current), judged
        # when the job is placed; None: a file, or nothing there.
        self.refusal = writable_current(place.current)
        # --min-free-space while the content arrives (0: no check): a write
        # that would leave less free is refused (NO_SPACE), the free space
        # looked at again after every _FREE_EVERY bytes (:meth:`_room`).
        self.min_free = min_free
        self._room_until = 0  # ``written`` up to which the last look allows
        # False (--no-fsync): commit renames without fsync of the file or
        # its directory: still atomic, not durable across a power loss.
        self.sync = sync
        self.temp: str | None = None
        self.fd = -1
        self.written = 0
        # The ETag's content hash, as written; dropped (None) once more than
        # ``hash_max`` bytes are written: the ETag rule (EtagPolicy) wants no
        # hash of a file that large, so hashing it would be wasted CPU.
        self.hasher: hashlib.blake2b | None = content_hasher()
        self.hash_max = hash_max
        self.check: Callable[[bytes], object] | None = None  # a digest verifier's update
        self.done = False  # committed: nothing is held any more
        # Called (from whichever thread removes it) once the temporary is gone.
        self.removed: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._busy = False
        self._released = False

    def run(self, step: Callable[..., Any], *args: Any) -> Any:
        """Run ``step(*args)`` as this job's thread; after a release it
        refuses to start (``OSError(ECANCELED)``) and, if the release came
        while it ran, discards before returning."""
        with self._lock:
            if self._released:
                raise OSError(errno.ECANCELED, "write released")
            self._busy = True
        try:
            return step(*args)
        finally:
            if self._leave():  # released meanwhile (its caller was cancelled)
                self.discard()

    def _leave(self) -> bool:
        with self._lock:
            self._busy = False
            return self._released

    def release(self) -> bool:
        """No more steps (trio side, never blocks).  True: the caller must
        :meth:`discard`; False: nothing held, or the running thread will."""
        with self._lock:
            self._released = True
            return not self._busy and not self.done

    def create(self) -> None:
        """Create the temporary file (O_EXCL, in the target's directory)."""
        for _ in range(8):
            name = WRITE_TEMP_PREFIX + secrets.token_hex(8)
            path, kw = self.place.at(name)
            try:
                self.fd = SYS.open(path, _CREATE, 0o666, **kw)
            except FileExistsError:
                continue
            self.temp = name
            return
        raise OSError(errno.EEXIST, "no free temporary name")

    def _room(self, n: int) -> None:
        """Refuse (``NO_SPACE``) ``n`` more bytes that would leave less than
        ``min_free`` free; one ``statvfs`` per :data:`_FREE_EVERY` bytes
        (or sooner when the last look left less room than that)."""
        if not self.min_free or self.written + n <= self._room_until:
            return
        free = SYS.free(self.place)
        if free < self.min_free + n:
            raise WriteRefused(Refusal.NO_SPACE)
        self._room_until = self.written + max(n, min(free - self.min_free, _FREE_EVERY))

    def write(self, data: bytes) -> None:
        """Append ``data`` (all of it: a short write is continued); refused
        with ``NO_SPACE`` first when it would eat into ``min_free``."""
        self._room(len(data))
        view = memoryview(data)
        while view:
            n = SYS.write(self.fd, view)  # type: ignore[arg-type]
            view = view[n:]
        self.written += len(data)
        if self.hasher is not None:
            if self.hash_max is not None and self.written > self.hash_max:
                self.hasher = None
            else:
                self.hasher.update(data)
        if self.check is not None:
            self.check(data)

    def write_all(self, chunks: Sequence[bytes]) -> None:
        """:meth:`write` each of ``chunks`` in order (one pool step for
        several received chunks)."""
        for data in chunks:
            self.write(data)

    def finish(
        self,
        chunks: Sequence[bytes],
        verify: Callable[[], bool] | None,
        no_replace: bool,
        checked: bool,
        expect: os.stat_result | None,
    ) -> os.stat_result | None:
        """The last step of a PUT, in one pool hop (a small file's only
        one): :meth:`write_all` of the last ``chunks``, the digest check
        (``verify`` false: None, nothing committed; the caller's release
        removes the temporary), then :meth:`commit` unless the job was
        released meanwhile (its caller cancelled while the write ran: an
        abandoned thread never commits; ``OSError(ECANCELED)`` and
        :meth:`run` discards)."""
        self.write_all(chunks)
        if verify is not None and not verify():
            return None
        with self._lock:
            if self._released:
                raise OSError(errno.ECANCELED, "write released")
        return self.commit(no_replace, checked, expect)

    def commit(
        self, no_replace: bool, checked: bool, expect: os.stat_result | None
    ) -> os.stat_result:
        """Make the temporary the target: fsync, rename, fsync the
        directory; the new file's ``fstat``.  ``no_replace``: refused with
        ``EXISTS`` if a file is there by then (``If-None-Match: *``).
        ``checked``: preconditions were decided on ``expect`` (the target
        as they saw it): refused with ``CHANGED`` if it is no longer that
        file (or no longer absent), so a condition never holds for a file
        it was not decided on."""
        place = self.place
        assert self.temp is not None
        if self.sync:
            SYS.fsync(self.fd)
        st = SYS.fstat(self.fd)
        now = _lstat(place, place.name)
        if no_replace and now is not None:
            raise WriteRefused(Refusal.EXISTS)
        if checked and not _same(now, expect):
            raise WriteRefused(Refusal.CHANGED)
        refusal = writable_current(now)
        if refusal is not None:
            raise WriteRefused(refusal)
        try:
            if no_replace:
                NO_REPLACE(place, self.temp, place.name)
            else:
                _rename_replace(place, self.temp, place.name)
        except FileExistsError:
            raise WriteRefused(Refusal.EXISTS) from None
        self.temp = None
        if self.sync:
            _fsync_dir(place)
        self.discard()  # closes the file and the directory; no temporary left
        self.done = True
        return st

    def discard(self) -> None:
        """Remove the temporary (if any) and close what is held;
        idempotent, and it never raises for a temporary already gone."""
        fd, self.fd = self.fd, -1
        temp, self.temp = self.temp, None
        try:
            if fd >= 0:
                SYS.close(fd)
        finally:
            try:
                if temp is not None:
                    path, kw = self.place.at(temp)
                    try:
                        SYS.unlink(path, **kw)
                    except FileNotFoundError:
                        pass
                    if self.removed is not None:
                        self.removed()
            finally:
                self.place.close()


def current_bytes(place: Placement, limit: int) -> bytes | None:
    """The current file's content when it is at most ``limit`` bytes (its
    ETag may be a content hash), read without following a symlink."""
    cur = place.current
    if cur is None or not stat.S_ISREG(cur.st_mode) or cur.st_size > limit:
        return None
    path, kw = place.at(place.name)
    fd = SYS.open(path, _READ, **kw)
    try:
        st = SYS.fstat(fd)
        if not _same(st, cur):
            return None
        parts: list[bytes] = []
        left = st.st_size
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                return None
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)
    finally:
        SYS.close(fd)


def delete_file(place: Placement, checked: bool, expect: os.stat_result | None) -> None:
    """Remove the regular file at ``place`` (which is closed after), if it
    is still ``expect`` (when preconditions were decided on it:
    ``checked``); then fsync the directory (POSIX).

    Cancellation handling: blocking; run through :meth:`WriteJob.run`, so
    an abandoned call still closes ``place`` (here, and in the job's
    discard); a removal that ran is not undone.
    """
    try:
        now = _lstat(place, place.name)
        if now is None:
            raise WriteRefused(Refusal.MISSING)
        refusal = writable_current(now)
        if refusal is not None:
            raise WriteRefused(refusal)
        if checked and not _same(now, expect):
            raise WriteRefused(Refusal.CHANGED)
        path, kw = place.at(place.name)
        SYS.unlink(path, **kw)
        _fsync_dir(place)
    finally:
        place.close()


def make_directory(
    opener: ContainedRoot, segments: tuple[str, ...], hidden: bool
) -> os.stat_result:
    """Create the directory ``segments`` (its parent must exist; no
    intermediate directory is made) under the root's containment, then
    fsync the parent (POSIX: the new entry is durable); the new
    directory's ``lstat``.  Blocking.

    The name is checked as a write target's is (:func:`open_target`: a
    safe NFC base name, no dot name unless ``hidden``, never an upload
    temporary, no Windows-reserved name).  Raises :class:`WriteRefused`:
    ``NAME``, ``NO_PARENT``, ``EXISTS`` (anything at the name: a file, a
    directory, a symlink; ``mkdir`` never follows or replaces it), and
    ``OSError`` for the rest (a full disk, a read-only filesystem).
    Facts and reasons only: the caller chooses the status.

    Cancellation handling: blocking, run in the ``write`` pool; it holds
    nothing when it returns or raises (the parent's descriptor is closed
    here), so an abandoned call leaks nothing; a directory it made is not
    undone (like :func:`delete_file`'s removal).
    """
    place = open_target(opener, segments, hidden)
    try:
        if place.current is not None:
            raise WriteRefused(Refusal.EXISTS)
        path, kw = place.at(place.name)
        try:
            SYS.mkdir(path, 0o777, **kw)
        except FileExistsError:
            raise WriteRefused(Refusal.EXISTS) from None  # it appeared meanwhile
        _fsync_dir(place)
        st = SYS.lstat(path, **kw)
    finally:
        place.close()
    return st


def make_parents(opener: ContainedRoot, directory: tuple[str, ...], hidden: bool) -> int:
    """Create the missing folders of ``directory`` (``--upload-mkdirs``),
    top down, each as :func:`make_directory` makes one (the same name
    checks and containment; one that exists is kept); how many were made.
    A file where a folder should be is left for the write to refuse
    (``NO_PARENT``).  Blocking.

    Cancellation handling: as :func:`make_directory`, per folder: nothing
    is held between them; folders already made stay.
    """
    made = 0
    for depth in range(1, len(directory) + 1):
        try:
            make_directory(opener, directory[:depth], hidden)
        except WriteRefused as exc:
            if exc.refusal is not Refusal.EXISTS:
                raise
            continue
        made += 1
    return made


# Start-up sweep bounds: directories visited, temporaries removed, seconds.
SWEEP_DIRS: Final = 10_000
SWEEP_REMOVALS: Final = 1_000
SWEEP_SECONDS: Final = 10.0


def sweep(root: str, older_than: float, *, now: float | None = None) -> int:
    """Remove upload temporaries under ``root`` whose mtime is more than
    ``older_than`` seconds old (a killed process left them; a live
    upload writes its temporary at least every ``--body-timeout``).
    Bounded: :data:`SWEEP_DIRS` directories, :data:`SWEEP_REMOVALS`
    removals, :data:`SWEEP_SECONDS`; symlinks are never followed.
    Returns how many were removed; blocking.

    Cancellation handling: holds nothing across entries (each directory
    is closed before the next); an abandoned sweep just runs to its
    bounds.
    """
    wall = time.time() if now is None else now
    cutoff = wall - older_than
    started = time.monotonic()
    pending = [root]
    visited = removed = 0
    while pending and visited < SWEEP_DIRS and removed < SWEEP_REMOVALS:
        if time.monotonic() - started > SWEEP_SECONDS:
            break
        path = pending.pop()
        visited += 1
        try:
            with os.scandir(path) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif (
                        entry.name.startswith(WRITE_TEMP_PREFIX)
                        and not entry.name.startswith(KEPT_TEMP_PREFIX)
                        and entry.is_file(follow_symlinks=False)
                    ):
                        try:
                            if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                                SYS.unlink(entry.path)
                                removed += 1
                        except OSError:
                            continue
        except OSError:
            continue
    return removed
