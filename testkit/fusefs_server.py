"""FUSE slow-storage filesystem process (entry point for :mod:`fusefs`).

Read-only passthrough of a backing directory, mounted with mfusepy on
libfuse's multithreaded loop, with injectable per-operation delays, a
"block until released" gate and concurrency counters.

It always runs in its own process, started by ``fusefs.SlowFS`` as::

    python fusefs_server.py --backing DIR --mountpoint DIR --control-fd N

and controlled over the inherited ``AF_UNIX`` stream socket ``N`` with one
command per line, each answered by exactly one JSON line
(``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``):

``ping``
    liveness check.
``delay SECONDS [OP,OP...]``
    set the delay of exactly these operations (default ``getattr,open``);
    every other operation gets no delay.  A delayed call completes
    ``SECONDS`` after its callback was entered (or its gate released), never
    sooner; the passthrough work runs inside that time.
``block [OP,OP...]``
    close the gate for these operations (default ``open``): calls hang until
    ``release`` (or ``shutdown``, or the ``--block-timeout`` safety cap).
``release``
    open the gate; blocked calls proceed normally.
``stats``
    reply ``{"ok": true, "stats": {...}}`` with integer counters.
``reset``
    zero call counts; peaks restart from the current in-flight values.
``shutdown``
    release everything, drop all delays, refuse further blocking.

End of file on the control socket (the controller closed it or died) means
shutdown: the process releases everything and unmounts itself.

It must not run inside the process whose file accesses it serves: a FUSE
server sharing a GIL and an interpreter shutdown with its client can deadlock.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import importlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

#: Operations that can be delayed, blocked and counted.
KNOWN_OPS: tuple[str, ...] = (
    "getattr",
    "open",
    "read",
    "release",
    "opendir",
    "readdir",
    "releasedir",
    "readlink",
    "statfs",
)
#: Operations summed into ``calls``/``in_flight``/``peak_in_flight``/``blocked``.
#: ``getattr`` includes the kernel's LOOKUP of each path component.
TRACKED_OPS: frozenset[str] = frozenset({"getattr", "open"})
DEFAULT_DELAY_OPS: tuple[str, ...] = ("getattr", "open")
DEFAULT_BLOCK_OPS: tuple[str, ...] = ("open",)


def parse_ops(text: str | None, default: Iterable[str]) -> frozenset[str]:
    """Parse ``"open,getattr"`` (or ``"all"``) into a validated op set."""
    if text is None or text == "":
        return frozenset(default)
    if text == "all":
        return frozenset(KNOWN_OPS)
    ops = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = ops - frozenset(KNOWN_OPS)
    if unknown:
        raise ValueError(f"unknown operation(s): {', '.join(sorted(unknown))}")
    return ops


class Gate:
    """Delays, blocking and counters, shared by all FUSE worker threads."""

    def __init__(self, block_timeout: float) -> None:
        self._cond = threading.Condition()
        self._block_timeout = block_timeout
        self._delays: dict[str, float] = {}
        self._blocked_ops: frozenset[str] = frozenset()
        self._shutdown = False
        self._calls = dict.fromkeys(KNOWN_OPS, 0)
        self._in_flight = dict.fromkeys(KNOWN_OPS, 0)
        self._peak = dict.fromkeys(KNOWN_OPS, 0)
        self._tracked_calls = 0
        self._tracked_in_flight = 0
        self._tracked_peak = 0
        self._blocked = 0
        self._block_timeouts = 0
        self._errors = 0
        self._delayed = 0
        self._late_us_total = 0
        self._late_us_max = 0

    # -- control side -----------------------------------------------------

    def set_delay(self, seconds: float, ops: frozenset[str]) -> None:
        if not seconds >= 0.0:  # also rejects NaN
            raise ValueError("delay must be >= 0")
        with self._cond:
            if self._shutdown:
                return
            self._delays = {op: seconds for op in ops if seconds > 0.0}

    def block(self, ops: frozenset[str]) -> None:
        with self._cond:
            if self._shutdown:
                raise RuntimeError("filesystem is shutting down")
            self._blocked_ops = ops

    def release(self) -> None:
        with self._cond:
            self._blocked_ops = frozenset()
            self._cond.notify_all()

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._delays = {}
            self._blocked_ops = frozenset()
            self._cond.notify_all()

    def reset(self) -> None:
        with self._cond:
            self._calls = dict.fromkeys(KNOWN_OPS, 0)
            self._peak = dict(self._in_flight)
            self._tracked_calls = 0
            self._tracked_peak = self._tracked_in_flight
            self._block_timeouts = 0
            self._errors = 0
            self._delayed = 0
            self._late_us_total = 0
            self._late_us_max = 0

    def stats(self) -> dict[str, int]:
        with self._cond:
            out = {
                "calls": self._tracked_calls,
                "in_flight": self._tracked_in_flight,
                "peak_in_flight": self._tracked_peak,
                "blocked": self._blocked,
                "block_timeouts": self._block_timeouts,
                "errors": self._errors,
                "delayed_calls": self._delayed,
                "late_us_total": self._late_us_total,
                "late_us_max": self._late_us_max,
            }
            for op in KNOWN_OPS:
                out[f"{op}_calls"] = self._calls[op]
                out[f"{op}_in_flight"] = self._in_flight[op]
                out[f"{op}_peak"] = self._peak[op]
            return out

    # -- FUSE worker side -------------------------------------------------

    def enter(self, op: str, entered: float) -> float:
        """Count the call as in flight and wait while it is blocked.

        Returns the monotonic time at which the call may complete: the time
        it was let through (``entered``, or the release of the gate) plus
        its delay; 0.0 when it has no delay.  The caller does the real
        passthrough work first and then :meth:`leave` waits until that
        deadline, so the delay is measured from the moment the request
        reached this process, as a device's latency is measured from the
        submission, and this process's own work overlaps it instead of
        adding to it.
        """
        tracked = op in TRACKED_OPS
        with self._cond:
            self._calls[op] += 1
            self._in_flight[op] += 1
            self._peak[op] = max(self._peak[op], self._in_flight[op])
            if tracked:
                self._tracked_calls += 1
                self._tracked_in_flight += 1
                self._tracked_peak = max(self._tracked_peak, self._tracked_in_flight)
            if op in self._blocked_ops:
                deadline = time.monotonic() + self._block_timeout
                self._blocked += 1
                try:
                    while op in self._blocked_ops:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0.0:
                            self._block_timeouts += 1
                            break
                        self._cond.wait(remaining)
                finally:
                    self._blocked -= 1
                entered = time.monotonic()  # the delay starts at the release
            delay = self._delays.get(op, 0.0)
        return entered + delay if delay > 0.0 else 0.0

    def leave(self, op: str, failed: bool, due: float = 0.0) -> None:
        """Wait until ``due`` (from :meth:`enter`), then count the call as done.

        The wait never ends early: ``time.sleep`` sleeps at least the time
        asked for, and it is asked again until the clock has reached
        ``due``.  How late each delayed call completed is counted
        (``delayed_calls``, ``late_us_total``, ``late_us_max``).
        """
        late_us = -1
        if due > 0.0:
            now = time.monotonic()
            while now < due:
                time.sleep(due - now)
                now = time.monotonic()
            late_us = int((now - due) * 1e6)
        with self._cond:
            self._in_flight[op] -= 1
            if op in TRACKED_OPS:
                self._tracked_in_flight -= 1
            if failed:
                self._errors += 1
            if late_us >= 0:
                self._delayed += 1
                self._late_us_total += late_us
                self._late_us_max = max(self._late_us_max, late_us)


_EXPECTED_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ELOOP})


class PassthroughOps:
    """mfusepy operations: read-only passthrough of ``root`` with a gate.

    Deliberately not a subclass of ``mfusepy.Operations``: mfusepy only wires
    up the callbacks an object has, and this keeps the module importable (and
    type-checkable) without mfusepy.
    """

    #: integer nanosecond timestamps in getattr (exact mtimes, no warning).
    use_ns = True

    def __init__(self, root: str, gate: Gate, *, case_insensitive: bool = False) -> None:
        self._root = os.path.realpath(root)
        self._gate = gate
        self._fold = case_insensitive

    def _real(self, path: str) -> str:
        # libfuse hands over absolute, normalized paths ("/", "/a/b").
        if path == "/":
            return self._root
        if not self._fold:
            return self._root + path
        # Case-insensitive lookup, as macOS and Windows filesystems do by
        # default: a component that is not there exactly is looked up by
        # its case-folded name in its directory.
        real = self._root
        for name in path.strip("/").split("/"):
            exact = os.path.join(real, name)
            if not os.path.lexists(exact):
                folded = name.casefold()
                try:
                    match = next((n for n in os.listdir(real) if n.casefold() == folded), name)
                except OSError:
                    match = name
                exact = os.path.join(real, match)
            real = exact
        return real

    def _run(self, op: str, fn: Any, *args: Any) -> Any:
        # The first thing the callback does: the delay counts from here.
        entered = time.monotonic()
        due = self._gate.enter(op, entered)
        failed = True
        try:
            result = fn(*args)
            failed = False
            return result
        except OSError as exc:
            failed = exc.errno not in _EXPECTED_ERRNOS
            raise
        finally:
            self._gate.leave(op, failed, due)

    # getattr also serves the kernel's LOOKUP (high-level libfuse API).
    def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
        return dict(self._run("getattr", self._getattr, path, fh))

    def _getattr(self, path: str, fh: int | None) -> dict[str, int]:
        st = os.fstat(fh) if fh is not None else os.lstat(self._real(path))
        return {
            "st_mode": st.st_mode,
            "st_ino": st.st_ino,
            "st_dev": st.st_dev,
            "st_nlink": st.st_nlink,
            "st_uid": st.st_uid,
            "st_gid": st.st_gid,
            "st_size": st.st_size,
            "st_blocks": st.st_blocks,
            "st_blksize": st.st_blksize,
            "st_atime": st.st_atime_ns,
            "st_mtime": st.st_mtime_ns,
            "st_ctime": st.st_ctime_ns,
        }

    def open(self, path: str, flags: int) -> int:
        return int(self._run("open", self._open, path, flags))

    def _open(self, path: str, flags: int) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return os.open(self._real(path), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        return bytes(self._run("read", os.pread, fh, size, offset))

    def release(self, path: str | None, fh: int) -> int:
        self._run("release", os.close, fh)
        return 0

    def opendir(self, path: str) -> int:
        return int(self._run("opendir", self._opendir, path))

    def _opendir(self, path: str) -> int:
        return os.open(self._real(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def readdir(self, path: str | None, fh: int) -> list[tuple[str, dict[str, int], int]]:
        return list(self._run("readdir", self._readdir, fh))

    def _readdir(self, fh: int) -> list[tuple[str, dict[str, int], int]]:
        # d_ino must be non-zero or readdir(3) callers skip the entry.
        here = os.fstat(fh)
        entries: list[tuple[str, dict[str, int], int]] = [
            (".", {"st_ino": here.st_ino, "st_mode": here.st_mode}, 0),
            ("..", {"st_ino": here.st_ino, "st_mode": here.st_mode}, 0),
        ]
        with os.scandir(fh) as it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                entries.append((entry.name, {"st_ino": st.st_ino, "st_mode": st.st_mode}, 0))
        return entries

    def releasedir(self, path: str | None, fh: int) -> int:
        self._run("releasedir", os.close, fh)
        return 0

    def readlink(self, path: str) -> str:
        return str(self._run("readlink", os.readlink, self._real(path)))

    def statfs(self, path: str) -> dict[str, int]:
        return dict(self._run("statfs", self._statfs))

    def _statfs(self) -> dict[str, int]:
        sv = os.statvfs(self._root)
        return {
            "f_bsize": sv.f_bsize,
            "f_frsize": sv.f_frsize,
            "f_blocks": sv.f_blocks,
            "f_bfree": sv.f_bfree,
            "f_bavail": sv.f_bavail,
            "f_files": sv.f_files,
            "f_ffree": sv.f_ffree,
            "f_favail": sv.f_favail,
            "f_namemax": sv.f_namemax,
        }


#: prctl(2) option: the calling thread's timer slack in nanoseconds.
PR_SET_TIMERSLACK = 29


def tighten_timer_slack() -> bool:
    """Set this thread's timer slack to 1 ns (threads created later inherit it).

    Linux lets a sleeping thread's wake-up come up to its timer slack (50 µs
    by default) after the deadline, so that wake-ups can be coalesced.  That
    lateness belongs to the simulator, not to the storage it stands for, and
    it would land on top of every delay.  1 ns is the minimum (0 restores
    the default).  Sleeps still never end before their deadline.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(1), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _reply(sock: socket.socket, payload: dict[str, Any]) -> None:
    sock.sendall(json.dumps(payload, separators=(",", ":")).encode() + b"\n")


