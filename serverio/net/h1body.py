"""The HTTP/1.1 request body reader (RFC 9112 §6, §7; RFC 9110 §10.1.1).

:class:`H1Body` reads the content the head's :class:`~serverio.wire.bodyframe.Framing`
announces (chosen once by :func:`~serverio.wire.bodyframe.request_framing`)
from two sources: the bytes the head reader already holds past the head
(``buffered``: a client may send head and body in one segment) and then a
``receive_some``-like callable.  What it reads past the body's end (the next
pipelined request) is :attr:`H1Body.leftover` once the body is DONE; the
connection hands it to its next head parser.

Wired by :class:`serverio.net.connection.ConnectionTask`: after a head that
declares content it builds ``H1Body(request_framing(headers, version),
policy, stream.receive_some, trailing, send_continue=emitter.send)`` and
hands it to the request steps; after the response, a body that is not DONE
gets ``await body.drain()`` (phase DRAIN) and the connection closes unless
that returns True; the next head starts from ``body.leftover``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable

import trio

from ..errors import HTTPError
from ..wire.bodyframe import ChunkedDecoder, Framing, FramingKind
from .reqbody import BodyMalformed, BodyPolicy, BodyState, ClientGone, RequestBody

__all__ = ["CONTINUE", "RECV_SIZE", "H1Body"]

# RFC 9110 §15.2.1 / RFC 9112 §4: the interim response, whole.
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# The most one receive asks for (the connection's own RECV_SIZE).
RECV_SIZE = 64 * 1024


class H1Body(RequestBody):
    """One HTTP/1.1 request's content, pulled by the handler.

    ``receive_some(max_bytes)`` returns ``b""`` at EOF, like
    :meth:`trio.abc.ReceiveStream.receive_some`; EOF or a broken stream
    before the framing's end is :class:`ClientGone`.  ``send_continue`` is
    called with :data:`CONTINUE` once, on the first pull, when the request
    asked for it (RFC 9110 §10.1.1) and has content; it is never called
    when the handler answers without asking for the body.

    Cancellation handling: see :class:`RequestBody`; a cancelled
    ``receive_some`` or ``send_continue`` leaves the body FAILED.
    """

    __slots__ = ("_buf", "_continue_sent", "_decoder", "_framing", "_pending", "_recv", "_send")

    def __init__(
        self,
        framing: Framing,
        policy: BodyPolicy,
        receive_some: Callable[[int], Awaitable[bytes | bytearray]],
        buffered: bytes = b"",
        send_continue: Callable[[bytes], Awaitable[object]] | None = None,
    ) -> None:
        super().__init__(policy, framing.length)
        self._framing = framing
        self._recv = receive_some
        self._send = send_continue
        self._continue_sent = False
        self._buf = bytes(buffered)  # received bytes not yet consumed (LENGTH / past the end)
        self._pending: deque[bytes] = deque()  # decoded chunk-data not yet handed out
        self._decoder = ChunkedDecoder() if framing.kind is FramingKind.CHUNKED else None
        if framing.empty:
            # Nothing to read: the buffered bytes are the next request's.
            self.state = BodyState.DONE

    @property
    def framing(self) -> Framing:
        return self._framing

    @property
    def continue_sent(self) -> bool:
        """True once ``100 Continue`` went out."""
        return self._continue_sent

    @property
    def leftover(self) -> bytes:
        """The bytes read past the body's end (the next request's); only
        meaningful when the body is DONE (otherwise the connection closes)."""
        if self._decoder is not None:
            return self._decoder.leftover + self._buf if self._decoder.done else b""
        return self._buf

    async def _begin(self) -> None:
        if self._framing.expect_continue and self._send is not None:
            self._continue_sent = True
            await self._send(CONTINUE)

    def _drainable(self, bound: int) -> bool:
        if self._framing.expect_continue and not self._continue_sent:
            # RFC 9110 §10.1.1: the client waits for 100 Continue, or sends
            # the body after its own timeout, or never: the next bytes may
            # be content or the next request.  Guessing is request
            # smuggling, so a final answer without 100 Continue closes.
            return False
        return super()._drainable(bound)

    async def _receive(self) -> bytes:
        try:
            data = await self._recv(RECV_SIZE)
        except trio.BrokenResourceError as exc:
            raise ClientGone("connection broken mid-body") from exc
        if not data:
            raise ClientGone("EOF mid-body")
        return bytes(data)

    async def _pull(self, max_bytes: int) -> bytes | None:
        if self._decoder is None:
            return await self._pull_length(max_bytes)
        return await self._pull_chunked(max_bytes)

    async def _pull_length(self, max_bytes: int) -> bytes | None:
        assert self.declared is not None
        rest = self.declared - self.received
        if rest <= 0:
            return None
        if not self._buf:
            self._buf = await self._receive()
        n = min(rest, max_bytes, len(self._buf))
        chunk, self._buf = self._buf[:n], self._buf[n:]
        return chunk

    async def _pull_chunked(self, max_bytes: int) -> bytes | None:
        decoder = self._decoder
        assert decoder is not None
        while not self._pending:
            if decoder.done:
                return None
            data = self._buf or await self._receive()
            self._buf = b""
            try:
                self._pending.extend(p for p in decoder.feed(data) if p)
            except HTTPError as exc:
                raise BodyMalformed(exc.detail) from None
        piece = self._pending.popleft()
        if len(piece) > max_bytes:
            self._pending.appendleft(piece[max_bytes:])
            piece = piece[:max_bytes]
        return piece
