"""The order in which keep-alive connections that became ready together are served.

trio runs the tasks woken in one scheduling batch either in the order they
were woken or in reverse, at random (``trio/_core/_run.py``: "50% chance of
reversing the batch").  With hundreds of busy keep-alive connections every
batch is a whole round of them, so a connection served first in one round
may be served last in the next: its client waits up to two rounds while
another waits almost none.  The mean is fixed by the load (Little's law:
connections / throughput), but the spread doubles the tail.

:class:`ServeOrder` serves such connections least recently served first.
A connection whose next request starts to arrive parks here with its
*turn* (the service clock when it was last let through); one dispatcher
task per server releases the parked connections in turn order, ``chunk``
per scheduling batch.  Only the order inside a chunk is left to trio, so
no ready connection is served twice before every connection that was
ready before it was served once (for ``chunk`` 1 the order is exact).

Parking costs a task switch, and with a handful of connections the spread
is small in absolute terms, so the order is only imposed while at least
``min_connections`` connections are open; below that nothing parks.
"""

from __future__ import annotations

import heapq
from collections.abc import Sized
from typing import Final

import outcome
import trio

__all__ = ["ORDER_CHUNK", "ORDER_MIN_CONNECTIONS", "ServeOrder"]

# Open connections from which the order is imposed: the 64-connection
# workloads never park; at 512 the spread trio's batch order causes is
# two rounds of ~130 ms.
ORDER_MIN_CONNECTIONS: Final = 128
# Connections released per scheduling batch: each batch costs the event
# loop one epoll_wait, so a chunk amortises it; the order inside one chunk
# is trio's (at 512 connections an error of at most 1/16 of a round).
ORDER_CHUNK: Final = 32


class _Parked:
    """A parked task; ``task`` None once it was released or gave up.  Calling
    it is the wait's abort function (one object per wait, not two)."""

    __slots__ = ("task",)

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task: trio.lowlevel.Task | None = task

    def __call__(self, _: object) -> trio.lowlevel.Abort:
        self.task = None  # the dispatcher skips this entry
        return trio.lowlevel.Abort.SUCCEEDED


class ServeOrder:
    """Least-recently-served-first release of ready connections (see the module doc).

    ``connections`` is the server's set of open connections (only its size
    is read).  Nothing parks until :meth:`run` is running.
    """

    def __init__(
        self,
        connections: Sized,
        *,
        min_connections: int = ORDER_MIN_CONNECTIONS,
        chunk: int = ORDER_CHUNK,
    ) -> None:
        self.connections = connections
        self.min_connections = min_connections
        self.chunk = max(1, chunk)
        self.running = False
        self.parked_total = 0  # connections that parked (statistics, tests)
        self._clock = 0  # the service clock: one tick per turn handed out
        self._seq = 0  # heap tie-break (a turn is unique, this is belt and braces)
        self._heap: list[tuple[int, int, _Parked]] = []
        self._sleeping: trio.lowlevel.Task | None = None

    def new_turn(self) -> int:
        """A turn for a connection that has not been served yet: after every
        connection already served (FIFO from its arrival)."""
        turn = self._clock
        self._clock = turn + 1
        return turn

    @property
    def engaged(self) -> bool:
        """Do ready connections park (the dispatcher runs, enough are open)?"""
        return self.running and len(self.connections) >= self.min_connections

    @property
    def waiting(self) -> int:
        return len(self._heap)

    async def wait_turn(self, turn: int) -> int:
        """Park until released in turn order; returns the connection's next turn.

        Cancellation handling: a cancelled wait leaves the queue at once
        (its entry is skipped by the dispatcher); the cancellation
        propagates to the caller.
        """
        parked = _Parked(trio.lowlevel.current_task())
        self._seq += 1
        heapq.heappush(self._heap, (turn, self._seq, parked))
        self.parked_total += 1
        sleeping = self._sleeping
        if sleeping is not None:
            # The dispatcher runs in the next batch: by then every task woken
            # in this one has parked too, and the oldest turn goes first.
            self._sleeping = None
            trio.lowlevel.reschedule(sleeping)
        got = await trio.lowlevel.wait_task_rescheduled(parked)
        assert isinstance(got, int)
        return got

    def _release(self, limit: int) -> int:
        """Reschedule up to ``limit`` parked tasks, oldest turn first."""
        heap = self._heap
        released = 0
        while heap and released < limit:
            _, _, parked = heapq.heappop(heap)
            task = parked.task
            if task is None:
                continue  # cancelled while parked
            parked.task = None
            trio.lowlevel.reschedule(task, outcome.Value(self.new_turn()))
            released += 1
        return released

    async def run(self) -> None:
        """The dispatcher: one per server, in the connection nursery.

        Cancellation handling: when cancelled (the connection nursery is
        being cut) it releases every parked connection, which then meets
        the same cancellation at its next checkpoint.
        """
        self.running = True
        try:
            while True:
                if not self._heap:
                    self._sleeping = trio.lowlevel.current_task()

                    def abort(_: object) -> trio.lowlevel.Abort:
                        self._sleeping = None
                        return trio.lowlevel.Abort.SUCCEEDED

                    await trio.lowlevel.wait_task_rescheduled(abort)
                self._release(self.chunk)
                # The released tasks run in the next batch, and so does this
                # loop: the next chunk runs in the batch after.
                await trio.lowlevel.checkpoint()
        finally:
            self.running = False
            self._sleeping = None
            self._release(len(self._heap))
