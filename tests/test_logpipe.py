"""Log lines never block the event loop (issue 41 item 11).

A log reader that stops reading (stderr on a pipe nobody drains: a container
runtime, a paused ``| less``) used to stop the whole server at the first full
pipe, since each access-log line was a blocking write on the event loop.
Now the loop only appends to a bounded buffer of a
:class:`~serverio.observe.logpipe.LogPipe`, whose writer task writes in a
thread of its own one-thread pool; when the buffer is full, lines are
dropped and counted (``/metrics``, the exit summary line).

Unit tests use fake targets (a recording one, one whose writes block until
released, one that fails) and trio's MockClock; tests/test_logpipe_process.py
puts a real server's stderr on a pipe that is never read.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from pathlib import Path

import pytest
import trio
import trio.lowlevel
import trio.testing

from serverio import AccessLog, Server
from serverio.observe.logpipe import (
    CHUNK_BYTES,
    FLUSH_SECONDS,
    LogPipe,
    PipeHandler,
    open_append,
    route_logging,
)
from serverio.observe.stats import LogStats
from serverio.ops.metrics import render, snapshot
from serverio.ops.run import summary_line

from .conftest import connect, make_config


class Recording:
    """A target that keeps every write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True


class Stalled(Recording):
    """A target whose writes block until released: a reader that stopped."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()

    def write(self, data: bytes) -> None:
        self.entered.set()
        self.gate.wait(30)
        super().write(data)


class Failing(Recording):
    def write(self, data: bytes) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def _pipe(target: Recording, *, limit: int = 1 << 20) -> LogPipe:
    pipe = LogPipe(io.StringIO(), limit=limit, counts=LogStats())
    pipe.retarget(target)
    return pipe


async def _until(predicate: object, seconds: float = 10.0) -> None:
    """Poll a state a real thread changes, bounded in real time (the
    MockClock may jump while the thread runs)."""
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await trio.sleep(0.001)


# ----------------------------------------------------------------- unit


async def test_lines_are_written_in_order_by_whole_lines_of_at_most_pipe_buf() -> None:
    target = Recording()
    pipe = _pipe(target)
    lines = [f"line {i} " + "x" * (i % 300) for i in range(2000)]
    lines.insert(700, "long " + "y" * (3 * CHUNK_BYTES))  # longer than one atomic write
    async with pipe.running():
        assert pipe.buffering
        for i, line in enumerate(lines):
            assert pipe.put(line)
            if i % 97 == 0:
                await trio.lowlevel.checkpoint()  # let the writer take some on the way
    assert pipe.direct  # stopped cleanly: written at once from now on
    expected = "".join(line + "\n" for line in lines).encode()
    assert b"".join(target.writes) == expected  # nothing lost, order kept
    assert pipe.written == len(lines)
    for data in target.writes:
        assert data.endswith(b"\n")  # whole lines only
        assert len(data) <= CHUNK_BYTES or data.count(b"\n") == 1, len(data)
    assert pipe.counts == LogStats()


async def test_a_stalled_reader_costs_dropped_lines_counted_by_kind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    target = Stalled()
    pipe = _pipe(target, limit=1000)
    try:
        async with pipe.running():
            assert pipe.put("first")  # taken by the writer's thread, which blocks
            await _until(target.entered.is_set)
            # From here: polling above lets the MockClock jump for as long
            # as the real thread takes to start (seconds on a loaded machine).
            started = trio.current_time()
            kept = 0
            while pipe.put(f"access {kept:04d} " + "a" * 40):
                kept += 1
            assert pipe.buffered_bytes <= 1000 and kept == 1000 // 53
            assert not pipe.put("a message " + "m" * 60, True)  # full: dropped at once
            for _ in range(9):
                pipe.put("more access " + "a" * 60)
            assert (pipe.counts.lines_dropped, pipe.counts.messages_dropped) == (10, 1)
            entered = trio.current_time()
        # Stopping waited FLUSH_SECONDS for the stalled write, then gave up.
        assert trio.current_time() - entered == pytest.approx(FLUSH_SECONDS)
        assert trio.current_time() - started < FLUSH_SECONDS + 1
        assert pipe.stuck
        # What was still buffered is counted too; later lines are dropped at once.
        assert pipe.counts.lines_dropped == 10 + kept
        assert not pipe.put("the summary", True)
        assert pipe.counts.messages_dropped == 2
        assert pipe.pool.stats.abandoned == 1 and pipe.pool.running == 1
    finally:
        target.gate.set()
    await _until(lambda: pipe.pool.running == 0)  # the abandoned thread ended
    assert target.writes == [b"first\n"]  # nothing written after it was abandoned


async def test_a_failed_write_drops_and_counts_instead_of_stopping() -> None:
    pipe = _pipe(Failing())
    with trio.fail_after(5):
        async with pipe.running():
            pipe.put("one")
            pipe.put("two", True)
            await _until(lambda: not pipe.buffering)
            assert not pipe.put("three")
    assert (pipe.counts.lines_dropped, pipe.counts.messages_dropped) == (2, 1)
    assert not pipe.direct and not pipe.put("four")


def test_without_a_writer_lines_are_written_at_once() -> None:
    out = io.StringIO()
    pipe = LogPipe(out)
    assert pipe.direct and pipe.put("now")
    assert out.getvalue() == "now\n"


async def test_lines_put_from_another_thread_reach_the_writer_in_order() -> None:
    target = Recording()
    pipe = _pipe(target)
    async with pipe.running():
        pipe.put("from the loop")

        def burst() -> None:
            for i in range(50):
                pipe.put(f"from a thread {i}")

        await trio.to_thread.run_sync(burst)
        pipe.put("from the loop again")
    text = b"".join(target.writes).decode().splitlines()
    assert text == [
        "from the loop",
        *(f"from a thread {i}" for i in range(50)),
        "from the loop again",
    ]


async def test_warnings_take_the_pipe_and_never_block(
    autojump_clock: trio.testing.MockClock,
) -> None:
    handler = PipeHandler(io.StringIO())
    handler.setFormatter(logging.Formatter("serverio: %(levelname)s: %(message)s"))
    root_logger = logging.getLogger()
    root_logger.addHandler(handler)
    target = Stalled()
    pipe = _pipe(target, limit=200)
    log = logging.getLogger("serverio.test_logpipe")
    try:
        with route_logging(pipe):
            async with pipe.running():
                log.warning("taken by the stalled write")
                await _until(target.entered.is_set)
                for i in range(20):  # a per-request warning, the loop never waits
                    log.warning("write of /f%d failed: no space", i)
                assert pipe.counts.messages_dropped > 0
            assert pipe.stuck
            before = pipe.counts.messages_dropped
            log.warning("after the stop")  # stuck: dropped, never written
            assert pipe.counts.messages_dropped == before + 1
        assert handler.pipe is None
    finally:
        root_logger.removeHandler(handler)
        target.gate.set()
    await _until(lambda: pipe.pool.running == 0)
    assert target.writes == [b"serverio: WARNING: taken by the stalled write\n"]


async def test_reopen_while_writing_closes_the_old_file_after_its_lines(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    pipe = LogPipe(io.StringIO())
    pipe.retarget(open_append(str(path)))
    async with pipe.running():
        pipe.put("before")
        await _until(lambda: pipe.written == 1)
        path.rename(tmp_path / "access.log.1")
        pipe.retarget(open_append(str(path)))
        pipe.put("after")
    pipe.close()
    assert (tmp_path / "access.log.1").read_text() == "before\n"
    assert path.read_text() == "after\n"


def test_the_summary_line_says_how_many_lines_were_dropped() -> None:
    assert "dropped" not in summary_line({"completed": 3}, 1.0)
    line = summary_line({"completed": 3, "log_lines_dropped": 40, "log_messages_dropped": 2}, 1.0)
    assert line.endswith(", 42 log lines dropped"), line


# ------------------------------------------------------- a server, in process


class StalledStream(io.StringIO):
    """An access-log stream whose writes block until released."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def write(self, s: str) -> int:
        self.gate.wait(30)
        return super().write(s)


async def test_a_stuck_access_log_neither_stops_serving_nor_holds_shutdown(root: Path) -> None:
    stream = StalledStream()
    log = AccessLog("common", stream)
    log.pipe.limit = 2000  # a few lines: the test needs no megabyte of them
    cfg = make_config(root, host="127.0.0.1", port=0, shutdown_timeout=1.0)
    srv = Server(cfg, access_log=log)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(srv.serve)
            client = await connect(srv.addresses()[0][1])
            with trio.fail_after(20):
                for _ in range(300):
                    r = await client.get("/hello.txt")
                    assert r.status == 200
            dropped = srv.stats.log.lines_dropped
            assert dropped > 200 and log.lines_dropped == dropped
            assert f"serverio_log_lines_dropped_total {dropped}\n" in render(snapshot(srv))
            await client.stream.aclose()
            shutdown_at = time.monotonic()
            srv.shutdown()
        # The drain had nothing to wait for; the stalled write held the exit
        # for the flush bound only.
        assert time.monotonic() - shutdown_at < FLUSH_SECONDS + 3
        assert log.pipe.stuck
    finally:
        stream.gate.set()
    await _until(lambda: log.pipe.pool.running == 0)
