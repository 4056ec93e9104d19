"""Debouncing change events and broadcasting them to many slow readers.

* :class:`Debouncer` (pure: times are arguments) turns the burst of
  filesystem events of one editor save (rename to a backup, create, write,
  close, delete the backup: five events in a few milliseconds) into one
  batch: a batch is due ``quiet`` seconds after its last event, or
  ``max_delay`` after its first while events keep coming.  A path that
  appeared and disappeared inside one batch (an editor's temporary file)
  is dropped.
* :class:`Broadcast` hands each message to every subscriber without ever
  waiting for one: each has a bounded queue, and a subscriber whose queue
  is full loses its queued messages and is told to reload instead — a
  slow client costs O(limit) memory, never O(events).
* :class:`StreamSlots` bounds the long-lived readers themselves (the
  live-reload event streams, ``--watch-max-streams``): a stream takes a
  slot before its first byte, or is refused; the connections holding
  slots are counted apart, so the server's admission can leave them out
  of ``--max-connections``.

Touched only from the trio thread.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

import trio

__all__ = [
    "CREATED",
    "GONE",
    "MODIFIED",
    "Broadcast",
    "Debouncer",
    "StreamSlots",
    "Subscriber",
]

# Kinds of raw change events.
CREATED, MODIFIED, GONE = "created", "modified", "gone"


class Debouncer:
    """See the module docstring.  ``take`` returns ``{path: kind}`` with
    kind ``"changed"`` or ``"gone"``."""

    __slots__ = ("_first", "_last", "_pending", "max_delay", "quiet")

    def __init__(self, quiet: float, max_delay: float) -> None:
        self.quiet = quiet
        self.max_delay = max_delay
        self._pending: dict[str, tuple[str, str]] = {}  # path -> (first kind, last kind)
        self._first = math.inf
        self._last = math.inf

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, changes: Iterable[tuple[str, str]], now: float) -> None:
        for path, kind in changes:
            if not self._pending:
                self._first = now
            old = self._pending.get(path)
            self._pending[path] = (old[0] if old else kind, kind)
            self._last = now

    def deadline(self) -> float:
        """When the pending batch is due (inf: nothing pending)."""
        if not self._pending:
            return math.inf
        return min(self._last + self.quiet, self._first + self.max_delay)

    def take(self, now: float) -> dict[str, str] | None:
        """The batch, if due at ``now``; else None (and it stays pending)."""
        if not self._pending or now < self.deadline():
            return None
        out: dict[str, str] = {}
        for path, (first, last) in self._pending.items():
            if last == GONE:
                if first == CREATED:
                    continue  # appeared and went within the batch: transient
                out[path] = "gone"
            else:
                out[path] = "changed"
        self._pending.clear()
        self._first = self._last = math.inf
        return out


class Subscriber:
    """One reader's bounded queue."""

    __slots__ = ("_ready", "limit", "overflowed", "queue")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.queue: deque[bytes] = deque()
        self.overflowed = False
        self._ready = trio.Event()


class Broadcast:
    """Fan-out of byte messages to subscribers (see the module docstring).

    ``overflow`` is the message a subscriber gets instead of the ones it
    lost.
    """

    def __init__(self, limit: int, overflow: bytes) -> None:
        self.limit = limit
        self.overflow = overflow
        self.subscribers: set[Subscriber] = set()
        self.published = 0
        self.overflows = 0

    def subscribe(self) -> Subscriber:
        sub = Subscriber(self.limit)
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    def publish(self, messages: list[bytes]) -> None:
        """Queue ``messages`` for everyone; never waits."""
        self.published += 1
        for sub in self.subscribers:
            if sub.overflowed:
                continue  # a reload is already due: nothing else matters
            if len(sub.queue) + len(messages) > sub.limit:
                sub.queue.clear()
                sub.overflowed = True
                self.overflows += 1
            else:
                sub.queue.extend(messages)
            sub._ready.set()

    async def next(self, sub: Subscriber, idle: float) -> bytes:
        """The subscriber's pending bytes, joined; ``b""`` after ``idle``
        seconds with nothing to send.

        Cancellation handling: cancelled while waiting, nothing is lost
        (the queue is only emptied when this returns).
        """
        if not sub.queue and not sub.overflowed:
            sub._ready = trio.Event()
            with trio.move_on_after(idle):
                await sub._ready.wait()
        if sub.overflowed:
            sub.overflowed = False
            sub.queue.clear()
            return self.overflow
        out = b"".join(sub.queue)
        sub.queue.clear()
        return out


class StreamSlots:
    """At most ``limit`` streams open at once, and who holds them.

    A holder is a connection: an HTTP/1.1 connection holds at most one
    stream, an HTTP/2 one may hold several (each takes a slot), and
    ``len()`` is the number of distinct holders, i.e. the connections that
    left the connection budget for this one (the server admits by
    ``connections - len(slots) < --max-connections``).  So the open
    connections never exceed ``--max-connections`` plus ``limit``.
    ``refused`` counts the streams turned away (503).
    """

    __slots__ = ("_held", "limit", "open", "refused")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0  # streams holding a slot
        self.refused = 0
        self._held: dict[object, int] = {}  # holder -> streams it holds

    def __len__(self) -> int:
        return len(self._held)

    def take(self, holder: object) -> bool:
        """A slot for one more stream of ``holder``; False: all are taken."""
        if self.open >= self.limit:
            self.refused += 1
            return False
        self.open += 1
        self._held[holder] = self._held.get(holder, 0) + 1
        return True

    def give(self, holder: object) -> None:
        """Return one slot :meth:`take` gave ``holder``."""
        n = self._held[holder] - 1
        self.open -= 1
        if n:
            self._held[holder] = n
        else:
            del self._held[holder]
