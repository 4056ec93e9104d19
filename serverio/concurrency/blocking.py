"""Bounded blocking work: the only place serverio calls ``trio.to_thread``.

A path under the root may live on NFS, SMB, FUSE or a dying disk, where
``open()`` or ``stat()`` can block for seconds or forever, and nothing can
interrupt a thread stuck in a syscall.  So we do not pretend a timeout frees a
thread.  Instead (docs/cancellation.md):

* every pool is explicit: a :class:`trio.CapacityLimiter` of ``workers``
  tokens plus a wait queue of at most ``queue`` callers — trio's default
  limiter is never used, so a stall here cannot starve anything else;
* when workers are busy and the queue is full, :func:`run_blocking` raises
  :class:`PoolSaturated` (HTTP 503) at once instead of waiting;
* a cancelled caller returns at once (``abandon_on_cancel=True``), its thread
  runs on, and its token stays held until the thread really finishes (trio
  releases it then), so the pool never admits more threads than ``workers``;
* whatever an abandoned thread produces is handed to a ``late_close``
  callback exactly once, through an explicit hand-off object settled under
  a lock (the caller or the thread owns the result, never both) — not left
  to the garbage collector;
* one hop is one hand-over to a thread and one wake-up of the event loop
  (trio's report of the thread's return): no callback of serverio's own
  crosses back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import trio

from ..errors import HTTPError

__all__ = ["Pool", "PoolSaturated", "PoolStats", "run_blocking"]

log = logging.getLogger("serverio")

T = TypeVar("T")

_WARN_FRACTION = 0.8
_WARN_INTERVAL = 10.0  # seconds between "pool nearly full" warnings


class PoolSaturated(HTTPError):
    """Every worker is busy and the wait queue is full: answer 503 now."""

    def __init__(self, pool: str) -> None:
        super().__init__(503, f"{pool} pool saturated", close=True)
        self.pool = pool


@dataclass(slots=True)
class PoolStats:
    submitted: int = 0  # calls that got a worker or a queue slot
    rejected: int = 0  # calls refused at once (PoolSaturated)
    completed: int = 0  # calls whose result reached their caller
    abandoned: int = 0  # callers cancelled while their thread was running
    cancelled_waiting: int = 0  # callers cancelled while queued (no thread ran)
    late_closed: int = 0  # results of abandoned threads disposed of
    peak_queued: int = 0
    peak_running: int = 0


class Pool:
    """A bounded worker pool: ``workers`` threads at most, ``queue`` waiters at most.

    ``workers == 0`` means inline: the function runs on the event loop (the
    warm-local fast path), and nothing is ever rejected.

    Cancellation handling: the pool itself owns no tasks; it is an object
    owned by the server's nursery scope.  A thread abandoned by its caller
    keeps its token until it ends; :meth:`wait_idle` lets shutdown wait for
    such threads up to a deadline and report how many are still stuck.
    """

    def __init__(self, name: str, workers: int, queue: int) -> None:
        if workers < 0 or queue < 0 or (workers == 0 and queue > 0):
            raise ValueError("invalid pool policy")
        self.name = name
        self.workers = workers
        self.queue = queue
        self.limiter = trio.CapacityLimiter(workers) if workers else None
        # The name a worker thread carries while it runs a call of this pool
        # (``top -H``, ``py-spy``): made once, not per hop (trio would
        # format one from the function and task names on every call).
        self.thread_name = f"serverio {name} pool"
        self.stats = PoolStats()
        self._last_warning = -_WARN_INTERVAL

    @property
    def inline(self) -> bool:
        return self.limiter is None

    @property
    def running(self) -> int:
        """Threads holding a token (including abandoned ones still stuck)."""
        return int(self.limiter.borrowed_tokens) if self.limiter else 0

    @property
    def queued(self) -> int:
        return self.limiter.statistics().tasks_waiting if self.limiter else 0

    def _admit(self) -> None:
        limiter = self.limiter
        assert limiter is not None
        running = int(limiter.borrowed_tokens)
        queued = limiter.statistics().tasks_waiting if running >= self.workers else 0
        if running >= self.workers and queued >= self.queue:
            self.stats.rejected += 1
            raise PoolSaturated(self.name)
        self.stats.submitted += 1
        # Occupancy once this call is admitted: it takes a worker if one is
        # free, else a queue slot.
        if running >= self.workers:
            queued += 1
            self.stats.peak_queued = max(self.stats.peak_queued, queued)
        else:
            running += 1
        self.stats.peak_running = max(self.stats.peak_running, running)
        load = (running + queued) / (self.workers + self.queue)
        if load >= _WARN_FRACTION:
            now = trio.current_time()
            if now - self._last_warning >= _WARN_INTERVAL:
                self._last_warning = now
                log.warning(
                    "%s pool at %d%% of capacity (%d running, %d queued; workers=%d queue=%d)",
                    self.name,
                    int(load * 100),
                    running,
                    queued,
                    self.workers,
                    self.queue,
                )

    async def wait_idle(self, deadline: float) -> int:
        """Wait until no thread holds a token, or until ``deadline`` (trio time).

        Returns how many threads are still running (stuck in a syscall) at
        the end; those are abandoned: they hold no trio task, and their late
        results are closed by the hand-off if they ever finish.

        Cancellation handling: cancelling the caller just stops the waiting.
        """
        with trio.move_on_at(deadline):
            # trio releases tokens inside its own thread-completion callback,
            # which offers no hook to wait on; poll, bounded by the deadline.
            while self.running:  # noqa: ASYNC110
                await trio.sleep(0.01)
        return self.running


class _Handoff(Generic[T]):
    """Result slot + abandoned flag, settled under one lock.

    The worker thread offers its result when ``fn`` returns
    (:meth:`offer`); the caller, only if it leaves by an exception
    (cancelled), abandons the call (:meth:`abandon`).  Whichever comes
    second learns that the result is its own to close: the caller if the
    result was stored before it gave up, else the thread.  No callback
    crosses to the trio thread for this: trio's own report of the thread's
    return is the only wake-up of the hop.
    """

    __slots__ = ("abandoned", "error", "has_value", "lock", "started", "value")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.abandoned = False
        self.has_value = False
        self.started = False
        self.value: T | None = None
        self.error: BaseException | None = None

    def offer(self, value: T | None, error: BaseException | None) -> bool:
        """Worker thread: store the result; False if the caller is gone (the
        thread then owns the result)."""
        with self.lock:
            if self.abandoned:
                return False
            self.value, self.error, self.has_value = value, error, True
            return True

    def abandon(self) -> bool:
        """Trio thread, the caller leaving by an exception: True if a result
        was stored already (the caller then owns it, and takes it out),
        else mark the call abandoned (the thread will close what it makes)."""
        with self.lock:
            if self.has_value:
                self.has_value = False
                return True
            self.abandoned = True
            return False


async def run_blocking(
    pool: Pool,
    fn: Callable[..., T],
    *args: object,
    late_close: Callable[[T], object] | None = None,
) -> T:
    """Run ``fn(*args)`` in ``pool`` and return its result.

    Raises :class:`PoolSaturated` at once when the pool's workers are busy
    and its queue is full.  Inline pools (0 workers) call ``fn`` directly.

    One hop costs one hand-over to a worker thread and one wake-up of the
    event loop (trio's report of the thread's return): the result travels
    in a hand-off object, not in a callback of its own.

    Cancellation handling: if the caller is cancelled while queued, it
    leaves the queue and ``fn`` never runs.  If it is cancelled while ``fn``
    runs, it returns at once (``Cancelled`` propagates) and the thread is
    abandoned: it keeps running, keeps its capacity token until it finishes,
    and its eventual result is passed to ``late_close`` exactly once, in
    that thread (an exception raised by ``fn`` is dropped).  Nothing is
    ever closed twice: the hand-off's lock decides whether the caller (the
    result was stored before it was cancelled) or the thread owns it.
    """
    if pool.limiter is None:
        return fn(*args)
    pool._admit()
    handoff: _Handoff[T] = _Handoff()
    stats = pool.stats

    def work() -> None:
        handoff.started = True  # a plain bool store; read only after the fact
        value: T | None = None
        error: BaseException | None = None
        try:
            value = fn(*args)
        except BaseException as exc:
            error = exc
        if not handoff.offer(value, error):
            # The caller is gone: dispose here, in this thread (close(2) is
            # blocking work too); a racy += only blurs a counter.
            stats.late_closed += 1
            if error is None and late_close is not None:
                late_close(value)  # type: ignore[arg-type]

    try:
        await trio.to_thread.run_sync(
            work, limiter=pool.limiter, abandon_on_cancel=True, thread_name=pool.thread_name
        )
    except BaseException:
        if handoff.abandon():
            # The thread stored a result, then we were cancelled before
            # resuming: we own it, and nobody else will close it.
            stats.late_closed += 1
            if handoff.error is None and late_close is not None:
                late_close(handoff.value)  # type: ignore[arg-type]
        if handoff.started:
            stats.abandoned += 1
        else:
            stats.cancelled_waiting += 1
        raise
    stats.completed += 1
    if handoff.error is not None:
        raise handoff.error
    return handoff.value  # type: ignore[return-value]
