"""The HTTP/2 writer: frames and writes, with fair interleaving of streams.

:class:`Writer` is the only code that writes the connection's socket (its
:meth:`Writer.run` task) and the only one that frames response bodies.

Fairness: every stream with an open window gets at most ``ROUND_QUANTUM``
bytes (256 KiB, in DATA frames of <= 16 KiB and <= the peer's
SETTINGS_MAX_FRAME_SIZE) per round and moves to the back of the queue;
filling stops at the connection's budget of pending bytes
(``OUT_BUDGET``, or its share of ``OUT_TOTAL`` when many connections are
busy: :meth:`Writer.budget`): one large file cannot starve the small
responses on the same connection, and 2,048 streams of large bodies do
not hold a round's worth of output each.  File spans are read
with a positional read of at most one round's worth (no sendfile: the
bytes go through framing, and TLS): where ``os.preadv`` exists, one
scatter read straight into the output buffer between the frame heads,
otherwise :func:`serverio.fs.reads.pread` and a copy.  The round is large
because its fixed cost (a scheduling round, a write) dominates: 256 KiB
rounds and writes moved 8 MiB bodies about 1.6x faster than 64 KiB ones.
Filling goes up to the budget (at most two rounds), written in one piece; the
two :class:`~serverio.net.outbuf.OutBuffer` s keep their capacity between
writes, so a round costs one copy by the kernel into memory that is
already there and one copy out by the socket.  A body that fits in one
frame is framed by its stream's task right after its HEADERS (its first
round, without the trip through the queue).

Deadlines: the socket must accept bytes within ``write_timeout`` (else the
connection is aborted); a stream whose body makes no progress (16 KiB of
DATA, ``SEND_PIECE``, or its end) for ``write_timeout`` is reset with
CANCEL, and when no body of the connection made progress in that time
either, the connection ends (:meth:`Writer.await_body`).  After the
client's EOF a body its windows cannot finish is dropped at once.

HEADERS and DATA go through the h2 adapter's frame path
(:mod:`serverio.net.h2adapter`); WINDOW_UPDATE credit for the reader's
budget is earned here (:class:`~serverio.net.h2read.WindowAllowance`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import h2.connection
import h2.exceptions
import trio
from h2.errors import ErrorCodes

from ..fs.body import Body
from ..http.core import FileSpan, Plan
from ..observe.stats import Stats
from ..wire.h2head import CONNECTION_SPECIFIC
from .emit import SEND_PIECE, SOCKET_FD_IO
from .h2adapter import FRAME_CHUNK, FRAME_HEAD, Frames
from .h2read import WindowAllowance
from .h2state import COMPLETE, SENDING, STOPPED, Stream
from .outbuf import OutBuffer
from .tlsstream import TLSStream

__all__ = [
    "FRAME_CHUNK",
    "IDLE_KEEP",
    "OUT_BUDGET",
    "OUT_FLOOR",
    "OUT_HIGH",
    "OUT_TOTAL",
    "ROUND_QUANTUM",
    "Pread",
    "Preadv",
    "Writer",
    "at_once",
    "busy_writers",
    "response_fields",
]

ROUND_QUANTUM = 262144  # DATA bytes per stream per round at most (one read, <= 16 frames)
OUT_BUDGET = 524288  # the writer stops filling DATA frames at this many pending bytes
OUT_TOTAL = 16777216  # ... or at its share of this, shared by the busy writers
OUT_FLOOR = 32768  # a busy writer's share is never below this (two frames)
OUT_HIGH = 2 * OUT_BUDGET  # the reader stops reading while more than this waits to be written
WRITE_PIECE = 524288  # bytes per socket write; the write deadline moves after each
IDLE_KEEP = 16384  # bytes of output buffer capacity a connection with no stream keeps
_END_STREAM, _DATA = 0x1, 0x0

# Writers with output pending or bodies queued, process-wide (all on the
# trio thread: a plain counter).  Filling stops at each one's share of
# OUT_TOTAL (between OUT_FLOOR and OUT_BUDGET), so the memory the output
# buffers hold stays near OUT_TOTAL x 2 (a buffer being written while the
# other fills) however many connections are busy: 2,048 HTTP/2 streams of
# 64 KiB on 256 connections held ~1.5 MiB per connection at the full
# budget; a few busy connections still get the full budget, whose large
# rounds and writes move large bodies fastest.
_busy = [0]


def busy_writers() -> int:
    """How many writers have output pending or bodies queued now."""
    return _busy[0]


Pread = Callable[[int, int, int], bytes]
Preadv = Callable[[int, list[memoryview], int], int]


# The last field tuple response_fields made, with the status and the
# fields (a tuple: immutable) it was made from, held so that the identity
# check cannot meet a recycled object: a warm file's plan, and its fields,
# are shared by its answers of one second on every connection.
_made: list[Any] = [None, 0, ()]


def response_fields(
    status: int, headers: Sequence[tuple[bytes, bytes]]
) -> tuple[tuple[bytes, bytes], ...]:
    """The HEADERS field list of every HTTP/2 response (bodies, errors,
    event streams alike).

    ``:status`` (RFC 9113 §8.3.2), then the Plan's fields (the pure
    layer's common fields first: serverio.http.core.common_fields) with
    lower-case names (RFC 9113 §8.2.1), connection-specific ones left out
    (§8.2.2).  Nothing is added here.  The same fields again (the same
    tuple object) and status give the same result again."""
    made = _made
    if headers is made[0] and status == made[1]:
        fields: tuple[tuple[bytes, bytes], ...] = made[2]
        return fields
    out = [(b":status", b"%d" % status)]
    for name, value in headers:
        name = name.lower()
        if name not in CONNECTION_SPECIFIC:
            out.append((name, value))
    fields = tuple(out)
    if type(headers) is tuple:
        made[:] = (headers, status, fields)
    return fields


async def _write(stream: trio.abc.Stream, fd: int, whole: memoryview, stall: float) -> bool:
    """Write ``whole`` to the connection; False when the write deadline
    (``stall`` seconds without progress) passed first.

    A write the socket takes whole needs no scope and no wait (the common
    case: a few frames into an empty socket buffer): a plain socket
    (``fd``) is written through its descriptor, a TLS stream encrypts and
    writes at once (serverio.net.tlsstream).  What is left is written in
    pieces of WRITE_PIECE (a short tail joined to the last piece), the
    deadline moved after each.

    Cancellation handling: a cancelled write leaves the output cut; the
    connection ends (the writer cancels it).
    """
    view = whole
    if fd >= 0:
        try:
            n = os.write(fd, whole)
        except BlockingIOError:
            n = 0
        except OSError as exc:
            raise trio.BrokenResourceError from exc
        if n == len(whole):
            return True
        view = whole[n:]
    elif isinstance(stream, TLSStream):
        # All of it is OpenSSL's now: what the socket did not take is
        # flushed under the deadline.
        return stream.send_nowait(whole) or await stream.flush_within(stall)
    with view, trio.CancelScope(deadline=trio.current_time() + stall) as scope:
        while view:
            n = len(view) if len(view) < 2 * WRITE_PIECE else WRITE_PIECE
            await stream.send_all(view[:n])
            view = view[n:]
            scope.deadline = trio.current_time() + stall
    return not scope.cancelled_caught


class Writer:
    """A connection's output: the queue of bodies, the framing, the socket
    writes.  ``closed`` (h2 said GOAWAY: send no more frames) and
    ``reading`` (more input may come) are set by the connection loop, as
    the columns of its phase (:data:`serverio.net.h2phase.FLAGS`);
    ``streams`` is the loop's table of streams in flight.

    Cancellation handling: :meth:`run` runs until the loop stops reading
    and every stream is done, or the write deadline or a broken socket
    cancels ``cancel`` (the connection's nursery); :meth:`await_body` is
    cancelled with its stream's scope (a reset) and holds nothing.
    """

    __slots__ = (
        "_busy",
        "_conn",
        "_credit",
        "_moved",
        "_pread",
        "_scatter",
        "_spare",
        "_stats",
        "_timeout",
        "allowance",
        "broken",
        "closed",
        "frames",
        "out",
        "reading",
        "sending",
        "space",
        "streams",
        "wake",
    )

    def __init__(
        self,
        conn: h2.connection.H2Connection,
        frames: Frames,
        streams: dict[int, Stream],
        allowance: WindowAllowance,
        stats: Stats,
        write_timeout: float,
        *,
        pread: Pread,
        preadv: Preadv | None,
    ) -> None:
        self._conn = conn
        self.frames = frames
        self.streams = streams
        self.allowance = allowance
        self._stats = stats
        self._timeout = write_timeout
        self._pread = pread  # serverio.fs.reads.pread (tests count the reads)
        # Scatter reads straight into the output buffer where the platform
        # has them (Linux, the BSDs) and the frame path writes into h2's
        # buffer; elsewhere a body round is read, then framed (a copy).
        self._scatter = preadv if frames.direct else None
        self.sending: dict[int, Stream] = {}  # body sources, round-robin order
        # Pending output, and the buffer last sent (reused: serverio.net.outbuf).
        self.out = OutBuffer()
        self._spare = OutBuffer()
        self.wake = trio.Event()  # something to send
        self.space = trio.Event()  # the output fell below OUT_HIGH
        # When the connection's bodies last made SEND_PIECE bytes of
        # progress (or began to wait), and the bytes since: see await_body.
        self._moved = 0.0
        self._credit = 0
        self.closed = False
        self.reading = True
        self.broken = False  # the socket failed
        self._busy = False  # counted in _busy

    # ------------------------------------------------------------ queueing

    def pull(self) -> None:
        """Move h2's pending output into ours and wake the writer."""
        data = self._conn.data_to_send()
        if data:
            self.out.add(data)
            self.wake.set()

    def kick(self) -> None:
        self.wake.set()

    def reset(self, st: Stream, code: ErrorCodes, failed: bool = False) -> None:
        """RST_STREAM ``code`` (once; not after the connection's GOAWAY):
        nothing more is sent on ``st`` and its task is woken."""
        if st.state in STOPPED or self.closed:
            return
        st.stop(failed)
        self.sending.pop(st.sid, None)
        if st.progress is not None:
            st.progress.set()
        try:
            self._conn.reset_stream(st.sid, code)
        except h2.exceptions.ProtocolError:
            pass  # already closed on h2's side
        self.pull()

    def cancel(self, st: Stream) -> None:
        """``st`` is over (reset by the client, or it can never finish):
        out of the queue, its task cancelled."""
        st.stop()
        self.sending.pop(st.sid, None)
        st.scope.cancel()

    def interim(self, st: Stream, status: int, fields: Sequence[tuple[bytes, bytes]]) -> None:
        """An interim (1xx) response on ``st`` before its final one: a
        HEADERS frame without END_STREAM (RFC 9113 §8.1: a response may
        start with any number of 1xx field blocks).  Nothing when the
        stream is stopped or the connection is going away."""
        if st.state in STOPPED or self.closed:
            return
        try:
            self.frames.headers(st.sid, response_fields(status, fields), False)
        except h2.exceptions.ProtocolError:
            return  # the stream was closed meanwhile
        self.pull()

    async def respond(self, st: Stream, plan: Plan, source: Body) -> bool:
        """HEADERS now; the body through the queue, with the stream's own
        deadline (:meth:`await_body`).  True when the connection's bodies
        stalled as a whole (the caller ends the connection).

        A complete response before the request ended asks the client to
        stop sending it: RST_STREAM NO_ERROR (RFC 9113 §8.1), the stream
        then CLOSED (complete, and logged)."""
        if st.state in STOPPED or self.closed:
            return False
        body = [p for p in source.pieces if len(p)]
        total = sum(map(len, body))
        st.status = plan.status
        try:
            self.frames.headers(st.sid, response_fields(plan.status, plan.headers), total == 0)
        except h2.exceptions.ProtocolError:
            return False  # the stream was closed meanwhile
        if total:
            self.send_body(st, source, body, total)
            if st.state == SENDING and await self.await_body(st):
                return True
            if st.state != COMPLETE:
                return False  # reset or failed
        else:
            self.pull()
            st.to(COMPLETE)
        if not st.ended:
            self.reset(st, ErrorCodes.NO_ERROR)
        return False

    def respond_now(self, st: Stream, plan: Plan, data: bytes) -> bool:
        """HEADERS and ``data`` (what :meth:`at_once` gave: one DATA frame
        at most, within the windows) now, without a wait: the stream goes
        from ANSWERING to COMPLETE.  For a stream the client ended (no
        request content left to refuse).  False: h2 had closed the stream
        (a reset in the same read), nothing was sent."""
        frames = self.frames
        sid = st.sid
        st.status = plan.status
        try:
            frames.headers(sid, response_fields(plan.status, plan.headers), not data)
        except h2.exceptions.ProtocolError:
            return False
        if data:
            # The HEADERS just went on an open stream: DATA may follow.
            frames.data(sid, data, True)
            st.pieces = [data]  # what the access log counts
            self.allowance.earn(len(data))
            if self.sending:
                # Other bodies wait: this one's end is the connection's
                # progress, as a round's end is (with none waiting, the
                # next body queued starts the clock: queue).
                self._moved = trio.current_time()
                self._credit = 0
        st.to(COMPLETE)
        self.pull()
        return True

    def send_body(
        self, st: Stream, source: Body, pieces: list[bytes | FileSpan], total: int
    ) -> None:
        """Queue ``st``'s body (its HEADERS are out); frame it at once when
        it fits in one frame and the output is under its budget."""
        st.to(SENDING)
        st.fd = source.fd
        self.queue(st, pieces, total)

    def queue(self, st: Stream, pieces: list[bytes | FileSpan], total: int) -> None:
        """Queue ``pieces`` (``total`` bytes) of ``st``, which is SENDING
        (a whole body, or one chunk of a streamed one: serverio.net.h2stream)."""
        st.pieces = pieces
        st.index = st.offset = 0
        st.remaining = total
        sending = self.sending
        if not sending:
            # The connection's bodies begin to wait: its no-progress
            # clock starts now (see await_body).
            self._moved = trio.current_time()
            self._credit = 0
        sending[st.sid] = st
        self.pull()
        if total <= FRAME_CHUNK and len(self.out) < self.budget():
            self._frame(st)
            self.pull()
        else:
            self.wake.set()

    async def await_body(self, st: Stream) -> bool:
        """Wait while the body of ``st`` is sent; no progress on it for
        ``write_timeout`` resets it (CANCEL).  True when, then, the
        connection's bodies as a whole made none either: the client reads
        nothing (or keeps every window shut), as an HTTP/1.1 client past
        its write deadline, and the caller ends the connection.

        Progress is SEND_PIECE (16 KiB) of DATA, or the end of the body,
        as an HTTP/1.1 write on a stream moves its deadline per SEND_PIECE
        written: a client that opens its windows a byte at a time (a
        trickle) makes none and cannot keep a stream, or its descriptor,
        past the deadline.  Framing notes the time (``moved``) and wakes
        this task only at the end, so a large body costs no task switch per
        frame."""
        timeout = self._timeout
        st.moved = trio.current_time()
        st.progress = done = trio.Event()
        # A produced body's chunk is done when it leaves the queue (the
        # stream stays SENDING for the next one).
        while st.state == SENDING and (not st.streaming or st.sid in self.sending):
            deadline = st.moved + timeout
            now = trio.current_time()
            if now >= deadline:
                self._stats.timeouts.write += 1
                self.reset(st, ErrorCodes.CANCEL)
                return now - self._moved >= timeout
            with trio.move_on_at(deadline):
                await done.wait()
        return False

    # ------------------------------------------------------------ framing

    def _frame(self, st: Stream, room: int = ROUND_QUANTUM) -> int:
        """One round's DATA for ``st``: at most ROUND_QUANTUM bytes of one
        body piece (one positional read), and no more than ``room`` (the
        budget left; at least one frame's worth), in frames; returns the
        bytes sent."""
        try:
            window = self.frames.window(st.sid)
        except h2.exceptions.ProtocolError:
            self.sending.pop(st.sid, None)
            return 0
        n = min(window, ROUND_QUANTUM)
        if room < ROUND_QUANTUM + ROUND_QUANTUM // FRAME_CHUNK * FRAME_HEAD.size:
            # The body bytes that fit in ``room`` with their frame heads;
            # not less than a frame (or the body's rest) unless nothing is
            # pending, so a full budget waits for the write, not for tiny
            # frames.
            fits = room - -(-room // (FRAME_CHUNK + FRAME_HEAD.size)) * FRAME_HEAD.size
            if fits < min(FRAME_CHUNK, st.remaining, n) and self.out:
                return 0
            n = min(n, max(fits, 1))
        if n <= 0:
            if not self.reading:
                # The client's side reached EOF: no WINDOW_UPDATE can come
                # any more, so the body can never finish; its descriptor
                # goes now, not at the write deadline.
                self.cancel(st)
            return 0
        piece = st.pieces[st.index]
        if isinstance(piece, FileSpan):
            n = min(n, piece.length - st.offset)
            if self._scatter is not None:
                got = self._read_framed(st, piece, n)
                if got is not None:
                    return got
            try:
                data = self._pread(st.fd, n, piece.offset + st.offset)
            except OSError:
                # EIO mid-body: the head is out, the only honest answer is
                # to cut this stream.
                self._stats.responses.read_errors += 1
                return self._fail(st)
            if not data:
                self._stats.responses.truncated += 1  # the file shrank under us
                return self._fail(st)
        else:
            data = piece[st.offset : st.offset + n]
        end = self._advance(st, len(data), len(piece))
        self.frames.data(st.sid, data, end and not st.streaming)
        self.allowance.earn(len(data))
        self._after_round(st, end)
        return len(data)

    def _advance(self, st: Stream, n: int, piece_len: int) -> bool:
        """Move ``st`` past ``n`` body bytes of its current piece (of
        ``piece_len`` bytes); True when that was the end of its body."""
        st.offset += n
        if st.offset == piece_len:
            st.index += 1
            st.offset = 0
        st.remaining -= n
        st.credit += n
        self._credit += n
        return st.remaining == 0

    def _after_round(self, st: Stream, end: bool) -> None:
        """A round of ``st`` is framed: done (out of the queue, its task
        woken) or progress noted for its write deadline."""
        now = trio.current_time()
        if end:
            if not st.streaming:
                st.to(COMPLETE)
            else:
                st.moved = now  # a chunk out: progress; the next one is asked for
                st.credit = 0
            del self.sending[st.sid]
            if st.progress is not None:
                st.progress.set()
        elif st.credit >= SEND_PIECE:
            # Progress is SEND_PIECE bytes, as for HTTP/1.1 on a stream
            # (net/emit.py): a window opened a byte at a time does not move
            # the write deadline.
            st.moved = now
            st.credit = 0
        if end or self._credit >= SEND_PIECE:
            self._moved = now
            self._credit = 0

    def _read_framed(self, st: Stream, piece: FileSpan, n: int) -> int | None:
        """``n`` bytes of ``piece`` read by one scatter read straight into
        the output buffer between their DATA frame heads: the body is
        copied once (by the kernel), where read-then-frame copies it
        several times.  The windows and state machines are driven as the
        frame path's ``data`` drives them.  ``None`` (nothing written) when
        the read came up short or failed: the caller reads again the plain
        way, which reports the error or the truncation."""
        scatter = self._scatter
        assert scatter is not None
        conn = self._conn
        if self.frames.pending():
            self.out.add(conn.data_to_send())  # what h2 queued goes out first
        size = min(conn.max_outbound_frame_size, FRAME_CHUNK)
        # The last frame carries END_STREAM if this round, read whole, ends the body.
        last = _END_STREAM if st.remaining == n else 0
        at = piece.offset + st.offset
        if not _scatter_framed(self.out, scatter, st.fd, at, n, size, st.sid, last):
            return None
        end = self._advance(st, n, piece.length)
        self.frames.account(st.sid, n, end)
        self.allowance.earn(n)
        self._after_round(st, end)
        return n

    def _fail(self, st: Stream) -> int:
        self.reset(st, ErrorCodes.INTERNAL_ERROR, failed=True)
        if st.progress is not None:
            st.progress.set()
        return 0

    def budget(self) -> int:
        """The pending bytes at which filling stops: this writer's share of
        OUT_TOTAL among the busy writers, within OUT_FLOOR..OUT_BUDGET."""
        share = OUT_TOTAL // (_busy[0] or 1)
        return OUT_BUDGET if share >= OUT_BUDGET else max(share, OUT_FLOOR)

    def _set_busy(self, busy: bool) -> None:
        if busy != self._busy:
            self._busy = busy
            _busy[0] += 1 if busy else -1

    def _fill(self) -> None:
        """DATA frames round-robin until the budget's bytes are pending."""
        sending = self.sending
        conn = self._conn
        out = self.out
        if sending:
            self._set_busy(True)
        budget = self.budget()
        while sending and len(out) < budget:
            moved = False
            for st in list(sending.values()):
                room = budget - len(out)
                if room <= 0:
                    break
                if st.sid not in sending:
                    continue
                if self._frame(st, room):
                    moved = True
                    out.add(conn.data_to_send())
                    if st.sid in sending:  # to the back of the queue
                        del sending[st.sid]
                        sending[st.sid] = st
            if not moved:
                break

    # ------------------------------------------------------------ writing

    async def run(self, stream: trio.abc.Stream, cancel: trio.CancelScope) -> None:
        """The writer task: the only one that writes ``stream``."""
        responses = self._stats.responses  # bound once per connection
        timeout = self._timeout
        # A plain socket is written through its descriptor (see _write).
        sock = stream.socket if isinstance(stream, trio.SocketStream) else None
        fd = sock.fileno() if sock is not None and SOCKET_FD_IO else -1
        wrote = False  # the last turn wrote, and may not have yielded
        try:
            while True:
                self.pull()
                if not self.closed:
                    self._fill()
                if not self.out:
                    if not self.sending:
                        self._set_busy(False)
                    if not self.reading and not self.streams:
                        return
                    if not self.streams:
                        # Nothing in flight: an idle connection keeps
                        # little output memory.
                        self.out.shrink(IDLE_KEEP)
                        self._spare.shrink(IDLE_KEEP)
                    self.wake = trio.Event()
                    wrote = False
                    await self.wake.wait()
                    continue
                if wrote:
                    # Writes in a row (a long body to a fast reader): the
                    # other tasks run between two, as a write the socket
                    # takes at once does not yield.
                    await trio.lowlevel.checkpoint()
                # Take the buffer whole (what is queued meanwhile goes into
                # the other one) and write it (_write: at once, or under
                # the write deadline).
                data = self.out
                self.out = self._spare
                with data.view() as whole:
                    late = not await _write(stream, fd, whole, timeout)
                if late:
                    self._stats.timeouts.write += 1
                    cancel.cancel()
                    return
                responses.bytes_sent += len(data)
                data.clear()
                self._spare = data
                self.space.set()
                wrote = True
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.broken = True
            cancel.cancel()
        finally:
            self._set_busy(False)  # however the task ends (a cancel too)


def at_once(writer: Writer, st: Stream, source: Body) -> bytes | None:
    """The body of a response :meth:`Writer.respond_now` can send whole at
    once (b"" for none): at most one frame of bytes in one piece (no
    file span: no descriptor to keep), within the stream's and the
    connection's windows, with the output under its budget (so a
    client that reads nothing still holds at most one such answer
    over it).  None: the stream's task sends it with :meth:`Writer.respond`."""
    if st.state in STOPPED or writer.closed or len(writer.out) >= writer.budget():
        return None
    data = b""
    for piece in source.pieces:
        if len(piece):
            if data or type(piece) is not bytes:
                return None
            data = piece
    n = len(data)
    if n > FRAME_CHUNK:
        return None
    if n:
        try:
            if writer.frames.window(st.sid) < n:
                return None
        except h2.exceptions.ProtocolError:
            return None  # closed meanwhile: the task's respond finds it so
    return data


def _scatter_framed(
    out: OutBuffer, scatter: Preadv, fd: int, offset: int, n: int, size: int, sid: int, last: int
) -> bool:
    """``n`` bytes of ``fd`` at ``offset`` read by one scatter read into
    ``out`` between the heads of DATA frames of ``size`` bytes on ``sid``
    (``last``: the last frame's flags); False, nothing added, when the
    read came up short or failed."""
    frames = -(-n // size)
    start = out.reserve(frames * FRAME_HEAD.size + n)
    buf = out.data
    # The frame heads go in first; a short read drops them.
    head = FRAME_HEAD.size
    pack = FRAME_HEAD.pack_into
    view = memoryview(buf)
    parts = []
    pos = start
    for i in range(0, n, size):
        k = n - i if n - i < size else size
        pack(buf, pos, k << 8 | _DATA, last if i + k >= n else 0, sid)
        parts.append(view[pos + head : pos + head + k])
        pos += head + k
    try:
        got = scatter(fd, parts, offset)
    except OSError:
        got = -1
    finally:
        # The slices go with the list; the buffer may grow again only
        # once no view of it is left.
        del parts
        view.release()
    if got != n:
        out.truncate(start)
        return False
    return True
