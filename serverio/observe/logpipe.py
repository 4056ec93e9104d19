"""Log lines that never block the event loop: a bounded buffer and one writer.

Every line serverio writes on stderr or to ``--access-log-file`` while it
serves (access-log lines, the ``serverio`` logger's warnings, the draining
line) goes through a :class:`LogPipe`.  The event loop only appends the
line to a bounded in-memory buffer (:data:`BUFFER_BYTES`) and wakes the
pipe's writer task; the writer hands what is buffered to a thread of the
pipe's own one-thread pool (:func:`serverio.concurrency.blocking.run_blocking`,
never trio's default limiter).  A consumer that stops reading (a container
runtime's full log pipe, a paused ``| less``) stalls only that thread: the
buffer fills, and further lines are dropped and counted
(:class:`~serverio.observe.stats.LogStats`: ``serverio_log_lines_dropped_total``
for access-log lines, ``serverio_log_messages_dropped_total`` for messages)
instead of the whole server stopping at the first full pipe, as a blocking
``write()`` on the event loop did.  ``O_NONBLOCK`` on the descriptor is not
used: Windows has no such flag for pipes, and it would change the descriptor
for every other writer sharing it (the ``--workers`` processes, a shell).

Writes: whole lines, grouped into one ``write(2)`` of at most ``PIPE_BUF``
bytes (512 where the platform does not say; a longer line is written alone),
so lines of several ``--workers`` processes sharing one pipe never interleave
mid-line (POSIX: writes of at most ``PIPE_BUF`` bytes to a pipe are atomic).
The process's stderr is written through its descriptor (``os.write``), not
through ``sys.stderr``: a thread stuck in ``sys.stderr.write`` would hold that
stream's lock, so every other print to stderr would block behind it and the
interpreter's exit would abort on it.

Modes of a pipe:

* direct: no writer task runs (a :class:`~serverio.app.server.Server`
  driven without ``serve()``, a library user's tests over memory streams):
  :meth:`LogPipe.put` writes at once, on the caller's thread, as before;
* buffered: while :meth:`LogPipe.running` runs the writer task;
* stuck: the writer was stopped while a write was still blocked (the flush
  at stop ran out of time): the thread is abandoned, and from then on lines
  are dropped and counted; nothing writes to the target again;
* broken: a write failed (``EPIPE``: the reader is gone; a closed file):
  lines are dropped and counted.

Lines handed to a write that was abandoned are not counted as dropped: that
write may still complete if the reader resumes.  After a clean stop the
pipe is direct again, so the exit summary line is written at once: the
reader took everything a moment before, so a block there needs a reader
that stalls in that very moment.

:class:`PipeHandler` is the ``logging`` handler the CLI installs: while a
server runs, :func:`route_logging` points it at the server's stderr pipe, so
warnings logged per request (an upload refused, a failed write, an internal
error) take the same non-blocking path; outside it, it is a plain
:class:`logging.StreamHandler`.
"""

from __future__ import annotations

import logging
import os
import select
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import IO, Protocol, TextIO

import trio

from ..concurrency.blocking import Pool, run_blocking
from .stats import LogStats

__all__ = [
    "BUFFER_BYTES",
    "CHUNK_BYTES",
    "FLUSH_SECONDS",
    "LogPipe",
    "PipeHandler",
    "open_append",
    "route_logging",
]

# Bytes of lines the event loop may hold for a writer that is behind; past
# it, lines are dropped.  One write in flight holds at most as much again.
BUFFER_BYTES = 512 * 1024
# How long stopping a pipe waits for its buffer to be written (then the
# writer thread, if stuck, is abandoned).
FLUSH_SECONDS = 1.0
# The most one write(2) carries: atomic on a pipe (POSIX PIPE_BUF; Linux
# 4096, macOS 512; Windows does not say, so the POSIX minimum).
CHUNK_BYTES: int = getattr(select, "PIPE_BUF", 512)

_DIRECT, _BUFFERED, _STUCK, _BROKEN = "direct", "buffered", "stuck", "broken"


class _Target(Protocol):
    def write(self, data: bytes) -> None: ...
    def close(self) -> None: ...


class _FdTarget:
    """A descriptor written with ``os.write`` (stderr, the access-log file)."""

    def __init__(self, fd: int, owner: IO[bytes] | None = None) -> None:
        self.fd = fd
        self.owner = owner  # the file object that owns ``fd`` (closed with it)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]

    def close(self) -> None:
        if self.owner is not None:
            self.owner.close()


class _StreamTarget:
    """A text stream (a caller's stream, ``sys.stderr`` without a descriptor)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, data: bytes) -> None:
        self.stream.write(data.decode("utf-8", "backslashreplace"))
        self.stream.flush()

    def close(self) -> None:
        pass  # not ours


def _target_for(stream: TextIO | None) -> _Target | None:
    """The process's stderr goes through its descriptor when it has one."""
    chosen = stream if stream is not None else sys.stderr  # None under pythonw
    if chosen is None:
        return None  # nowhere to write: every line is dropped
    if _is_stderr(chosen):
        try:
            fd = chosen.fileno()
            chosen.flush()
        except (AttributeError, OSError, ValueError):
            return _StreamTarget(chosen)  # a capture object (pytest), a closed stream
        return _FdTarget(fd)
    return _StreamTarget(chosen)


