"""Real FUSE slow-storage fixture for tests and benchmarks.

:class:`SlowFS` mounts a read-only passthrough of a backing directory with
injectable per-operation delays, a "block until released" gate and counters
of the calls the filesystem sees (including the peak number of concurrent
``open``/``getattr`` calls). The FUSE server runs in a separate process
(``fusefs_server.py``) so the process under test can block on the mount
without sharing a GIL or an interpreter shutdown with it.

Typical use::

    with SlowFS(backing, mountpoint) as fs:
        fs.block()                 # open() calls now hang in the filesystem
        ...start N requests...
        fs.wait_blocked(N)         # deterministic: N opens are stuck
        fs.release()
        assert fs.stats()["peak_in_flight"] <= N

What the counters see: ``getattr`` serves both stat(2) and the kernel's
per-component LOOKUP (dentry and attribute caching are disabled, so each path
walk and each stat reaches the filesystem, usually as 1-2 ``getattr`` calls);
``calls``/``in_flight``/``peak_in_flight``/``blocked`` sum ``open`` and
``getattr``. ``<op>_calls``, ``<op>_in_flight`` and ``<op>_peak`` exist for
every op in :data:`KNOWN_OPS`. Kernel-internal requests (readahead ``read``,
asynchronous ``release`` after close) also show up, outside the sums.
``delayed_calls``, ``late_us_total`` and ``late_us_max`` say how late the
delayed calls completed after their deadline (microseconds).

How a delay is simulated: a delayed call completes at the moment it reached
the FUSE process's callback (or was released from the gate) plus the delay,
never sooner; the passthrough work overlaps the delay, as a device's latency
runs from the submission, instead of being added after it. The FUSE process
sleeps with 1 ns timer slack, so Linux does not defer its wake-ups by the
default 50 us. What remains on top of the delay is the FUSE round trip
(kernel queue, libfuse thread, the Python callback) and the scheduling
latency of the wake-up: ``late_us_*`` measures the second.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import functools
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import pytest

from . import simulation
from .fusefs_server import KNOWN_OPS  # one list, shared with the FUSE process

SERVER_SCRIPT = Path(__file__).with_name("fusefs_server.py")
DEFAULT_DELAY_OPS: tuple[str, ...] = ("getattr", "open")
DEFAULT_BLOCK_OPS: tuple[str, ...] = ("open",)
#: Set to a non-empty value to skip every FUSE-backed test.
DISABLE_ENV = "SERVERIO_NO_FUSE"

_CONTROL_TIMEOUT = 10.0
_POLL_INTERVAL = 0.005
# How long no call must start, after the shutdown released calls, before
# the unmount (SlowFS.close).
_QUIET = 0.2


class SlowFSError(RuntimeError):
    """The FUSE process failed, or answered a command with an error."""


def _ops_arg(ops: Iterable[str]) -> str:
    names = sorted(set(ops))
    unknown = [op for op in names if op not in KNOWN_OPS]
    if unknown or not names:
        raise ValueError(f"ops must be a non-empty subset of {KNOWN_OPS}, got {names}")
    return ",".join(names)


def _unescape_mountinfo(field: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo.
    out: list[str] = []
    i = 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def fuse_mounts() -> dict[str, str]:
    """Map mount point -> filesystem type for FUSE mounts of this namespace."""
    mounts: dict[str, str] = {}
    try:
        mountinfo = f"{simulation.measuring_proc() or '/proc'}/self/mountinfo"
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                fields = line.split()
                try:
                    sep = fields.index("-")
                except ValueError:
                    continue
                fstype = fields[sep + 1]
                if fstype == "fuse" or fstype.startswith("fuse."):
                    mounts[_unescape_mountinfo(fields[4])] = fstype
    except OSError:
        pass
    return mounts


def is_mounted(mountpoint: Path) -> bool:
    """Whether a FUSE filesystem is mounted at ``mountpoint``.

    Reads /proc/self/mountinfo and never touches the mount itself, so it
    cannot hang on a blocked or dead filesystem.
    """
    return os.path.realpath(mountpoint) in fuse_mounts()


def _run_fusermount(*args: str) -> bool:
    exe = shutil.which("fusermount3") or shutil.which("fusermount")
    if exe is None:
        return False
    try:
        done = subprocess.run(
            [exe, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=_CONTROL_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def force_unmount(mountpoint: Path) -> None:
    """Unmount ``mountpoint`` if a FUSE fs is mounted there: normal, then lazy."""
    path = os.path.realpath(mountpoint)
    if path not in fuse_mounts():
        return
    if _run_fusermount("-u", "-q", path) and path not in fuse_mounts():
        return
    _run_fusermount("-u", "-z", "-q", path)
    if path in fuse_mounts() and shutil.which("umount"):
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(
                ["umount", "-l", path],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=_CONTROL_TIMEOUT,
                check=False,
            )


def _idle(stats: dict[str, int]) -> bool:
    return stats["blocked"] == 0 and all(stats[f"{op}_in_flight"] == 0 for op in KNOWN_OPS)


class SlowFS:
    """A mounted slow passthrough filesystem, controlled from this process.

    Use as a context manager (or call :meth:`start`/:meth:`close`). All
    waits are bounded; :meth:`close` releases blocked calls, unmounts
    (``fusermount3 -u``, then lazily) and stops the FUSE process.
    """

    def __init__(
        self,
        backing: Path,
        mountpoint: Path,
        delay: float = 0.0,
        *,
        max_threads: int = 64,
        block_timeout: float = 120.0,
        startup_timeout: float = 10.0,
        debug: bool = False,
        kernel_cache: bool = False,
        case_insensitive: bool = False,
    ) -> None:
        self.backing = Path(backing)
        self.mountpoint = Path(mountpoint)
        self._initial_delay = delay
        self._max_threads = max_threads
        self._block_timeout = block_timeout
        self._startup_timeout = startup_timeout
        self._debug = debug
        self._kernel_cache = kernel_cache
        self._case_insensitive = case_insensitive
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._stderr: IO[bytes] | None = None
        self._rbuf = b""
        self._lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def mounted(self) -> bool:
        return is_mounted(self.mountpoint)

    def path(self, relative: str | os.PathLike[str] = "") -> Path:
        """``mountpoint / relative``."""
        return self.mountpoint / relative

    def start(self) -> None:
        if self._proc is not None:
            raise SlowFSError("already started")
        if not self.backing.is_dir():
            raise SlowFSError(f"backing directory {self.backing} does not exist")
        if self.mounted:
            raise SlowFSError(f"{self.mountpoint} is already a FUSE mount point")
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self._rbuf = b""
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock = parent_sock
        self._stderr = tempfile.TemporaryFile()
        cmd = [
            sys.executable,
            str(SERVER_SCRIPT),
            "--backing",
            str(self.backing),
            "--mountpoint",
            str(self.mountpoint),
            "--control-fd",
            str(child_sock.fileno()),
            "--delay",
            repr(float(self._initial_delay)),
            "--max-threads",
            str(self._max_threads),
            "--block-timeout",
            repr(float(self._block_timeout)),
        ]
        if self._debug:
            cmd.append("--debug")
        if self._kernel_cache:
            cmd.append("--kernel-cache")
        if self._case_insensitive:
            cmd.append("--case-insensitive")
        try:
            try:
                self._proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=self._stderr,
                    stderr=self._stderr,
                    pass_fds=(child_sock.fileno(),),
                    close_fds=True,
                )
            finally:
                child_sock.close()
            parent_sock.settimeout(_CONTROL_TIMEOUT)
            self._wait_mounted()
            self._command("ping")
        except BaseException:
            self.close()
            raise

    def _wait_mounted(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self._startup_timeout
        while not self.mounted:
            if self._proc.poll() is not None:
                raise SlowFSError(
                    f"FUSE process exited with {self._proc.returncode} before mounting: "
                    f"{self._server_output()}"
                )
            if time.monotonic() > deadline:
                raise SlowFSError(
                    f"FUSE mount did not appear within {self._startup_timeout}s: "
                    f"{self._server_output()}"
                )
            time.sleep(_POLL_INTERVAL)

    def _server_output(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0)
            return self._stderr.read()[-4000:].decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        """Release blocked calls, unmount and stop the process (idempotent)."""
        proc, sock = self._proc, self._sock
        try:
            if sock is not None and proc is not None and proc.poll() is None:
                # Never unmount with calls parked in the gate.
                with contextlib.suppress(SlowFSError, TimeoutError, ValueError):
                    busy = not _idle(self.stats())
                    self._command("shutdown")
                    # Let released calls finish before the unmount (bounded),
                    # and the calls they lead to: a read released at its
                    # open makes its READ a moment later, which an unmount
                    # in between would fail with ENOTCONN.
                    if busy:
                        self._wait_quiet(_QUIET, timeout=2.0)
                    else:
                        self.wait_until(_idle, timeout=2.0, what="idle filesystem")
            force_unmount(self.mountpoint)
        finally:
            self._sock = None
            self._proc = None
            if sock is not None:
                sock.close()  # EOF: the server shuts down and unmounts itself
            if proc is not None:
                self._stop_process(proc)
            # a killed server's mount is normally removed by its auto_unmount
            # watchdog; make sure of it either way.
            force_unmount(self.mountpoint)
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None

    @staticmethod
    def _stop_process(proc: subprocess.Popen[bytes]) -> None:
        try:
            proc.wait(timeout=_CONTROL_TIMEOUT)
            return
        except subprocess.TimeoutExpired:
            pass
        proc.terminate()
        try:
            proc.wait(timeout=5.0)
            return
        except subprocess.TimeoutExpired:
            pass
        proc.kill()
        proc.wait(timeout=5.0)

    # -- control ------------------------------------------------------------

    def _command(self, line: str) -> dict[str, Any]:
        with self._lock:
            sock = self._sock
            if sock is None:
                raise SlowFSError("filesystem is not running")
            try:
                sock.sendall(line.encode() + b"\n")
                while b"\n" not in self._rbuf:
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise SlowFSError(f"FUSE process went away: {self._server_output()}")
                    self._rbuf += chunk
            except TimeoutError as exc:
                raise SlowFSError(f"no reply to {line!r} within {_CONTROL_TIMEOUT}s") from exc
            except OSError as exc:
                raise SlowFSError(f"FUSE process went away: {exc}") from exc
            raw, self._rbuf = self._rbuf.split(b"\n", 1)
        reply: dict[str, Any] = json.loads(raw)
        if not reply.get("ok"):
            raise SlowFSError(f"{line!r} failed: {reply.get('error')}")
        return reply

    def set_delay(self, seconds: float, ops: Iterable[str] = DEFAULT_DELAY_OPS) -> None:
        """Delay every call of exactly ``ops`` by ``seconds`` (others: none).

        Counted from the moment the call reaches the FUSE process; it
        never completes sooner (see the module docstring).
        """
        if not seconds >= 0.0:
            raise ValueError("delay must be >= 0")
        self._command(f"delay {float(seconds)!r} {_ops_arg(ops)}")

    def block(self, ops: Iterable[str] = DEFAULT_BLOCK_OPS) -> None:
        """Make calls of ``ops`` hang inside the filesystem until :meth:`release`."""
        self._command(f"block {_ops_arg(ops)}")

    def release(self) -> None:
        """Let blocked (and future) calls proceed normally."""
        self._command("release")

    def stats(self) -> dict[str, int]:
        stats: dict[str, int] = self._command("stats")["stats"]
        return stats

    def reset_stats(self) -> None:
        """Zero call counts; peaks restart from the current in-flight values."""
        self._command("reset")

    def wait_until(
        self,
        predicate: Callable[[dict[str, int]], bool],
        timeout: float = 10.0,
        what: str = "condition",
    ) -> dict[str, int]:
        """Poll :meth:`stats` until ``predicate`` holds; return those stats."""
        deadline = time.monotonic() + timeout
        while True:
            stats = self.stats()
            if predicate(stats):
                return stats
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}; stats={stats}")
            time.sleep(_POLL_INTERVAL)

    def _wait_quiet(self, quiet: float, timeout: float) -> None:
        """Poll :meth:`stats` until the filesystem is idle and no call has
        started for ``quiet`` seconds; TimeoutError after ``timeout``."""
        deadline = time.monotonic() + timeout
        last: tuple[int, ...] | None = None
        since = time.monotonic()
        while True:
            stats = self.stats()
            calls = tuple(stats[f"{op}_calls"] for op in KNOWN_OPS)
            now = time.monotonic()
            if not _idle(stats) or calls != last:
                last, since = calls, now
            elif now - since >= quiet:
                return
            if now >= deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for a quiet filesystem")
            time.sleep(_POLL_INTERVAL)

    def wait_blocked(self, n: int, timeout: float = 10.0) -> None:
        """Wait until at least ``n`` calls are blocked; TimeoutError otherwise."""
        self.wait_until(lambda s: s["blocked"] >= n, timeout, f"{n} blocked call(s)")


@functools.cache
def fuse_available() -> str | None:
    """None if a SlowFS can be mounted here, else why not (a skip reason)."""
    if os.environ.get(DISABLE_ENV):
        return f"FUSE tests disabled by {DISABLE_ENV}"
    if not sys.platform.startswith("linux") or simulation.WINDOWS_SHAPED:
        return f"FUSE fixture needs Linux (platform is {simulation.ACTIVE or sys.platform})"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist"
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR | getattr(os, "O_CLOEXEC", 0)))
    except OSError as exc:
        return f"cannot open /dev/fuse: {exc}"
    if shutil.which("fusermount3") is None:
        return "fusermount3 not found (Debian package fuse3)"
    if importlib.util.find_spec("mfusepy") is None:
        return "mfusepy is not installed"
    if not (ctypes.util.find_library("fuse3") or ctypes.util.find_library("fuse")):
        return "libfuse is not installed"
    with tempfile.TemporaryDirectory(prefix="serverio-fuse-probe-") as tmp:
        backing, mnt = Path(tmp, "backing"), Path(tmp, "mnt")
        backing.mkdir()
        (backing / "probe").write_bytes(b"ok")
        try:
            with SlowFS(backing, mnt, startup_timeout=10.0) as fs:
                if fs.path("probe").read_bytes() != b"ok":
                    return "FUSE probe mount returned wrong data"
        except (OSError, SlowFSError, TimeoutError) as exc:
            return f"FUSE mount failed: {exc}"
    return None


@contextlib.contextmanager
def slowfs_in(
    tmp_path: Path, delay: float = 0.0, *, kernel_cache: bool = False
) -> Iterator[SlowFS]:
    """SlowFS over ``tmp_path/backing`` at ``tmp_path/mnt``; skips without FUSE."""
    reason = fuse_available()
    if reason is not None:
        pytest.skip(reason)
    backing = tmp_path / "backing"
    backing.mkdir(exist_ok=True)
    with SlowFS(backing, tmp_path / "mnt", delay, kernel_cache=kernel_cache) as fs:
        yield fs


@pytest.fixture
def slowfs(tmp_path: Path) -> Iterator[SlowFS]:
    """A mounted :class:`SlowFS` (backing dir ``slowfs.backing``, initially empty).

    Write files into ``slowfs.backing``; read them at ``slowfs.path(name)``.
    Import into a conftest.py to use: ``from fusefs import slowfs``.
    """
    with slowfs_in(tmp_path) as fs:
        yield fs
