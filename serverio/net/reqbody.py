"""The request-body seam both transports share: what a handler pulls.

A handler that wants a request's content iterates it::

    async for chunk in body:      # bytes, at most policy.chunk_max each
        ...
    body.received                 # bytes handed out so far
    body.declared                 # Content-Length / content-length, or None

and a handler that answers without reading it (a 405 to a POST) asks the
transport to keep the connection with ``await body.drain(limit)``.

:class:`RequestBody` holds everything the protocols share: the state
(:class:`BodyState`), the size limit and the deadlines of a
:class:`BodyPolicy`, the bounded drain.  A protocol supplies ``_begin``
(what happens on the first pull: HTTP/1.1's ``100 Continue``) and ``_pull``
(the next bytes of content): :class:`serverio.net.h1body.H1Body` and
:class:`serverio.net.h2body.H2Body`.

Errors: every failure the client caused is a :class:`BodyError`, an
:class:`~serverio.errors.HTTPError` whose ``status`` is the answer when no
response has started (413, 408, 400), with ``close=True`` for HTTP/1.1 and
an ``h2_code`` for the RST_STREAM that follows it over HTTP/2.
:class:`ClientGone` has no status: the peer went away and nothing can be
answered.

Wired into both transports: :class:`serverio.net.connection.ConnectionTask`
builds an :class:`~serverio.net.h1body.H1Body` for a request head that
declares content, :class:`serverio.net.h2conn.H2Connection` an
:class:`~serverio.net.h2body.H2Body` for a stream whose HEADERS did not end
it; the handler side receives it as a
:class:`serverio.pipeline.handler.Content` (docs/architecture.md, "The
request-body seam").
"""

from __future__ import annotations

import abc
import enum
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import trio
from h2.errors import ErrorCodes

from ..config import Config
from ..errors import ConfigError, HTTPError

# An interim response's sender: status (100-199) and fields; once the final
# response started it is no longer called.
Interim = Callable[[int, Sequence[tuple[bytes, bytes]]], Awaitable[None]]

__all__ = [
    "BodyError",
    "BodyMalformed",
    "BodyPolicy",
    "BodyState",
    "BodyTimeout",
    "BodyTooLarge",
    "ClientGone",
    "Interim",
    "RequestBody",
    "body_policy",
]


class BodyState(enum.Enum):
    """Where a request body is; the only state a body keeps."""

    NOT_STARTED = "not started"  # nobody has asked for a byte yet
    READING = "reading"  # the first pull happened, the end is not read yet
    DONE = "done"  # the whole body is read (the connection may be reused)
    FAILED = "failed"  # refused, cut, timed out, malformed, abandoned, or the client left


@dataclass(frozen=True, slots=True)
class BodyPolicy:
    """Bounds on one request body.

    ``max_size``: bytes of content accepted (RFC 9110 §15.5.14: 413 past it).
    ``idle_timeout``: seconds one pull may wait for the next bytes.
    ``total_timeout``: seconds for the whole body, from the first pull.
    ``drain_max``: bytes an unread body may be read and discarded to keep the
    connection (HTTP/1.1) after an answer that did not need it.
    ``drain_timeout``: seconds such a drain may take (a drain waits for a
    client that may never send; it must not hold a connection long).
    ``chunk_max``: the largest chunk one pull hands out.
    """

    max_size: int = 16 * 1024 * 1024
    idle_timeout: float = 30.0
    total_timeout: float = 300.0
    drain_max: int = 64 * 1024
    drain_timeout: float = 2.0
    chunk_max: int = 64 * 1024

    def __post_init__(self) -> None:
        for name in ("max_size", "drain_max"):
            if getattr(self, name) < 0:
                raise ConfigError(f"body policy: {name} must be >= 0")
        if self.chunk_max < 1:
            raise ConfigError("body policy: chunk_max must be >= 1")
        for name in ("idle_timeout", "total_timeout", "drain_timeout"):
            value = getattr(self, name)
            if not value > 0:  # also refuses NaN
                raise ConfigError(f"body policy: {name} must be > 0 seconds")


def body_policy(cfg: Config) -> BodyPolicy:
    """The server's :class:`BodyPolicy`: ``--max-body-size``,
    ``--body-timeout`` (idle), ``--body-total-timeout``; the drain bounds
    and the chunk size are the policy's defaults.  Built only for a request
    that has content (the GET path never pays for it)."""
    uploads = cfg.uploads
    # With --upload a PUT may carry up to --max-upload-size (the write step
    # enforces it; every other request's content is never read that far).
    limit = cfg.conn.max_body_size
    if uploads.upload:
        limit = max(limit, uploads.max_upload_size)
    return BodyPolicy(
        max_size=limit,
        idle_timeout=cfg.conn.body_timeout,
        total_timeout=cfg.conn.body_total_timeout,
    )


