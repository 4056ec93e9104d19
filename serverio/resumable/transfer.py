"""Resumable uploads: one request's hold on an upload, and its content into it.

:class:`Holding` runs the blocking steps of one :class:`~serverio.resumable.store.Held`
in the uploads' ``write`` pool and guarantees its end: the bytes that
reached the file are fsynced (the offset the next request reads is
durable) and both descriptors are closed, whether the request ends, fails,
or is cancelled (a client gone mid-``PATCH``, shutdown).

:func:`receive` pulls a request's content into the upload in batches of
:data:`BATCH` bytes (one pool hop per batch), never past ``room``.

Cancellation handling: :meth:`Holding.settle` runs in the request's
``finally``; when no pool thread is inside a step it fsyncs and closes in
the pool (shielded, bounded by :data:`SETTLE_SECONDS`); when a thread is
still inside one (its caller was cancelled and abandoned it) that thread
settles as its step ends, so no descriptor is closed under a running
write and none outlives the thread.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar

import trio

from ..concurrency.blocking import Pool, PoolSaturated, run_blocking
from ..errors import HTTPError
from ..pipeline.hooks import WriteContent
from .store import Held

__all__ = ["BATCH", "SETTLE_SECONDS", "Holding", "TooMuch", "receive"]

log = logging.getLogger("serverio")

# A request's received chunks go to the pool this many bytes at a time.
BATCH: Final = 1 << 20
# How long a request waits, shielded, for its upload to be fsynced and closed.
SETTLE_SECONDS: Final = 10.0

T = TypeVar("T")


class TooMuch(HTTPError):
    """More content than the upload's room (its length, --max-upload-size)."""

    def __init__(self) -> None:
        super().__init__(413, "content past the upload's length", close=True)


class Holding:
    """One request's hold on ``held``: its steps, then its settling."""

    __slots__ = ("_busy", "_lock", "_released", "held", "pool")

    def __init__(self, held: Held, pool: Pool) -> None:
        self.held = held
        self.pool = pool
        self._lock = threading.Lock()
        self._busy = False
        self._released = False

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        with self._lock:
            if self._released:
                raise OSError(errno.ECANCELED, "upload released")  # never runs after the end
            self._busy = True
        try:
            return fn(*args)
        finally:
            if self._done():
                _settle(self.held)  # the caller is gone: this thread ends it

    def _done(self) -> bool:
        """The step is over; True when the caller let go meanwhile."""
        with self._lock:
            self._busy = False
            return self._released

    async def step(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the pool (PoolSaturated: 503 upstream)."""
        return await run_blocking(self.pool, self._run, fn, *args)

    async def settle(self) -> None:
        """fsync what reached the file and close (see the module doc)."""
        with self._lock:
            self._released = True
            if self._busy:
                return  # the running thread settles
        held = self.held
        if held.fd < 0:
            held.close()
            return
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + SETTLE_SECONDS
            try:
                await run_blocking(self.pool, _settle, held)
            except PoolSaturated:
                _settle(held)  # an fsync and two closes on the loop: rare


def _settle(held: Held) -> None:
    try:
        if held.fd >= 0:
            held.durable()
    except OSError as exc:
        log.warning("could not fsync a resumable upload: %s", exc)
    finally:
        held.close()


async def receive(holding: Holding, content: WriteContent, room: int) -> int:
    """Append ``content`` to the upload (at most ``room`` bytes: past it
    :class:`TooMuch`, what fit is kept); the bytes appended.

    Cancellation handling: bytes handed to a step are written whether or
    not the caller waits for it; :meth:`Holding.settle` makes them durable.
    """
    batch: list[bytes] = []
    pending = 0
    total = 0
    while True:
        try:
            chunk = await content.next_chunk()
        except BaseException:
            # The client left, was too slow, or a newer request for the
            # upload cancelled this one: what arrived is kept (the draft:
            # "append as much of the patch document as possible"), in one
            # shielded, bounded step.
            if batch:
                with trio.CancelScope(shield=True) as scope:
                    scope.deadline = trio.current_time() + SETTLE_SECONDS
                    try:
                        await holding.step(holding.held.write, batch)
                    except (PoolSaturated, OSError) as exc:
                        log.warning("resumable upload: the last part was not kept: %s", exc)
            raise
        if chunk is None:
            break
        if total + pending + len(chunk) > room:
            cut = room - total - pending
            if cut > 0:
                batch.append(chunk[:cut])
            await holding.step(holding.held.write, batch)
            raise TooMuch
        batch.append(chunk)
        pending += len(chunk)
        if pending >= BATCH:
            await holding.step(holding.held.write, batch)
            total += pending
            batch, pending = [], 0
    if batch:
        await holding.step(holding.held.write, batch)
        total += pending
    return total