def _is_stderr(stream: object) -> bool:
    return stream is sys.stderr or stream is sys.__stderr__


def open_append(path: str) -> _Target:
    """A target appending to ``path`` (O_APPEND: every write lands at the
    end, so ``--workers`` processes may share the file); it owns the file."""
    f = open(path, "ab", buffering=0)  # the target owns and closes it
    return _FdTarget(f.fileno(), f)


def _write_chunks(target: _Target, chunks: list[tuple[bytes, int]]) -> tuple[int, bool]:
    """Worker thread: write ``chunks`` in order; (lines written, ok)."""
    done = 0
    for data, lines in chunks:
        try:
            target.write(data)
        except Exception:  # EPIPE, a closed file, a caller's odd stream: the log
            return done, False  # is lost, never the server (the writer task)
        done += lines
    return done, True


class LogPipe:
    """Lines to one target through a bounded buffer and a writer task.

    ``stream``: a text stream, or None for the process's stderr (written
    through its descriptor); ``target`` instead: an opened target (see
    :meth:`retarget`).  ``counts``: where drops are counted (a server
    points it at its :class:`~serverio.observe.stats.Stats`).

    Cancellation handling: :meth:`put` never waits.  The writer task lives
    in :meth:`running`'s nursery; leaving :meth:`running` (normally or by
    cancellation) waits at most ``flush_seconds``, shielded, for the
    buffer to be written, then cancels the writer: a write blocked in the
    kernel is abandoned (its thread keeps its token in the pipe's pool
    until the write returns, if ever; trio's threads are daemon threads, so
    the process exits anyway), and the pipe turns stuck.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        name: str = "log",
        limit: int = BUFFER_BYTES,
        counts: LogStats | None = None,
    ) -> None:
        self.name = name
        self.limit = limit
        self.counts = counts if counts is not None else LogStats()
        # Its own limiter: a stuck write stalls nothing else.  The writer
        # calls it one hop at a time, so nothing ever queues; the queue of 1
        # keeps the pool's "nearly full" warning (80%) quiet: a warning
        # about the log pool would be written to the log it is about.
        self.pool = Pool(name, 1, 1)
        self.target = _target_for(stream)
        # Writes to the process's stderr (a server shares it for messages).
        self.on_stderr = stream is None or _is_stderr(stream)
        self._mode = _DIRECT if self.target is not None else _BROKEN
        # (line bytes, is a message): the kind says which counter a drop bumps.
        self._lines: deque[tuple[bytes, bool]] = deque()
        self._bytes = 0
        self._writing = False
        self._retired: list[_Target] = []
        self._wake = trio.Event()
        self._idle = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._loop_thread = 0
        self.written = 0  # lines handed to the target

    # ------------------------------------------------------------ state

    @property
    def buffering(self) -> bool:
        """The writer task runs (lines are buffered, never written here)."""
        return self._mode == _BUFFERED

    @property
    def direct(self) -> bool:
        """No writer runs and the target works: lines are written at once."""
        return self._mode == _DIRECT

    @property
    def stuck(self) -> bool:
        """A write was abandoned at stop: lines are dropped from now on."""
        return self._mode == _STUCK

    @property
    def buffered_bytes(self) -> int:
        return self._bytes

    def _drop(self, message: bool, n: int = 1) -> None:
        if message:
            self.counts.messages_dropped += n
        else:
            self.counts.lines_dropped += n

    # ------------------------------------------------------------ lines

    def put(self, line: str, message: bool = False) -> bool:
        """Write ``line`` (a newline is added) or buffer it; False if dropped.

        ``message``: a stderr message (counted as such when dropped), not
        an access-log line.  Safe from any thread: from another thread
        while buffering, the line is handed to the event loop.
        """
        if self._mode == _BUFFERED and threading.get_ident() != self._loop_thread:
            assert self._token is not None
            try:
                self._token.run_sync_soon(self.put, line, message)
            except trio.RunFinishedError:
                self._drop(message)
                return False
            return True
        data = (line + "\n").encode("utf-8", "backslashreplace")
        if self._mode == _DIRECT:
            assert self.target is not None
            try:
                self.target.write(data)
            except Exception:
                # A closed or broken log stream must not take the server down.
                self._mode = _BROKEN
                self._drop(message)
                return False
            self.written += 1
            return True
        if self._mode == _BUFFERED and self._bytes + len(data) <= self.limit:
            self._lines.append((data, message))
            self._bytes += len(data)
            self._wake.set()
            return True
        self._drop(message)  # full, stuck or broken
        return False

    def retarget(self, target: _Target) -> None:
        """Write to ``target`` from now on (``--access-log-file`` reopened on
        SIGHUP); the old target is closed once no write uses it."""
        old, self.target = self.target, target
        self.on_stderr = False
        if self._mode == _BROKEN:
            self._mode = _BUFFERED if self._token is not None else _DIRECT
        if old is None:
            return
        if self._mode == _BUFFERED:
            self._retired.append(old)  # the writer closes it after its write
            self._wake.set()
        elif not self._writing:
            old.close()
        # else an abandoned write may still use it: left to process exit.

    def close(self) -> None:
        """Close the target if this pipe owns it (an access-log file), unless
        an abandoned write may still be using it."""
        for old in self._retired:
            old.close()
        self._retired.clear()
        if self.target is not None and not self._writing:
            self.target.close()

    def _take(self) -> tuple[list[tuple[bytes, int]], list[bool]]:
        """Everything buffered, as chunks of whole lines of at most
        CHUNK_BYTES (a longer line alone), and each line's kind in order."""
        chunks: list[tuple[bytes, int]] = []
        kinds: list[bool] = []
        parts: list[bytes] = []
        size = 0
        while self._lines:
            data, message = self._lines.popleft()
            kinds.append(message)
            if parts and size + len(data) > CHUNK_BYTES:
                chunks.append((b"".join(parts), len(parts)))
                parts, size = [], 0
            parts.append(data)
            size += len(data)
        if parts:
            chunks.append((b"".join(parts), len(parts)))
        self._bytes = 0
        return chunks, kinds

    # ------------------------------------------------------------ writer

    @asynccontextmanager
    async def running(self, flush_seconds: float = FLUSH_SECONDS) -> AsyncIterator[None]:
        """Run the writer task while the body runs; then flush (bounded) and stop.

        Re-entrant: a pipe already running (shared by two owners) is left
        to its first owner.  A broken pipe stays broken (nothing to run).
        """
        if self._mode != _DIRECT:
            yield
            return
        async with trio.open_nursery() as nursery:
            await nursery.start(self._run)
            try:
                yield
            finally:
                with trio.move_on_after(flush_seconds) as scope:
                    scope.shield = True  # cancelled from outside: still a bounded flush
                    await self._flushed()
                nursery.cancel_scope.cancel()
        self._stopped()

    async def _run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._loop_thread = threading.get_ident()
        self._wake = trio.Event()
        self._mode = _BUFFERED
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self._mode == _BUFFERED and (self._lines or self._retired):
                await self._write_once()
            self._idle.set()

    async def _write_once(self) -> None:
        chunks, kinds = self._take()
        target = self.target
        retired, self._retired = self._retired, []
        if chunks and target is not None:
            # Cancelled mid-write (the flush at stop ran out of time): the
            # thread is abandoned and _writing stays True: the pipe is stuck.
            self._writing = True
            done, ok = await run_blocking(self.pool, _write_chunks, target, chunks)
            self._writing = False
            self.written += done
            if not ok:
                self._mode = _BROKEN
                for message in kinds[done:]:  # the lines of the failed write
                    self._drop(message)
                self._drop_buffered()
        for old in retired:
            await run_blocking(self.pool, old.close)

    async def _flushed(self) -> None:
        """Wait until the buffer is empty and no write is in flight."""
        while self._mode == _BUFFERED and (self._lines or self._writing or self._retired):
            self._idle = trio.Event()
            await self._idle.wait()

    def _drop_buffered(self) -> None:
        """Count every line still buffered as dropped, by kind."""
        for _, message in self._lines:
            self._drop(message)
        self._lines.clear()
        self._bytes = 0

    def _stopped(self) -> None:
        """After the writer stopped: direct again if everything was written;
        stuck if the flush ran out of time (a write abandoned, or lines
        left): those lines are dropped, and so is every later one, since a
        write now could block whoever puts it."""
        self._token = None
        if self._mode == _BUFFERED:
            self._mode = _STUCK if (self._writing or self._lines) else _DIRECT
        self._drop_buffered()


class PipeHandler(logging.StreamHandler[TextIO]):
    """A stderr handler that takes the server's :class:`LogPipe` while one is
    routed to it (:func:`route_logging`): the event loop never blocks on a
    warning logged per request.  Otherwise a plain StreamHandler."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        self.pipe: LogPipe | None = None

    def emit(self, record: logging.LogRecord) -> None:
        pipe = self.pipe
        if pipe is None or pipe.direct:
            super().emit(record)
            return
        try:
            msg = self.format(record)
        except Exception:
            self.handleError(record)
            return
        pipe.put(msg, True)  # buffered, or dropped and counted (stuck, full)


@contextmanager
def route_logging(pipe: LogPipe) -> Iterator[None]:
    """Point every :class:`PipeHandler` of the root logger at ``pipe``
    while the body runs (back to the previous pipe after)."""
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, PipeHandler)]
    before = [h.pipe for h in handlers]
    for h in handlers:
        h.pipe = pipe
    try:
        yield
    finally:
        for h, old in zip(handlers, before, strict=True):
            h.pipe = old
