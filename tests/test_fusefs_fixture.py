"""Tests of the FUSE slow-storage fixture itself (plain threads, no server)."""

from __future__ import annotations

import mmap
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testkit.fusefs import SlowFS, SlowFSError, fuse_available, is_mounted, slowfs_in

JOIN_TIMEOUT = 10.0


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[SlowFS]:
    with slowfs_in(tmp_path) as slow:
        (slow.backing / "hello.txt").write_bytes(b"hello world\n")
        (slow.backing / "sub").mkdir()
        (slow.backing / "sub" / "big.bin").write_bytes(os.urandom(1 << 20))
        (slow.backing / "link").symlink_to("hello.txt")
        slow.reset_stats()
        yield slow


class Worker(threading.Thread):
    """Runs ``fn`` in a daemon thread and keeps its result or exception."""

    def __init__(self, fn: Callable[[], bytes]) -> None:
        super().__init__(daemon=True)
        self._fn = fn
        self.result: bytes | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self._fn()
        except BaseException as exc:
            self.error = exc

    def finish(self) -> bytes:
        self.join(JOIN_TIMEOUT)
        assert not self.is_alive(), "worker still stuck in the filesystem"
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def read_file(path: Path) -> Callable[[], bytes]:
    return path.read_bytes


def test_passthrough_data_and_metadata(fs: SlowFS) -> None:
    assert fs.path("hello.txt").read_bytes() == b"hello world\n"
    big = (fs.backing / "sub" / "big.bin").read_bytes()
    assert fs.path("sub/big.bin").read_bytes() == big

    fd = os.open(fs.path("sub/big.bin"), os.O_RDONLY)
    try:
        for offset in (0, 1, 4095, 4096, 123_457, len(big) - 10, len(big)):
            assert os.pread(fd, 4096, offset) == big[offset : offset + 4096]
    finally:
        os.close(fd)

    for rel in ("hello.txt", "sub", "sub/big.bin", ""):
        real, seen = os.lstat(fs.backing / rel), os.lstat(fs.path(rel))
        assert seen.st_mode == real.st_mode, rel
        assert seen.st_size == real.st_size or rel in ("sub", ""), rel
        assert seen.st_mtime_ns == real.st_mtime_ns, rel
        assert seen.st_ino == real.st_ino, rel  # use_ino passes inodes through
        assert seen.st_nlink == real.st_nlink, rel

    assert sorted(os.listdir(fs.path())) == sorted(os.listdir(fs.backing))
    with os.scandir(fs.path("sub")) as it:
        entries = {e.name: e.inode() for e in it}
    assert entries == {"big.bin": os.lstat(fs.backing / "sub" / "big.bin").st_ino}

    assert os.readlink(fs.path("link")) == "hello.txt"
    assert fs.path("link").read_bytes() == b"hello world\n"
    assert os.statvfs(fs.path()).f_bsize > 0

    with pytest.raises(FileNotFoundError):
        fs.path("missing").read_bytes()
    with pytest.raises(OSError, match="Read-only file system"):
        fs.path("hello.txt").write_bytes(b"x")

    stats = fs.stats()
    assert stats["open_calls"] >= 3
    assert stats["getattr_calls"] >= 1
    assert stats["read_calls"] >= 1
    assert stats["readdir_calls"] >= 1
    assert stats["calls"] == stats["open_calls"] + stats["getattr_calls"]
    assert stats["in_flight"] == 0
    # the kernel closes files asynchronously
    fs.wait_until(lambda s: s["release_calls"] >= 3, what="release calls")


def test_sendfile_and_mmap_from_mount(fs: SlowFS) -> None:
    big = (fs.backing / "sub" / "big.bin").read_bytes()
    a, b = socket.socketpair()
    with a, b, open(fs.path("sub/big.bin"), "rb") as f:
        sent = os.sendfile(a.fileno(), f.fileno(), 1000, 5000)
        assert sent > 0
        got = b""
        while len(got) < sent:
            got += b.recv(65536)
        assert got == big[1000 : 1000 + sent]
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
            assert m[-100:] == big[-100:]


def test_backing_changes_are_visible_immediately(fs: SlowFS) -> None:
    target = fs.backing / "hello.txt"
    assert fs.path("hello.txt").stat().st_size == 12
    target.write_bytes(b"longer content now\n")
    os.utime(target, ns=(1_000_000_000, 2_000_000_123))
    seen = fs.path("hello.txt").stat()
    assert seen.st_size == 19
    assert seen.st_mtime_ns == 2_000_000_123
    assert fs.path("hello.txt").read_bytes() == b"longer content now\n"
    (fs.backing / "new.txt").write_bytes(b"new")
    assert fs.path("new.txt").read_bytes() == b"new"


