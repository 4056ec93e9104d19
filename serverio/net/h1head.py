"""The HTTP/1.1 head reader: request heads off one connection, under deadlines.

One job: reading the client.  The next request head
(:meth:`HeadReader.next_head`), with the keep-alive and head deadlines, a
common one with its request facts (built by the parser as it reads it,
:func:`serverio.wire.h1facts.request_facts`, named here too); and, while
an answer is prepared, the watch that reads ahead (pipelined bytes into
the parser) and notices a client that leaves
(:meth:`HeadReader.wait_watching`).  One parser per connection
(:class:`serverio.wire.fasthead.HeadParser`), which goes on to the next
request cycle with the bytes past a head (pipelining): the common head is
read by a strict fast path that gives exactly h11's result or defers to
h11, which decides everything else, every rejection included.  Each read's
bytes go to it in one call (:meth:`HeadParser.feed`), so that reading a
request is one step into the codec layer.

Three ways to a head, cheapest first; which one is the reader's business:

* buffered: bytes left over from the previous request hold it (pipelining),
  or one non-blocking read on the raw descriptor brings it whole
  (:meth:`HeadReader.head_now`);
* waited for: under the lifetime scope's deadline (keep-alive until the
  first byte, then the head deadline), reading the raw descriptor after
  ``wait_readable`` or the stream's ``receive_some``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import h11
import trio

from ..config import Config
from ..pipeline.handler import ClientGone, R, run_watched
from ..wire.fasthead import FastRequest, HeadParser
from ..wire.h1facts import request_facts
from .emit import Emitter
from .h1state import HEAD, IDLE, Lifetime
from .order import ServeOrder

__all__ = ["RECV_SIZE", "Head", "HeadReader", "request_facts"]

RECV_SIZE = 16384

# A request head: from the fast path (serverio.wire.fasthead) or from h11.
Head = h11.Request | FastRequest


def as_head(event: object) -> Head | None:
    """The event if it is a request head (else the connection closes)."""
    t = type(event)
    if t is FastRequest or t is h11.Request:
        return event  # type: ignore[return-value]  # checked just above
    return None


def _read_now(fd: int) -> bytes | None:
    """One non-blocking read of the socket ``fd``: None when nothing is
    there yet; a reset is :class:`trio.BrokenResourceError`."""
    try:
        return os.read(fd, RECV_SIZE)
    except BlockingIOError:
        return None
    except OSError as exc:
        raise trio.BrokenResourceError from exc


class HeadReader:
    """Reads one connection's request heads (its task only).

    ``parser`` is the connection's head parser: a fast head comes out of it
    with its request facts (one call per read, :meth:`HeadParser.feed`);
    its ``fed`` counts the bytes held for the next head (its head-size
    bound).  ``peer_eof``: the client half-closed, nothing more can arrive.
    """

    __slots__ = ("_conn", "_emitter", "_life", "_order", "_turn", "parser", "peer_eof")

    def __init__(
        self,
        cfg: Config,
        emitter: Emitter,
        life: Lifetime,
        order: ServeOrder | None,
        tls: bool = False,
    ) -> None:
        # The limits and deadlines read per request, bound once (not a hop
        # through Config per read).
        self._conn = cfg.conn
        self._emitter = emitter
        self._life = life
        self._order = order
        self._turn = order.new_turn() if order is not None else 0
        self.parser = HeadParser(cfg.conn.max_head_size, b"", cfg, tls)
        self.peer_eof = False

    def resume(self, leftover: bytes) -> None:
        """After a request body read to its end: the next head starts from
        the bytes read past it (a pipelined request)."""
        self.parser.restart(leftover)

    def feed(self, data: bytes | bytearray) -> None:
        """Bytes read for the parser by someone else (the disconnect
        watcher, while a response is prepared)."""
        self.parser.receive_data(data)

    @property
    def leftover(self) -> bytes:
        """What the parser holds past the current head."""
        return self.parser.trailing_data[0]

    def head_now(self) -> object:
        """The next event from what is buffered plus at most one
        non-blocking read (plain sockets): a head or another h11 event,
        h11.NEED_DATA (not all here yet), or None at EOF.  Protocol errors
        raise the HTTPError to answer."""
        parser = self.parser
        event: object = parser.next_head() if parser.fed else h11.NEED_DATA
        if event is h11.NEED_DATA:
            try:
                data = os.read(self._emitter.fd, RECV_SIZE)
            except BlockingIOError:
                return event
            except OSError as exc:
                raise trio.BrokenResourceError from exc
            if not data:
                return None
            event = parser.feed(data)
        return event

    async def first_head(self, closing: bool) -> object:
        """A new plain connection's first head if it is here at once (one
        non-blocking read): the head, ``h11.NEED_DATA`` (wait for it under
        the head deadline) or None (close: EOF, or ``closing``, a drain
        that cuts fresh connections).

        A new connection's first request needs no yield for fairness: its
        task has only just been scheduled, and what it runs before its next
        checkpoint is bounded by this one request.  Cancellation (abort, a
        cut connection nursery) is still honoured here, without the
        scheduling round of a full checkpoint."""
        if closing:
            return None
        got = self.head_now()
        if got is h11.NEED_DATA:
            return got
        await trio.lowlevel.checkpoint_if_cancelled()
        t = type(got)  # (as_head, inline)
        return got if t is FastRequest or t is h11.Request else None

    async def next_head(self, idle: bool, draining: bool, cut_fresh: bool) -> Head | None:
        """The next request head, or None when the connection should close
        quietly (EOF, keep-alive timeout, drain).  ``idle``: a request was
        answered on this connection before."""
        if draining and (idle or cut_fresh):
            return None
        if self._emitter.fd >= 0 and self.parser.fed and idle:
            # Fast path, when the head is probably here already: bytes left
            # over from the previous request (pipelining).  No cancel scope,
            # no trio socket machinery; one checkpoint keeps the loop fair to
            # other connections.  After a response to a client that waits
            # for it, the next request is not here yet: a read now would
            # only cost an EAGAIN syscall, so _wait lets the other
            # connections run first and reads then.  (A new connection's
            # first read is the connection's unscoped step; when it did not
            # bring the whole head, the head deadline starts at once, as
            # below.)
            event = self.head_now()
            if event is None:
                return None
            if event is not h11.NEED_DATA:
                self._life.lift()
                await trio.lowlevel.checkpoint()
                t = type(event)  # (as_head, inline)
                return event if t is FastRequest or t is h11.Request else None  # type: ignore[return-value]
        return await self._wait(idle)

    async def _wait(self, idle: bool) -> Head | None:
        """Slow path of :meth:`next_head`: wait under the deadlines.

        Between requests the keep-alive deadline runs until the first byte;
        if that read does not complete the head, the head deadline starts
        (a complete head in one read, the common case, skips that step).
        """
        conn = self._conn
        life = self._life
        parser = self.parser
        keepalive = idle and parser.fed == 0
        if keepalive:
            life.arm(IDLE, conn.keepalive_timeout)
        else:
            life.arm(HEAD, conn.head_timeout)
        emitter = self._emitter
        fd = emitter.fd
        event: object = parser.next_head() if parser.fed else h11.NEED_DATA
        if event is h11.NEED_DATA and self.peer_eof:
            return None  # half-closed: no more requests can arrive
        order = self._order
        # Between requests, let the other ready connections run first and
        # only then read: a busy server comes back to a connection about one
        # round later, and by then its next request is usually here, so no
        # epoll registration (trio's one-shot epoll_ctl) and no wake-up is
        # needed; only a read that finds nothing waits.  With many
        # connections open the turn is taken in order (serverio.net.order),
        # otherwise one checkpoint.
        # Over TLS the same steps, with the stream's own non-blocking read
        # (serverio.net.tlsstream: it decrypts what OpenSSL holds first).
        tls = emitter.tls
        direct = fd >= 0 or tls is not None
        turn_first = keepalive and direct and order is not None and order.engaged
        tried = turn_first or not keepalive or not direct
        while event is h11.NEED_DATA:
            if direct:
                if turn_first:
                    turn_first = False
                    assert order is not None
                    self._turn = await order.wait_turn(self._turn)
                elif not tried:
                    tried = True
                    await trio.lowlevel.checkpoint()
                elif tls is not None:
                    await tls.wait_readable()
                else:
                    # Wait, then read once: trio's receive_some would first
                    # try a recv that we know returns EAGAIN.
                    await trio.lowlevel.wait_readable(fd)
                got = _read_now(fd) if tls is None else tls.receive_nowait(RECV_SIZE)
                if got is None:
                    continue  # not here yet (or a spurious wake-up): wait for it
                data: bytes | bytearray = got
            else:
                data = await emitter.stream.receive_some(RECV_SIZE)
                if data and keepalive and order is not None and order.engaged:
                    # The next request is arriving: take our turn among the
                    # connections that became ready with us.
                    self._turn = await order.wait_turn(self._turn)
            if not data:
                return None
            # One call reads the head, and a common one's facts with it
            # (serverio.wire.fasthead.HeadParser.feed).
            event = parser.feed(data)
            if keepalive and event is h11.NEED_DATA:
                # First bytes of the next request, but not the whole head:
                # the head deadline starts now.
                life.arm(HEAD, conn.head_timeout)
            keepalive = False
        # The phase moves to BUSY when the connection begins the exchange
        # (ConnectionTask._answer: nothing awaits in between).
        t = type(event)  # (as_head, inline: no call back into this layer)
        return event if t is FastRequest or t is h11.Request else None  # type: ignore[return-value]

    async def wait_watching(self, run: Callable[[], Awaitable[R]], watch_late: bool) -> R | None:
        """Await a step of the pipeline (``run()``) while watching the client.

        Returns None when the client went away meanwhile (the step was
        cancelled, or its result closed here).

        One helper task (the watcher) reads the socket while this task
        waits, so a client that hangs up is noticed now, not when the work
        is done (``watch_late``, the proxy: only around the waits the step
        wraps in :func:`~serverio.pipeline.handler.watching_client`).
        Pipelined bytes go to the parser's buffer; past one head's worth
        the watcher stops reading (backpressure).  It never writes.

        Only a reset (or a closed stream) means the client is gone.  EOF is
        a half-close: ``nc -N``, socat and scripted HTTP/1.0 clients send
        the request, then ``shutdown(SHUT_WR)``, and still read the answer
        (RFC 9112 §9.6 lets the client close its sending side first).  The
        watcher then stops reading and marks the connection, which closes
        after what it already received has been answered.

        Cancellation handling: when the client goes away the watcher
        cancels the nursery, which cancels the step (the handler closes
        what it held; an abandoned pool hop is late-closed); a result that
        arrived anyway is closed here.  Exceptions from the step (such as
        PoolSaturated) are re-raised only if the client is still there.
        What the step was handed is its caller's to close when this
        returns None or raises (the driver closes its need).
        """
        self._life.lift()
        result: R | None = None
        error: Exception | None = None
        gone = False
        limit = self._conn.max_head_size
        stream = self._emitter.stream
        reader = self

        async def until_gone() -> None:
            # Returns when the client is gone; never, after its EOF.
            nonlocal gone
            try:
                while reader.parser.fed <= limit and not reader.peer_eof:
                    data = await stream.receive_some(RECV_SIZE)
                    if not data:
                        reader.peer_eof = True
                        break
                    reader.feed(data)
                await trio.sleep_forever()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            gone = True

        async def watch(scope: trio.CancelScope) -> None:
            await until_gone()
            scope.cancel()

        if watch_late:
            result, error = await self._run_late(run, watch, until_gone)
        else:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, nursery.cancel_scope)
                try:
                    result = await run()
                except Exception as exc:  # PoolSaturated and friends: re-raised below
                    error = exc
                nursery.cancel_scope.cancel()
        if gone:
            if result is not None:
                result.close()
            return None
        if error is not None:
            raise error
        return result

    async def _run_late(
        self,
        run: Callable[[], Awaitable[R]],
        watch: Callable[[trio.CancelScope], Awaitable[None]],
        until_gone: Callable[[], Awaitable[None]],
    ) -> tuple[R | None, Exception | None]:
        """``run()`` (``watch_late``) with no cancel scope of its own;
        the watcher runs, in a nursery of its own, only around the waits
        the step wraps in :func:`~serverio.pipeline.handler.watching_client`
        (a nursery's exit is a scheduling round, a cancel scope's entry and
        exit ~5 us: an exchange that never waits for long pays for
        neither).  When the client goes, the watcher cancels that nursery
        and the block raises :class:`~serverio.pipeline.handler.ClientGone`,
        which ends the step and is caught here.  A wait that something
        else ends by cancelling it (a proxy slot handed over) watches in
        its own task instead, with ``until_gone``
        (:func:`~serverio.pipeline.handler.client_gone`: no helper task).

        Cancellation handling: as :meth:`wait_watching`; an exception of
        the wrapped wait leaves its nursery bare (re-raised after it), so
        the step sees what it would have without the watch."""
        watching = [False]
        block = functools.partial(_watched, watching, watch)
        here = functools.partial(_gone_here, watching, until_gone)
        try:
            return await run_watched(run, block, here), None
        except ClientGone:
            return None, None  # the watcher saw the client go (wait_watching's ``gone``)
        except Exception as exc:  # PoolSaturated and friends: the caller's
            return None, exc


async def _gone_here(watching: list[bool], until_gone: Callable[[], Awaitable[None]]) -> None:
    """The watch of :meth:`HeadReader._run_late` run in the waiting task
    itself (the pipeline's ``client_gone``): returns when the client has
    gone; sleeps until cancelled inside a watched block (its watcher
    reads the socket: two readers would collide) or after the client's
    EOF."""
    if watching[0]:
        await trio.sleep_forever()
    watching[0] = True
    try:
        await until_gone()
    finally:
        watching[0] = False


# The watcher's nursery around one wrapped wait (HeadReader._run_late);
# decorated once here, bound per request with functools.partial (cheap).
@asynccontextmanager
async def _watched(
    watching: list[bool], watch: Callable[[trio.CancelScope], Awaitable[None]]
) -> AsyncIterator[None]:
    if watching[0]:
        yield  # nested: already watched
        return
    watching[0] = True
    failure: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            gone = nursery.cancel_scope
            nursery.start_soon(watch, gone)
            try:
                yield
            except BaseException as exc:  # re-raised bare, below
                failure = exc
            # The block is over: stop the watcher.  Whether it cancelled
            # the block first is what it says by cancelling: a scope
            # already cancelled means the client went.
            if gone.cancel_called:
                failure = ClientGone()
            else:
                gone.cancel()
    finally:
        watching[0] = False
    if failure is not None:
        raise failure
