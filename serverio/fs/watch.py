"""Change sources for ``--watch``: inotify (Linux) and a polling scan.

No trio here; :mod:`serverio.live.service` drives these:

* :class:`InotifyTree`: one non-blocking inotify descriptor, awaited with
  ``trio.lowlevel.wait_readable`` (no thread); :meth:`InotifyTree.read`
  is a non-blocking ``read``.  Adding watches walks directories, which is
  filesystem work: :meth:`InotifyTree.scan` runs in the watch pool and
  :meth:`InotifyTree.adopt` records its result on the trio thread.
* :func:`poll_scan` / :func:`poll_diff`: the portable fallback (and
  ``--watch-poll``): a bounded scan in the watch pool, compared with the
  previous one.

The same rules as serving: names starting with a dot (hidden files,
``.git/``) are neither watched nor reported unless ``--hidden``; symbolic
links are never followed into directories, so a change outside the root
reloads nothing.  libc is loaded when an :class:`InotifyTree` is created,
never at import.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
import sys
import threading
from collections.abc import Iterator

from ..concurrency.broadcast import CREATED, GONE, MODIFIED

__all__ = [
    "InotifyTree",
    "inotify_available",
    "parse_events",
    "poll_diff",
    "poll_scan",
]

IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000
# inotify_init1 flags are O_NONBLOCK and O_CLOEXEC (looked up, not named:
# they do not exist everywhere; the fallbacks are x86/arm Linux's values).
IN_NONBLOCK: int = getattr(os, "O_NONBLOCK", 0o4000)
IN_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0o2000000)

WATCH_MASK = (
    IN_MODIFY
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
)
_EVENT = struct.Struct("iIII")
READ_SIZE = 65536
# Directories watched at most (each costs one inotify watch of the user's
# fs.inotify.max_user_watches); beyond, changes there are missed (logged).
MAX_WATCHED_DIRS = 8192
# Entries one polling scan visits at most.
POLL_MAX_ENTRIES = 20000

Change = tuple[str, str]  # (relative path, CREATED | MODIFIED | GONE)


def inotify_available() -> bool:
    return sys.platform.startswith("linux")


def parse_events(buf: bytes) -> Iterator[tuple[int, int, str]]:
    """``(wd, mask, name)`` for each ``struct inotify_event`` in ``buf``."""
    offset = 0
    while offset + _EVENT.size <= len(buf):
        wd, mask, _cookie, length = _EVENT.unpack_from(buf, offset)
        start = offset + _EVENT.size
        raw = buf[start : start + length].split(b"\0", 1)[0]
        offset = start + length
        yield wd, mask, os.fsdecode(raw)


def _visible(name: str, hidden: bool) -> bool:
    return hidden or not name.startswith(".")


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


class InotifyTree:
    """Watches on every visible directory under ``root`` (see the module docstring)."""

    def __init__(self, root: str, *, hidden: bool) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._init1 = libc.inotify_init1
        self._add = libc.inotify_add_watch
        self._add.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        self._rm = libc.inotify_rm_watch
        self._rm.argtypes = (ctypes.c_int, ctypes.c_int)
        fd = self._init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.fd: int = fd
        self.root = root
        self.hidden = hidden
        self.dirs: dict[int, str] = {}  # watch descriptor -> directory ("" = root)
        self.full = False  # MAX_WATCHED_DIRS reached
        # A scan abandoned at shutdown may still be adding watches: then the
        # descriptor is closed by that thread when it ends, never under it.
        self._lock = threading.Lock()
        self._scanning = False
        self._closing = False

    def close(self) -> None:
        """Close the descriptor now, or when a running scan ends (idempotent)."""
        with self._lock:
            if self._scanning:
                self._closing = True
                return
            fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def scan(self, rel: str) -> tuple[list[tuple[int, str]], list[str]]:
        """Add watches for ``rel`` and every visible directory below it
        (blocking: run it in the watch pool).  Returns the new
        ``(wd, directory)`` pairs for :meth:`adopt` and the files found
        (created in a new directory before its watch existed)."""
        with self._lock:
            if self.fd < 0 or self._closing:
                return [], []
            self._scanning = True
        try:
            return self._scan(rel)
        finally:
            if self._end_scan():
                self.close()

    def _end_scan(self) -> bool:
        """Mark the scan done; True when close() was deferred to us."""
        with self._lock:
            self._scanning = False
            closing, self._closing = self._closing, False
        return closing

    def _scan(self, rel: str) -> tuple[list[tuple[int, str]], list[str]]:
        added: list[tuple[int, str]] = []
        files: list[str] = []
        todo = [rel]
        budget = MAX_WATCHED_DIRS - len(self.dirs)
        while todo and budget > 0:
            d = todo.pop()
            wd = self._add(self.fd, os.fsencode(os.path.join(self.root, d)), WATCH_MASK)
            if wd < 0:
                continue  # vanished, not a directory (a symlink), no permission
            added.append((wd, d))
            budget -= 1
            try:
                with os.scandir(os.path.join(self.root, d)) as it:
                    for de in it:
                        if not _visible(de.name, self.hidden):
                            continue
                        try:
                            is_dir = de.is_dir(follow_symlinks=False)
                        except OSError:
                            continue
                        (todo if is_dir else files).append(_join(d, de.name))
            except OSError:
                continue
        if todo:
            self.full = True
        return added, files

    def adopt(self, added: list[tuple[int, str]]) -> None:
        """Record watches added by :meth:`scan` (on the trio thread)."""
        for wd, d in added:
            self.dirs[wd] = d

    def _forget(self, prefix: str) -> None:
        for wd, d in list(self.dirs.items()):
            if d == prefix or d.startswith(prefix + "/"):
                del self.dirs[wd]
                self._rm(self.fd, wd)

    def read(self) -> tuple[list[Change], list[str], bool]:
        """Drain the descriptor without blocking: the changes, the new
        directories to :meth:`scan`, and whether the kernel queue
        overflowed (then anything may have changed)."""
        changes: list[Change] = []
        new_dirs: list[str] = []
        overflow = False
        while True:
            try:
                buf = os.read(self.fd, READ_SIZE)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            if not buf:
                break
            for wd, mask, name in parse_events(buf):
                if mask & IN_Q_OVERFLOW:
                    overflow = True
                    continue
                parent = self.dirs.get(wd)
                if parent is None:
                    continue
                if mask & IN_IGNORED:
                    del self.dirs[wd]
                    continue
                if not name:
                    continue  # DELETE_SELF / MOVE_SELF: the parent reports the name
                if not _visible(name, self.hidden):
                    continue
                path = _join(parent, name)
                is_dir = bool(mask & IN_ISDIR)
                if mask & (IN_CREATE | IN_MOVED_TO):
                    changes.append((path, CREATED))
                    if is_dir:
                        new_dirs.append(path)
                elif mask & (IN_DELETE | IN_MOVED_FROM):
                    changes.append((path, GONE))
                    if is_dir:
                        self._forget(path)
                elif not is_dir:
                    changes.append((path, MODIFIED))
        return changes, new_dirs, overflow


# path -> (ino, size, mtime_ns, ctime_ns); a directory has only its inode
# (its times change with its entries, which are reported themselves).
Snapshot = dict[str, tuple[int, ...]]


def poll_scan(root: str, hidden: bool, limit: int = POLL_MAX_ENTRIES) -> tuple[Snapshot, bool]:
    """Every visible file and directory under ``root`` (blocking; at most
    ``limit`` entries; the boolean says whether the scan was cut short)."""
    out: Snapshot = {}
    todo = [""]
    while todo:
        d = todo.pop()
        try:
            it = os.scandir(os.path.join(root, d))
        except OSError:
            continue
        with it:
            for de in it:
                if not _visible(de.name, hidden):
                    continue
                if len(out) >= limit:
                    return out, True
                try:
                    st = de.stat(follow_symlinks=False)
                except OSError:
                    continue
                path = _join(d, de.name)
                if stat.S_ISDIR(st.st_mode):
                    out[path] = (st.st_ino,)
                    todo.append(path)
                else:
                    out[path] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return out, False


def poll_diff(old: Snapshot, new: Snapshot) -> list[Change]:
    """What changed between two scans."""
    changes: list[Change] = [(p, GONE) for p in old.keys() - new.keys()]
    for path, facts in new.items():
        before = old.get(path)
        if before is None:
            changes.append((path, CREATED))
        elif before != facts:
            changes.append((path, MODIFIED))
    return changes