def test_delay_applies_to_open_and_stat(fs: SlowFS) -> None:
    fs.set_delay(0.1)
    start = time.monotonic()
    fs.path("hello.txt").stat()
    assert time.monotonic() - start >= 0.1

    fs.reset_stats()
    start = time.monotonic()
    fd = os.open(fs.path("hello.txt"), os.O_RDONLY)
    elapsed = time.monotonic() - start
    os.close(fd)
    stats = fs.stats()
    assert stats["open_calls"] == 1
    # the LOOKUP (getattr) and the OPEN are both delayed
    assert stats["calls"] >= 2
    assert elapsed >= 0.1 * stats["calls"]

    fs.set_delay(0.1, ops=["read"])  # getattr/open no longer delayed
    start = time.monotonic()
    assert fs.path("hello.txt").read_bytes() == b"hello world\n"
    assert time.monotonic() - start >= 0.1

    fs.set_delay(0.0, ops=["read"])
    with pytest.raises(ValueError, match="delay must be"):
        fs.set_delay(-1.0)
    with pytest.raises(ValueError, match="ops must be"):
        fs.set_delay(0.1, ops=["write"])


def test_block_hangs_open_until_release(fs: SlowFS) -> None:
    fs.block()
    worker = Worker(read_file(fs.path("hello.txt")))
    worker.start()
    fs.wait_blocked(1)
    # still stuck, and other operations proceed meanwhile (multithreaded loop)
    assert worker.is_alive()
    assert fs.path("sub").stat().st_size >= 0
    assert sorted(os.listdir(fs.path())) == sorted(os.listdir(fs.backing))
    stats = fs.stats()
    assert stats["blocked"] == 1
    assert stats["open_in_flight"] == 1
    assert worker.is_alive()

    fs.release()
    assert worker.finish() == b"hello world\n"
    stats = fs.stats()
    assert stats["blocked"] == 0
    assert stats["in_flight"] == 0
    assert stats["block_timeouts"] == 0
    # released means released: later opens do not block
    assert fs.path("hello.txt").read_bytes() == b"hello world\n"


def test_block_getattr_hangs_stat(fs: SlowFS) -> None:
    fs.block(ops=["getattr"])
    worker = Worker(lambda: str(fs.path("sub/big.bin").stat().st_size).encode())
    worker.start()
    fs.wait_blocked(1)
    assert fs.stats()["getattr_in_flight"] == 1
    fs.release()
    assert worker.finish() == str(1 << 20).encode()


def test_wait_blocked_times_out(fs: SlowFS) -> None:
    fs.block()
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="1 blocked"):
        fs.wait_blocked(1, timeout=0.2)
    assert time.monotonic() - start < 5.0


def test_peak_in_flight_counts_concurrency(fs: SlowFS) -> None:
    # sequential calls never overlap
    for _ in range(4):
        fs.path("hello.txt").read_bytes()
    assert fs.stats()["peak_in_flight"] == 1

    fs.reset_stats()
    fs.block()
    workers = [Worker(read_file(fs.path("hello.txt"))) for _ in range(4)]
    for w in workers:
        w.start()
    fs.wait_blocked(4)
    stats = fs.stats()
    assert stats["in_flight"] == 4
    assert stats["peak_in_flight"] == 4
    assert stats["open_peak"] == 4
    fs.release()
    for w in workers:
        assert w.finish() == b"hello world\n"
    stats = fs.stats()
    assert stats["peak_in_flight"] == 4
    assert stats["in_flight"] == 0
    assert stats["open_calls"] == 4

    fs.reset_stats()
    stats = fs.stats()
    assert stats["calls"] == 0
    assert stats["peak_in_flight"] == 0


def test_more_blocked_calls_than_libfuse_default_threads(fs: SlowFS) -> None:
    # libfuse 3.12+ caps its worker pool at 10 unless max_threads is raised
    fs.block()
    workers = [Worker(read_file(fs.path("hello.txt"))) for _ in range(16)]
    for w in workers:
        w.start()
    fs.wait_blocked(16)
    assert fs.stats()["peak_in_flight"] == 16
    fs.release()
    for w in workers:
        assert w.finish() == b"hello world\n"


def test_delayed_threads_overlap(fs: SlowFS) -> None:
    fs.set_delay(0.2, ops=["open"])
    barrier = threading.Barrier(4)

    def opener() -> bytes:
        barrier.wait(JOIN_TIMEOUT)
        return fs.path("hello.txt").read_bytes()

    workers = [Worker(opener) for _ in range(4)]
    start = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        assert w.finish() == b"hello world\n"
    elapsed = time.monotonic() - start
    stats = fs.stats()
    assert stats["open_calls"] == 4
    assert 2 <= stats["open_peak"] <= 4
    assert 2 <= stats["peak_in_flight"] <= 4
    assert elapsed < 4 * 0.2 + 2.0  # not serialized behind one thread