class BodyError(HTTPError):
    """A request body the client got wrong.

    ``status``: the answer when no response has started.  ``close`` is
    always True for HTTP/1.1 (the byte stream is no longer in step).
    ``h2_code``: over HTTP/2, the RST_STREAM error code that ends the
    stream after that answer (or instead of it, when a response had
    already started: then CANCEL for anything but a protocol error).
    """

    status_code: int = 400
    h2_reset: ErrorCodes = ErrorCodes.NO_ERROR

    def __init__(self, detail: str = "") -> None:
        super().__init__(self.status_code, detail, close=True)
        self.h2_code: ErrorCodes = self.h2_reset


class BodyTooLarge(BodyError):
    """413 (RFC 9110 §15.5.14): declared over ``max_size`` (refused before a
    byte is read), or more than that arrived (the stream is cut).  Over
    HTTP/2 the 413 is followed by RST_STREAM NO_ERROR: RFC 9113 §8.1 lets a
    server that has sent a complete response ask the client to stop
    sending "without error"; REFUSED_STREAM would wrongly say that nothing
    was processed (and invite a retry of the same upload)."""

    status_code = 413


class BodyTimeout(BodyError):
    """408 (RFC 9110 §15.5.9): the body's idle or total deadline passed."""

    status_code = 408


class BodyMalformed(BodyError):
    """400: broken framing (HTTP/1.1 chunked), or over HTTP/2 DATA that does
    not add up to the declared content-length: a malformed request, a stream
    error of type PROTOCOL_ERROR (RFC 9113 §8.1.1), never a connection one."""

    status_code = 400
    h2_reset = ErrorCodes.PROTOCOL_ERROR


class ClientGone(trio.BrokenResourceError):
    """The client went away mid-body (EOF or a reset connection, or its
    RST_STREAM).  No status: nothing can be answered; the transport ends
    the connection (HTTP/1.1) or the stream (HTTP/2).  A subclass of
    :class:`trio.BrokenResourceError` because that is what the transports
    already treat as "the peer is gone"."""


