"""The HTTP/1.1 emitter: a plan's head and body onto one connection's stream.

One job: write bytes under the write deadline ("time without progress",
``--write-timeout``), by the cheapest path the stream allows.

* A plain socket is written through its raw descriptor: one non-blocking
  ``write``/``writev`` that takes everything (heads and small bodies, the
  common case) needs no cancel scope, no wait and no trio machinery; what
  a full socket buffer leaves goes through ``sock.send`` under the
  deadline, pushed forward by every partial send.
* File spans go out with ``os.sendfile`` (zero-copy) on plain sockets,
  otherwise through user space, at most :data:`BUFFER_CHUNK` bytes at a
  time (TLS, memory streams, platforms without sendfile).
* A TLS stream (:class:`~serverio.net.tlsstream.TLSStream`) is written
  the same way: encrypted and handed to the socket in one call that needs
  no scope when the socket takes it all; what it leaves is written under
  the deadline, pushed forward by every write that takes bytes.
* Other streams (memory, in tests) only report completion, so they get
  :data:`SEND_PIECE` bytes at a time and the deadline moves after each.

The stream around an accepted socket is made lazily (:attr:`Emitter.stream`):
making a :class:`trio.SocketStream` sets TCP_NODELAY and TCP_NOTSENT_LOWAT,
two syscalls the first write of a connection that closes after it does not
need (:meth:`Emitter.tune`).

The emitter serialises nothing itself but the cached head's close variant:
the head comes from :mod:`serverio.wire.h1` (see its docstring), the body
pieces from the plan.  It raises :class:`Abort` when a response cannot be
completed (write deadline, a file that shrank, a read error mid-body): the
connection must then close.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
from typing import Final

import trio

from ..fs.body import Body, StreamBody
from ..fs.reads import pread
from ..http.core import FileSpan, Plan
from ..model import ChunkSource
from ..observe.stats import Stats
from ..wire.h1 import SHARED_HEADS, head_bytes, shared_head
from .pull import Ended, pull_chunk
from .tlsstream import TLSStream

__all__ = ["BUFFER_CHUNK", "SENDFILE_CHUNK", "SEND_PIECE", "SOCKET_FD_IO", "Abort", "Emitter"]

SENDFILE_CHUNK = 1 << 20  # one sendfile call at most, then let others run
BUFFER_CHUNK = 65536  # buffered path: user-space bytes per transfer at most
# The write deadline's unit of progress: a memory stream's write, an HTTP/2 body's DATA.
SEND_PIECE = 16384
# A write this small goes out before the TCP options are set (see
# Emitter.tune): trio's TCP_NOTSENT_LOWAT (16 KiB) cannot limit it.
_UNTUNED_WRITE_MAX = 16384
_CLOSE_END = b"Connection: close\r\n\r\n"
_CHUNKED = (b"transfer-encoding", b"chunked")  # a streamed body of unknown length
_cached_head = SHARED_HEADS.get  # the HTTP/1.1 head cache, read inline

_HAS_SENDFILE = hasattr(os, "sendfile")
# Sockets are file descriptors on POSIX, so the fast paths read and write
# them with os.read/os.write/os.writev; on Windows a socket is not a C
# runtime descriptor and everything goes through trio's socket methods.
SOCKET_FD_IO: Final = os.name == "posix"


def _no_sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
    raise OSError(errno.ENOSYS, "sendfile is not available")


def _write_joined(fd: int, pieces: Sequence[bytes]) -> int:
    return os.write(fd, b"".join(pieces))


# Looked up once: Windows has neither (macOS and FreeBSD have both; their
# sendfile reports a partial send on a non-blocking socket as a count,
# which the loop below handles like Linux's).
_os_sendfile: Final[Callable[[int, int, int, int], int]] = getattr(os, "sendfile", _no_sendfile)
_os_writev: Final[Callable[[int, Sequence[bytes]], int]] = getattr(os, "writev", _write_joined)


class Abort(Exception):
    """The response cannot be completed; close the connection now."""


class Emitter:
    """Writes one connection's responses (one task at a time: the
    connection's own).

    ``stream`` is the connection's stream, or a freshly accepted trio socket
    whose :class:`trio.SocketStream` is made on first use (``lazy_stream``:
    the stream once there, given or made; None before).  ``before_wait``
    is called before anything here waits (the connection lifts its read
    deadline then: a read deadline never cuts a response in progress).
    """

    __slots__ = (
        "_before_wait",
        "_stats",
        "_timeout",
        "_timeouts",
        "fd",
        "lazy_stream",
        "partial",
        "progress",
        "sock",
        "tls",
        "use_sendfile",
    )

    def __init__(
        self,
        stream: trio.abc.Stream | trio.socket.SocketType,
        stats: Stats,
        write_timeout: float,
        sendfile: bool,
        before_wait: Callable[[], None],
    ) -> None:
        if isinstance(stream, trio.socket.SocketType):
            self.sock: trio.socket.SocketType | None = stream
            self.lazy_stream: trio.abc.Stream | None = None
        else:
            self.lazy_stream = stream
            self.sock = stream.socket if isinstance(stream, trio.SocketStream) else None
        # Over TLS, the stream that can write without waiting (see send).
        self.tls = stream if isinstance(stream, TLSStream) else None
        # The raw fd for the fast paths (non-blocking read/write without
        # trio's socket machinery); -1 for streams that are not sockets.
        self.fd = self.sock.fileno() if self.sock is not None and SOCKET_FD_IO else -1
        # One decision per connection: zero-copy when the stream is a plain
        # socket and the platform has sendfile; otherwise the buffered path
        # (TLS streams, memory streams in tests, other platforms).
        self.use_sendfile = sendfile and _HAS_SENDFILE and self.sock is not None
        # The two counter groups it moves, bound once per connection.
        self._stats = stats.responses
        self._timeouts = stats.timeouts
        self._timeout = write_timeout
        self._before_wait = before_wait
        # Body bytes of the response being written that are already handed
        # to the kernel: a cut response's access-log line reports them.
        self.progress = 0
        self.partial = 0  # bytes of the last failed send() that went out

    @property
    def stream(self) -> trio.abc.Stream:
        """The connection's stream; around a bare socket it is made on first
        use (a slow path: a cold file's watcher, an event stream, HTTP/2),
        which also sets trio's TCP options on it."""
        stream = self.lazy_stream
        if stream is None:
            assert self.sock is not None
            stream = self.lazy_stream = trio.SocketStream(self.sock)
        return stream

    def tune(self) -> None:
        """Set the TCP options a :class:`trio.SocketStream` sets (TCP_NODELAY,
        TCP_NOTSENT_LOWAT where the platform has it), by making the stream.

        Due before any write that can follow an earlier write on the
        connection: Nagle's algorithm holds a small segment back only while
        earlier data is unacknowledged, so the first write of a connection
        that closes right after it (a ``Connection: close`` answer in one
        ``writev``; the close sends whatever is queued, with the FIN) goes
        out the same with or without them, and skips two setsockopt calls.
        """
        _ = self.stream

    def close_socket(self) -> bool:
        """Close the connection's plain socket (once, at its end), without
        an await; False when the stream is not a plain socket (TLS, memory):
        the caller then closes it with ``trio.aclose_forcefully``."""
        sock = self.sock
        if sock is not None and self.fd >= 0:
            # Every task that used this fd is done (the connection's task
            # tree ended), so no task waits on it and trio's I/O manager
            # keeps no registration for it (it drops one with its last
            # waiter): the fd is closed directly, without notify_closing,
            # whose EPOLL_CTL_DEL would only fail with ENOENT (the kernel
            # removes a closed socket from an epoll or kqueue set itself).
            os.close(sock.detach())
        elif sock is not None:
            # A plain socket closes synchronously (what SocketStream.aclose
            # does, minus its checkpoint); aclose_forcefully would also
            # enter a cancel scope, per connection, for nothing.
            sock.close()
        else:
            return False
        return True

    # ------------------------------------------------------------ writing

    async def send(self, data: bytes | memoryview) -> None:
        """Write ``data`` under the write deadline ("time without progress").

        Fast path: one non-blocking ``write`` that takes everything (the
        common case for heads and small bodies) needs no scope and no wait.
        Otherwise, on a plain socket we drive ``sock.send`` ourselves so every
        partial send pushes the deadline forward.  A TLS stream is written
        the same way (``TLSStream.flush_within``).  Other streams (memory) only
        report completion, so we hand them SEND_PIECE bytes at a time and
        push the deadline after each piece.

        Cancellation handling: a cancelled write leaves the response cut
        short; the connection closes (nothing else is written on it).
        """
        if self.lazy_stream is None:
            self.tune()
        view = memoryview(data)
        if self.fd >= 0:
            try:
                n = os.write(self.fd, view)
            except BlockingIOError:
                n = 0
            except OSError as exc:
                raise trio.BrokenResourceError from exc
            if n == len(view):
                return
            view = view[n:]
        elif self.tls is not None:
            if self.tls.send_nowait(view):
                return  # encrypted and taken at once: no scope, no wait
            self._before_wait()
            self.partial = 0  # not known byte for byte (records add OpenSSL's overhead)
            if not await self.tls.flush_within(self._timeout):
                self._timeouts.write += 1
                raise Abort
            return
        self._before_wait()
        timeout = self._timeout
        total = len(data)
        try:
            with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
                if self.sock is not None:
                    while view:
                        try:
                            n = await self.sock.send(view)
                        except OSError as exc:
                            # EPIPE/ECONNRESET from the raw socket: the same
                            # "peer went away" as the stream API reports.
                            raise trio.BrokenResourceError from exc
                        view = view[n:]
                        scope.deadline = trio.current_time() + timeout
                else:
                    while view:
                        await self.stream.send_all(view[:SEND_PIECE])
                        view = view[SEND_PIECE:]
                        scope.deadline = trio.current_time() + timeout
        finally:
            # What of ``data`` went out, for a cut response's log line when
            # this write fails part-way (the buffered path's progress).
            self.partial = total - len(view)
        if scope.cancelled_caught:
            self._timeouts.write += 1
            raise Abort

    async def emit(self, plan: Plan, body: Body, *, close: bool, ka10: bool) -> int:
        """Write the plan's head and its body source (which the caller
        closes).  Returns the number of body bytes sent.

        Literal pieces are coalesced with the head into as few writes as
        possible; each file span is flushed before it and streamed itself.
        """
        head = _head(plan, close, ka10)
        stats = self._stats
        literal = body.pieces
        if len(literal) == 1 and self.fd >= 0:
            piece = literal[0]
            if type(piece) is bytes:
                # The common answer (a warm cached file, an error page): the
                # head and one in-memory piece in one non-blocking writev,
                # without the piece list and the coroutine of the general
                # path below.
                total = len(head) + len(piece)
                if self.lazy_stream is None and (not close or total > _UNTUNED_WRITE_MAX):
                    # Only the one small write of a connection that closes
                    # after it goes out before the TCP options are set.
                    self.tune()
                try:
                    n = _os_writev(self.fd, (head, piece))
                except BlockingIOError:
                    n = 0
                except OSError as exc:
                    self.progress = 0
                    raise trio.BrokenResourceError from exc
                if n < total:
                    try:
                        await _send_rest(self, head, piece, n)
                    except BaseException:
                        self.progress = max(0, n - len(head))  # the access log's "cut" line
                        raise
                stats.bytes_sent += total
                return len(piece)
        sent = self.progress = 0
        if len(literal) == 1 and self.tls is not None and type(literal[0]) is bytes:
            # Over TLS the same answer is one write, one record (send:
            # encrypted and written at once when the socket takes it).
            await self.send(head + literal[0])
            stats.bytes_sent += len(head) + len(literal[0])
            return len(literal[0])
        pieces = [head]
        if body.pieces:
            used_file = False
            for piece in body.pieces:
                if isinstance(piece, FileSpan):
                    assert body.fd >= 0
                    used_file = True
                    await self.send_pieces(pieces)
                    pieces = []
                    self.progress = sent  # every earlier piece is out; the span adds its own
                    if self.use_sendfile:
                        await self._sendfile(body.fd, piece)
                    else:
                        await self._send_buffered(body.fd, piece)
                else:
                    pieces.append(piece)
                sent += len(piece)
            if used_file:
                if self.use_sendfile:
                    stats.sendfile_responses += 1
                else:
                    stats.buffered_responses += 1
        if pieces:
            await self.send_pieces(pieces)
        stats.bytes_sent += len(head) + sent
        return sent

    async def emit_stream(
        self, plan: Plan, body: StreamBody, *, close: bool, ka10: bool, chunked: bool
    ) -> int:
        """Write the plan's head and a streamed body (a folder archive, a
        proxied response: :class:`~serverio.model.StreamBody`, which the
        caller closes), each chunk written before the next is asked for
        (backpressure: a slow client slows the source; one chunk is held
        here at most).  Returns the body bytes sent (without the framing).

        Framing: a declared ``body.length`` goes as the Content-Length the
        plan carries; without one, ``chunked`` (an HTTP/1.1 client) frames
        it with the chunked coding (RFC 9112 §7.1: each chunk as it comes,
        the last-chunk at the end), else the connection's close ends it (an
        HTTP/1.0 client; ``close`` must then be set, RFC 9112 §6.3).

        A cut (:class:`~serverio.model.BodyCut`, any failure of the source,
        more or fewer bytes than the declared length, or no chunk made for
        ``--write-timeout`` when the source does not bound its own pulls)
        raises :class:`Abort`: the connection closes without the last-chunk
        or short of its Content-Length, so the client sees an incomplete
        response (RFC 9112 §8).  Every byte written (head, framing, body)
        is counted in ``bytes_sent``, a cut response's too.

        Cancellation handling: a cancelled write or pull leaves the
        response cut; the source is not closed here (its owner, the
        transport's ``finally``, does: the archive's descriptor, the
        upstream connection).
        """
        length = body.length
        framed = length is None and chunked
        assert length is not None or chunked or close
        headers = (*plan.headers, _CHUNKED) if framed else plan.headers
        head = head_bytes(plan.status, headers, close=close, keep_alive_10=ka10)
        self._before_wait()  # the source waits: no read deadline while the body streams
        source = body.source
        within = None if body.bounded else self._timeout
        sent = self.progress = 0
        wrote = 0  # bytes on the wire: head, framing and body
        # A chunk the source already holds (a small proxied answer: its
        # head, body and end came in one read) goes with the head in one
        # writev; otherwise the head goes first, before any wait for the
        # body (an SSE stream's head must not wait for its first event).
        ready = getattr(source, "ready_chunk", None)
        chunk = ready() if ready is not None else None
        try:
            if chunk is None:
                await self.send(head)
                wrote, head = len(head), b""
                chunk = await _pull(self, source, within)
            while chunk:
                if length is not None and sent + len(chunk) > length:
                    raise Abort  # past the declared length: never written
                pieces = [head] if head else []
                if framed:
                    size = b"%x\r\n" % len(chunk)
                    pieces += (size, chunk, b"\r\n")
                    wrote += len(size) + 2
                else:
                    pieces.append(chunk)
                await (self.send(chunk) if len(pieces) == 1 else self.send_pieces(pieces))
                wrote += len(head) + len(chunk)
                head = b""
                sent += len(chunk)
                self.progress = body.sent = sent
                chunk = await _pull(self, source, within)
            if length is not None and sent != length:
                raise Abort  # ended short of its Content-Length: a cut
            end = head + b"0\r\n\r\n" if framed else head  # the head of an empty body
            if end:
                await self.send(end)
                wrote += len(end)
        finally:
            self._stats.bytes_sent += wrote
        return sent

    async def send_pieces(self, pieces: list[bytes]) -> None:
        """Write the pieces in order: one ``writev`` when it takes them all.

        Gathering the head and an in-memory body in the kernel saves joining
        them in user space — a 64 KiB copy per request for a cached file.

        Memory: a body piece may be shared by every connection (a
        compression-cache or warm-file-cache entry), so what a partial write
        leaves is sent as ``memoryview`` slices of the pieces themselves,
        never a joined copy: a client that stops reading pins O(socket
        buffer) bytes of its own, not O(body).
        """
        if self.lazy_stream is None:
            self.tune()
        if len(pieces) > 1:
            if self.fd >= 0:
                try:
                    n = _os_writev(self.fd, pieces)
                except BlockingIOError:
                    n = 0
                except OSError as exc:
                    raise trio.BrokenResourceError from exc
                if n == sum(map(len, pieces)):
                    return
                # Rare (a full socket buffer): the rest through the slow path.
                for piece in pieces:
                    if n >= len(piece):
                        n -= len(piece)
                        continue
                    await self.send(memoryview(piece)[n:] if n else piece)
                    n = 0
                return
            if sum(map(len, pieces)) <= BUFFER_CHUNK:
                # Other streams (TLS): one write, so a small response goes
                # out as one record; the copy is bounded by BUFFER_CHUNK.
                await self.send(b"".join(pieces))
                return
            for piece in pieces:
                await self.send(piece)
        elif pieces:
            await self.send(pieces[0])

    async def _sendfile(self, fd: int, span: FileSpan) -> None:
        """Zero-copy: ``os.sendfile`` on the non-blocking socket.

        Waits with ``wait_writable`` on EAGAIN; the write deadline is pushed
        forward on every call that moves bytes ("time without progress").
        A file that shrank under us makes sendfile return 0 before the span
        is done: we abort rather than pad or finish short.
        """
        if self.lazy_stream is None:
            self.tune()
        sock = self.sock
        assert sock is not None
        sockfd = sock.fileno()
        offset, remaining = span.offset, span.length
        self._before_wait()
        timeout = self._timeout
        with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
            while remaining:
                try:
                    n = _os_sendfile(sockfd, fd, offset, min(remaining, SENDFILE_CHUNK))
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(sock)
                    continue
                except OSError as exc:
                    raise trio.BrokenResourceError from exc
                if n == 0:
                    self._stats.truncated += 1
                    raise Abort
                offset += n
                remaining -= n
                self.progress += n  # what a cut response's log line reports
                scope.deadline = trio.current_time() + timeout
                if n == SENDFILE_CHUNK:
                    # The socket took a whole chunk without blocking: let
                    # other tasks run before the next one (fairness).
                    await trio.lowlevel.checkpoint()
        if scope.cancelled_caught:
            self._timeouts.write += 1
            raise Abort

    async def _send_buffered(self, fd: int, span: FileSpan) -> None:
        """Through user space, at most BUFFER_CHUNK bytes at a time."""
        offset, remaining = span.offset, span.length
        while remaining:
            try:
                data = pread(fd, min(remaining, BUFFER_CHUNK), offset)
            except OSError:
                # EIO from a failing disk mid-body: the head is out, so the
                # only honest answer is to cut the response short.
                self._stats.read_errors += 1
                raise Abort from None
            if not data:
                self._stats.truncated += 1
                raise Abort
            try:
                await self.send(data)
            except BaseException:
                self.progress += self.partial  # the part of this chunk that went out
                raise
            offset += len(data)
            remaining -= len(data)
            self.progress += len(data)


def _head(plan: Plan, close: bool, ka10: bool) -> bytes:
    """The plan's HTTP/1.1 head: a shared plan's from the head cache
    (serverio.wire.h1.shared_head; its hit test inlined here)."""
    if not plan.shared or ka10:
        return head_bytes(plan.status, plan.headers, close=close, keep_alive_10=ka10)
    hit = _cached_head(id(plan))
    if hit is not None and hit[0] is plan.headers and hit[1] == plan.status:
        head = hit[2]
    else:
        head = shared_head(plan)
    if close:
        # The cached head is head_bytes(close=False, keep_alive_10=False):
        # the close variant is the same fields with Connection: close
        # last, before the blank line (what head_bytes(close=True) writes).
        head = head[:-2] + _CLOSE_END
    return head


async def _send_rest(emitter: Emitter, head: bytes, piece: bytes, n: int) -> None:
    """What a partial writev of ``head`` and ``piece`` left after ``n``
    bytes, through :meth:`Emitter.send` (a shared piece is sliced as a
    view, never copied)."""
    if n < len(head):
        await emitter.send(memoryview(head)[n:] if n else head)
        await emitter.send(piece)
    else:
        await emitter.send(memoryview(piece)[n - len(head) :])


async def _pull(emitter: Emitter, source: ChunkSource, within: float | None) -> bytes:
    """A streamed body's next chunk (:meth:`Emitter.emit_stream`,
    :func:`serverio.net.pull.pull_chunk`); :class:`Abort` when there is
    none (cut, failed or stalled: the response cannot be completed)."""
    got = await pull_chunk(source, within, emitter._stats, emitter._timeouts)
    if isinstance(got, Ended):
        raise Abort
    return got