def test_unmounted_and_stopped_after_exit(tmp_path: Path) -> None:
    with slowfs_in(tmp_path) as slow:
        (slow.backing / "a").write_bytes(b"a")
        assert slow.mounted
        pid = slow.pid
        assert pid is not None
        # a blocked call must not prevent teardown
        slow.block()
        worker = Worker(read_file(slow.path("a")))
        worker.start()
        slow.wait_blocked(1)
    assert not is_mounted(tmp_path / "mnt")
    assert not os.path.ismount(tmp_path / "mnt")
    assert worker.finish() == b"a"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(SlowFSError):
        slow.stats()
    slow.close()  # idempotent
    assert slow.pid is None


def test_teardown_after_server_process_killed(tmp_path: Path) -> None:
    with slowfs_in(tmp_path) as slow:
        pid = slow.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(SlowFSError):
            slow.wait_until(lambda s: False, timeout=5.0)
    assert not is_mounted(tmp_path / "mnt")


def test_fuse_available_is_none_here() -> None:
    # the fixture tests above skip rather than fail without FUSE
    reason = fuse_available()
    if reason is not None:
        pytest.skip(reason)
    assert reason is None


def test_kernel_cache_keeps_open_uncached(tmp_path: Path) -> None:
    # The benchmark's mount: lookups and stats are answered by the kernel,
    # but every open still reaches the FUSE process (and its delay).
    with slowfs_in(tmp_path, kernel_cache=True) as slow:
        (slow.backing / "hello.txt").write_bytes(b"hello world\n")
        path = slow.path("hello.txt")
        assert path.read_bytes() == b"hello world\n"
        slow.reset_stats()
        for _ in range(20):
            os.stat(path)
            assert path.read_bytes() == b"hello world\n"
        stats = slow.stats()
        assert stats["open_calls"] == 20
        assert stats["getattr_calls"] <= 2
        assert stats["read_calls"] <= 2


def test_delay_counts_from_the_request_not_after_the_work(tmp_path: Path) -> None:
    # A device's latency runs from the submission: the filesystem's own work
    # for a call (here a case-insensitive lookup that lists a large
    # directory) overlaps the delay instead of being added to it.
    with slowfs_in(tmp_path) as plain:
        backing = plain.backing
    for i in range(40_000):
        os.close(os.open(backing / f"f{i:05d}", os.O_CREAT | os.O_WRONLY, 0o644))
    with SlowFS(backing, tmp_path / "mnt", case_insensitive=True) as slow:
        path = slow.path("F00007")  # no exact match: every getattr lists the directory
        work = []
        for _ in range(3):
            start = time.monotonic()
            os.stat(path)
            work.append(time.monotonic() - start)
        undelayed = min(work)
        delay = max(0.1, 2 * undelayed)
        slow.set_delay(delay, ops=["getattr"])
        slow.reset_stats()
        start = time.monotonic()
        os.stat(path)
        elapsed = time.monotonic() - start
        stats = slow.stats()
    calls = stats["getattr_calls"]
    assert calls >= 1
    assert elapsed >= calls * delay  # never shorter than the delay
    # delay + work would be at least calls * delay + undelayed
    assert elapsed < calls * delay + undelayed / 2
    assert stats["delayed_calls"] == calls


def test_delayed_opens_never_complete_early_and_lateness_is_counted(tmp_path: Path) -> None:
    with slowfs_in(tmp_path, kernel_cache=True) as slow:
        (slow.backing / "f").write_bytes(b"x")
        path = slow.path("f")
        path.read_bytes()  # entry and attributes now cached
        slow.set_delay(0.01, ops=["open"])
        slow.reset_stats()
        for _ in range(20):
            start = time.monotonic()
            fd = os.open(path, os.O_RDONLY)
            assert time.monotonic() - start >= 0.01
            os.close(fd)
        stats = slow.stats()
    assert stats["open_calls"] == 20
    assert stats["delayed_calls"] == 20
    assert 0 <= stats["late_us_max"] <= stats["late_us_total"]


def test_fuse_threads_sleep_with_minimal_timer_slack(fs: SlowFS) -> None:
    # Linux's default 50 us timer slack would make every delayed call that
    # much later than its deadline; the FUSE process runs with 1 ns.
    fs.set_delay(0.01, ops=["open"])
    fs.path("hello.txt").read_bytes()  # libfuse's worker threads exist now
    assert fs.pid is not None
    tids = os.listdir(f"/proc/{fs.pid}/task")
    assert len(tids) >= 2
    slack = {tid: Path(f"/proc/{tid}/timerslack_ns").read_text().strip() for tid in tids}
    assert set(slack.values()) == {"1"}, slack
