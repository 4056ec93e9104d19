"""A byte-bounded LRU cache whose misses are computed once (single-flight).

Used for on-the-fly compression and for representation digests: one class,
two instances (:mod:`serverio.pipeline.content`).

* **Bounded**: entries are weighed by ``sizeof``; inserting evicts the least
  recently used ones until the total fits ``capacity``.  A value larger than
  the whole capacity is handed to its waiters but not stored.
* **Single-flight**: concurrent misses for one key start one job; the others
  wait for its outcome.
* **Jobs belong to the cache**, not to a request: they run in a nursery the
  server owns (:meth:`SingleFlightCache.running`, opened by
  :meth:`serverio.Server.serve`).  A waiter that is cancelled (its client went
  away) just stops waiting; the job goes on for the others, and a job whose
  waiters are all gone still finishes and fills the cache.

The cache is touched only from the trio thread, so it needs no lock.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

import trio

from .blocking import PoolSaturated

__all__ = ["FlightStats", "SingleFlightCache"]

log = logging.getLogger("serverio")

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
Job = Callable[[], Awaitable[V | None]]


@dataclass(slots=True)
class FlightStats:
    hits: int = 0  # answered from the cache
    misses: int = 0  # get_or_run calls that found no value (started + joined + unavailable)
    started: int = 0  # jobs started (one per miss storm)
    joined: int = 0  # misses that waited on a job another request started
    stored: int = 0  # results put in the cache
    evicted: int = 0  # entries dropped to make room (LRU)
    oversized: int = 0  # results larger than the whole cache: not stored
    saturated: int = 0  # jobs refused by a full work pool (waiters fall back)
    failed: int = 0  # jobs that produced nothing (file changed, error)
    unavailable: int = 0  # misses while no job nursery was running (shutdown)


class _Flight(Generic[V]):
    __slots__ = ("done", "value", "waiters")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.value: V | None = None
        self.waiters = 0


class SingleFlightCache(Generic[K, V]):
    """See the module docstring.

    Cancellation handling: a cancelled :meth:`get_or_run` caller leaves the
    wait at once and never affects the job.  Jobs are cancelled only when the
    nursery of :meth:`running` is (server shutdown); their waiters then get
    ``None``.  A job's blocking work runs through
    :func:`~serverio.run_blocking`, so a cancelled job abandons its thread,
    which keeps its work-pool token until it ends; whatever resource the
    thread holds (a duplicated descriptor) is the thread's to close.
    """

    def __init__(self, name: str, capacity: int, sizeof: Callable[[V], int]) -> None:
        self.name = name
        self.capacity = capacity
        self.sizeof = sizeof
        self.size = 0
        self.stats = FlightStats()
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._flights: dict[K, _Flight[V]] = {}
        self._nursery: trio.Nursery | None = None

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def in_flight(self) -> int:
        return len(self._flights)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Own a nursery for jobs until the block exits (then cancel them).

        Re-entrant: if jobs already have a nursery, this does nothing.
        """
        if self._nursery is not None:
            yield
            return
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                yield
            finally:
                self._nursery = None
                nursery.cancel_scope.cancel()

    def get(self, key: K) -> V | None:
        """A cached value (and mark it recently used), or None."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
            self.stats.hits += 1
        return value

    def __contains__(self, key: object) -> bool:
        """Is a value cached for ``key``?  (No hit counted, no LRU touch.)"""
        return key in self._entries

    def clear(self) -> None:
        """Forget every stored value (jobs in flight go on and store theirs)."""
        self._entries.clear()
        self.size = 0

    def put(self, key: K, value: V) -> None:
        size = self.sizeof(value)
        if size > self.capacity:
            self.stats.oversized += 1
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self.size -= self.sizeof(old)
        self._entries[key] = value
        self.size += size
        self.stats.stored += 1
        while self.size > self.capacity:
            _, dropped = self._entries.popitem(last=False)
            self.size -= self.sizeof(dropped)
            self.stats.evicted += 1

    def start(self, key: K, make_job: Callable[[], Job[V]]) -> None:
        """Start the job for ``key`` unless it is cached or in flight; do not
        wait for it (its result is stored like :meth:`get_or_run`'s).
        ``make_job`` as there.  Without a nursery (shutting down): nothing."""
        if key in self._entries or key in self._flights or self._nursery is None:
            return
        job = make_job()
        flight: _Flight[V] = _Flight()
        self._flights[key] = flight
        self.stats.started += 1
        self._nursery.start_soon(self._run, key, flight, job)

    async def get_or_run(self, key: K, make_job: Callable[[], Job[V]]) -> V | None:
        """The value for ``key``: cached, or from the one job computing it.

        ``make_job`` is called only when no job for ``key`` is in flight,
        synchronously, in the caller's task: that is where the job takes
        hold of what it needs (a duplicated descriptor) while the caller's
        resources are certainly still open.  The job it returns runs in the
        cache's nursery, and must release what it holds in a ``finally``
        (trio runs a new task up to its first checkpoint even if it is
        cancelled, so that ``finally`` is always reached).  Its result
        (unless None) is stored.  Returns None when the job produced
        nothing: pool saturated, file changed, or no nursery (shutting
        down).  The caller then falls back.

        Cancellation handling: cancelling the caller only ends its wait; the
        job (started by it or not) keeps running for the other waiters and
        stores its result.  If ``make_job`` raises, nothing is registered and
        the exception propagates to this caller alone.
        """
        value = self.get(key)
        if value is not None:
            return value
        self.stats.misses += 1
        flight = self._flights.get(key)
        if flight is None:
            if self._nursery is None:
                self.stats.unavailable += 1
                return None
            # make_job first: if it raises, no flight exists for others to
            # wait on forever.
            job = make_job()
            flight = _Flight()
            self._flights[key] = flight
            self.stats.started += 1
            self._nursery.start_soon(self._run, key, flight, job)
        else:
            self.stats.joined += 1
        flight.waiters += 1
        try:
            await flight.done.wait()
        finally:
            flight.waiters -= 1
        return flight.value

    async def _run(self, key: K, flight: _Flight[V], job: Job[V]) -> None:
        value: V | None = None
        try:
            value = await job()
            if value is None:
                self.stats.failed += 1
        except PoolSaturated:
            self.stats.saturated += 1
        except Exception:
            # A job is nobody's request: an error here must not take the
            # server's job nursery (and every waiter) down.  Logged with its
            # traceback, counted, and the waiters fall back.
            log.exception("%s job failed", self.name)
            self.stats.failed += 1
        finally:
            # Also on Cancelled (shutdown): publish, wake the waiters, then
            # let the cancellation propagate.
            del self._flights[key]
            if value is not None:
                flight.value = value
                self.put(key, value)
            flight.done.set()
