"""The live-reload event stream over HTTP/1.1: :func:`serve_events`.

An answer whose plan has ``stream`` set (live reload's
``/.serverio/events``, from the reserved paths) is not a response of known
length: the connection hands it here, and it runs until the client goes
away, a write fails or a drain cancels it.  It is the connection's last
answer (its head says ``Connection: close``).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

import trio

from ..http.core import Plan
from ..wire.h1 import head_bytes
from .emit import Abort, Emitter
from .env import ConnectionEnv
from .h1head import RECV_SIZE
from .h1state import STREAM, Lifetime

__all__ = ["serve_events"]


async def serve_events(
    env: ConnectionEnv,
    emitter: Emitter,
    life: Lifetime,
    owner: object,
    plan: Plan,
    log: Callable[..., None],
    scoped: Callable[[trio.CancelScope | None], None],
) -> bool:
    """A long-lived streaming body (the live-reload event stream);
    False when ``--watch-max-streams`` streams are open already (nothing
    was sent: the caller answers 503).  ``owner``: the connection (what
    holds the slot); ``log(size, **kind)``: its access-log line;
    ``scoped``: told the stream's cancel scope while it runs (None after),
    which a drain cancels.

    The stream takes a slot of the live-reload budget
    (:class:`~serverio.concurrency.broadcast.StreamSlots`) for as long
    as it runs: the connection then no longer counts toward
    ``--max-connections`` (the server's admission leaves slot holders
    out), so open event streams never shut ordinary clients out.
    The head goes out with ``Connection: close`` (the body ends when the
    connection does), then the broadcaster writes through
    :meth:`Emitter.send` (its write deadline applies: a client that
    stops reading is closed ``write_timeout`` after a write stalls, the
    heartbeat comment every 15 s being the write that notices) until
    the client goes away, a write fails, or graceful shutdown cancels
    the stream scope.  No read deadline runs meanwhile: the stream is
    exempt from the keep-alive timeout; the watcher task below only
    notices the client leaving.

    Cancellation handling: the slot is given back in every case.
    """
    live = env.handler.hooks.events
    head = head_bytes(plan.status, plan.headers, close=True, keep_alive_10=False)
    if live is None or not plan.send_body:
        await emitter.send(head)
        log(0)  # a HEAD: an ordinary response, logged and counted
        return True
    if not live.slots.take(owner):
        return False
    sent = -len(head)  # the log's size is the body's, as for any response

    async def send(data: bytes) -> None:
        nonlocal sent
        await emitter.send(data)
        sent += len(data)

    try:
        life.lift()
        life.to(STREAM)
        await _stream(env, emitter.stream, functools.partial(live.serve_client, send, head), scoped)
    finally:
        live.slots.give(owner)
        log(max(0, sent), counted=False)  # logged as it ends, however
    env.stats.responses.completed += 1
    return True


async def _stream(
    env: ConnectionEnv,
    stream: trio.abc.Stream,
    serve: Callable[[], Awaitable[None]],
    scoped: Callable[[trio.CancelScope | None], None],
) -> None:
    """Run ``serve`` (the broadcaster's writes) until it ends, the client
    goes away (a watcher task reads the stream: an event stream's client
    has nothing to say) or a drain cancels the scope ``scoped`` is told.
    A write that fails (the deadline: Abort; a reset) is re-raised bare."""

    async def watch(scope: trio.CancelScope) -> None:
        try:
            while await stream.receive_some(RECV_SIZE):
                pass  # an event stream's client has nothing to say
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()

    failure: Abort | trio.BrokenResourceError | trio.ClosedResourceError | None = None
    with trio.CancelScope() as scope:
        scoped(scope)
        if env.draining:
            scope.cancel()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, nursery.cancel_scope)
            # A write that fails ends the stream; it leaves the nursery
            # bare, not wrapped in an exception group, so that the
            # connection closes quietly as after any failed write.
            try:
                await serve()
            except (Abort, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                failure = exc
                nursery.cancel_scope.cancel()
    scoped(None)
    if failure is not None:
        raise failure