def handle_command(gate: Gate, line: str) -> dict[str, Any]:
    parts = line.split()
    if not parts:
        return {"ok": False, "error": "empty command"}
    cmd, args = parts[0], parts[1:]
    try:
        if cmd == "ping":
            return {"ok": True, "pid": os.getpid()}
        if cmd == "delay" and 1 <= len(args) <= 2:
            ops = parse_ops(args[1] if len(args) == 2 else None, DEFAULT_DELAY_OPS)
            gate.set_delay(float(args[0]), ops)
            return {"ok": True}
        if cmd == "block" and len(args) <= 1:
            gate.block(parse_ops(args[0] if args else None, DEFAULT_BLOCK_OPS))
            return {"ok": True}
        if cmd == "release" and not args:
            gate.release()
            return {"ok": True}
        if cmd == "stats" and not args:
            return {"ok": True, "stats": gate.stats()}
        if cmd == "reset" and not args:
            gate.reset()
            return {"ok": True}
        if cmd == "shutdown" and not args:
            gate.shutdown()
            return {"ok": True}
    except (ValueError, RuntimeError) as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": False, "error": f"bad command: {line!r}"}


def control_loop(sock: socket.socket, gate: Gate) -> None:
    """Serve control commands until EOF, then release and unmount."""
    buf = b""
    try:
        while True:
            try:
                chunk = sock.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                _reply(sock, handle_command(gate, raw.decode("utf-8", "replace").strip()))
    except OSError:
        pass
    finally:
        gate.shutdown()
        # libfuse's SIGTERM handler ends the session loop; fuse_main then
        # unmounts. Calls already running finish first (the gate is open).
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backing", required=True)
    parser.add_argument("--mountpoint", required=True)
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--max-threads", type=int, default=64)
    parser.add_argument(
        "--block-timeout",
        type=float,
        default=120.0,
        help="safety cap: a blocked call proceeds after this many seconds",
    )
    parser.add_argument(
        "--kernel-cache",
        action="store_true",
        help="let the kernel cache entries and attributes for 1 s, and file pages",
    )
    parser.add_argument(
        "--case-insensitive", action="store_true", help="find names regardless of case"
    )
    parser.add_argument("--debug", action="store_true")
    opts = parser.parse_args(argv)
    # The test suite counts every LOOKUP and GETATTR, so by default nothing is
    # cached.  The benchmark asks for kernel caching, as network and FUSE
    # filesystems do in production (NFS caches attributes for 3-60 s):
    # then only open/release (and the first reads) reach this process.
    cache_s = 1.0 if opts.kernel_cache else 0.0

    # Before any thread starts: libfuse's worker threads inherit it.
    tighten_timer_slack()
    # The controller must not hang on our exit because of a stuck stdio pipe.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sock = socket.socket(fileno=opts.control_fd)
    gate = Gate(opts.block_timeout)
    gate.set_delay(opts.delay, frozenset(DEFAULT_DELAY_OPS))

    try:
        # Loads libfuse through ctypes; fails here if it is missing.
        mfusepy: Any = importlib.import_module("mfusepy")
    except (ImportError, OSError) as exc:
        print(f"fusefs_server: cannot load mfusepy/libfuse: {exc}", file=sys.stderr)
        return 2

    # SIGTERM must be SIG_DFL so libfuse installs its exit handler
    # (mfusepy does the same for SIGINT).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=control_loop, args=(sock, gate), name="control", daemon=True).start()

    try:
        mfusepy.FUSE(
            PassthroughOps(opts.backing, gate, case_insensitive=opts.case_insensitive),
            opts.mountpoint,
            foreground=True,
            nothreads=False,  # libfuse's multithreaded loop
            debug=opts.debug,
            ro=True,
            # st_ino from getattr/readdir reaches stat(2) (FUSE 3 config field)
            use_ino=True,
            # Without --kernel-cache, no kernel caching of dentries or
            # attributes: every path walk is a LOOKUP and every stat a
            # GETATTR, so each one sees the delay.
            entry_timeout=cache_s,
            attr_timeout=cache_s,
            negative_timeout=0,
            kernel_cache=opts.kernel_cache,
            # the kernel (through a fusermount3 watchdog) unmounts if we die.
            auto_unmount=True,
            max_threads=opts.max_threads,
            fsname="slowfs",
            subtype="slowfs",
        )
    except Exception as exc:
        print(f"fusefs_server: FUSE failed: {exc!r}", file=sys.stderr)
        return 1
    finally:
        gate.shutdown()
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