class RequestBody(abc.ABC):
    """The content of one request, pulled by the handler.

    Cancellation handling: a pull is a checkpoint.  The idle and total
    deadlines are a ``trio.move_on_at`` scope around each pull; when it
    fires the body is FAILED with :class:`BodyTimeout`.  An outer
    cancellation (the connection's own scope, shutdown) propagates as
    ``trio.Cancelled`` and leaves the body FAILED: bytes may have been read
    that nobody received, so it cannot be drained or reused.
    """

    __slots__ = ("_deadline", "_error", "declared", "interim", "policy", "received", "state")

    def __init__(self, policy: BodyPolicy, declared: int | None) -> None:
        self.policy = policy
        # The transport's "send an interim (1xx) response now" (RFC 9110
        # §15.2), set by the connection that made this body; None where it
        # cannot (an HTTP/1.0 client, RFC 9110 §15.2: no 1xx to it).  The
        # shape of serverio.pipeline.hooks.Interim.
        self.interim: Interim | None = None
        self.declared = declared  # the declared length, when the request gave one
        self.received = 0  # content bytes handed out (or discarded by a drain)
        self.state = BodyState.NOT_STARTED
        self._deadline = math.inf  # the total deadline, set by the first pull
        self._error: BaseException | None = None

    # ------------------------------------------------------ protocol parts

    @abc.abstractmethod
    async def _begin(self) -> None:
        """Run once, on the first pull, after the size check (HTTP/1.1
        sends ``100 Continue`` here)."""

    @abc.abstractmethod
    async def _pull(self, max_bytes: int) -> bytes | None:
        """At most ``max_bytes`` (> 0) of content, never empty; None at the
        end of the body.  Raises :class:`BodyError` or :class:`ClientGone`."""

    def _release(self) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """Called once when the body fails (HTTP/2 hands its window back)."""

    # ------------------------------------------------------ handler side

    def fail(self, error: BaseException) -> BaseException:
        """Mark the body FAILED (first error wins); returns ``error``."""
        if self.state is not BodyState.FAILED:
            self.state = BodyState.FAILED
            self._error = error
            self._release()
        return error

    def abandon(self) -> None:
        """The handler will not read the rest: no more pulls (FAILED unless
        DONE).  HTTP/2 acknowledges what is buffered and what still comes."""
        if self.state is not BodyState.DONE:
            self.fail(ClientGone("request body abandoned by the handler"))

    def refused(self) -> BodyTooLarge | None:
        """The 413 for a declared length over ``max_size``, before a byte
        is read (RFC 9110 §15.5.14); None when the declaration is fine."""
        if self.declared is not None and self.declared > self.policy.max_size:
            return BodyTooLarge(f"declared {self.declared} > {self.policy.max_size}")
        return None

    def __aiter__(self) -> RequestBody:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self.next_chunk()
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def next_chunk(self) -> bytes | None:
        """The next chunk of content (at most ``policy.chunk_max`` bytes),
        or None at the end.  Raises :class:`BodyError`, :class:`ClientGone`."""
        if self.state is BodyState.DONE:
            return None
        if self.state is BodyState.FAILED:
            assert self._error is not None
            raise self._error
        if self.state is BodyState.NOT_STARTED:
            await self._start()
        room = self.policy.max_size - self.received
        # At the limit, ask for one byte: none -> the body ends in time;
        # one -> it is too large (read at most one byte past the limit).
        want = min(self.policy.chunk_max, room) if room > 0 else 1
        idle = trio.current_time() + self.policy.idle_timeout
        try:
            with trio.move_on_at(min(idle, self._deadline)) as scope:
                chunk = await self._pull(want)
        except (HTTPError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise self.fail(exc) from None
        except BaseException as exc:  # Cancelled from outside: unknown bytes are lost
            self.fail(ClientGone("request body read cancelled"))
            raise exc
        if scope.cancelled_caught:
            which = "total" if self._deadline <= idle else "idle"
            raise self.fail(BodyTimeout(f"request body {which} deadline"))
        if chunk is None:
            self.state = BodyState.DONE
            return None
        if room <= 0:
            raise self.fail(BodyTooLarge(f"request body over {self.policy.max_size} bytes"))
        self.received += len(chunk)
        return chunk

    async def _start(self) -> None:
        refused = self.refused()
        if refused is not None:
            raise self.fail(refused)
        self.state = BodyState.READING
        self._deadline = trio.current_time() + self.policy.total_timeout
        try:
            await self._begin()
        except (HTTPError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise self.fail(exc) from None

    def keepable(self) -> bool:
        """Whether the connection may still carry another request after
        this body, as far as is known without reading: DONE, or not FAILED
        and a :meth:`drain` not refused up front (its declared rest within
        ``policy.drain_max``; over HTTP/1.1 no ``100-continue`` left
        unanswered).  The HTTP/1.1 transport sends ``Connection: close``
        when this is False."""
        if self.state is BodyState.DONE:
            return True
        return self.state is not BodyState.FAILED and self._drainable(self.policy.drain_max)

    async def drain(self, limit: int | None = None) -> bool:
        """Read and discard the rest of an unread body, within
        ``min(limit, policy.drain_max)`` bytes and ``policy.drain_timeout``
        seconds.  True: the body is read to its end, the connection can
        carry the next request.  False: it could not be (too large, too
        slow, broken, or the protocol says it must not be read: see
        :meth:`_drainable`); the body is FAILED and the HTTP/1.1 connection
        must close (HTTP/2: the stream is reset with NO_ERROR).

        Cancellation handling: the drain is bounded by its own
        ``move_on_after`` scope; an outer cancellation propagates.
        """
        bound = self.policy.drain_max if limit is None else min(limit, self.policy.drain_max)
        if self.state is BodyState.DONE:
            return True
        if self.state is BodyState.FAILED or not self._drainable(bound):
            self.abandon()
            return False
        start = self.received
        with trio.move_on_after(self.policy.drain_timeout):
            try:
                while (chunk := await self.next_chunk()) is not None:
                    if self.received - start > bound:
                        self.abandon()
                        return False
                    del chunk
            except (HTTPError, trio.BrokenResourceError, trio.ClosedResourceError):
                return False
            return True
        self.abandon()
        return False

    def _drainable(self, bound: int) -> bool:
        """False when a drain is known to fail before reading (the declared
        rest is over ``bound``).  HTTP/1.1 adds its 100-continue rule."""
        return self.declared is None or self.declared - self.received <= bound
