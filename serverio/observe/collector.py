"""The cyclic garbage collector: its pauses measured, and kept short.

CPython frees almost everything by reference counting; the cyclic
collector exists for reference cycles, and while it runs nothing else in
the process does.  A collection of generation *n* traverses every object
tracked in generations 0..n, so a full (generation 2) collection costs in
proportion to everything long-lived: a warm-file cache of 100,000 entries
made full collections of hundreds of milliseconds (issue 47: a p99 of
463-489 ms that ``gc.disable()`` brought back to 16-19 ms).

Three parts:

* :class:`Collector` measures every collection through ``gc.callbacks``
  (Python 3.3+: called with ``"start"`` and ``"stop"`` around each
  collection, ``info["generation"]`` the oldest generation collected):
  the count, the total and the longest pause and the objects found
  unreachable, per generation, and the objects frozen.  ``/metrics``
  exports them (``serverio_gc_*``).  Cost: two ``perf_counter`` calls per
  collection, nothing per request.
* :meth:`Collector.freeze` moves every object the collector tracks into
  the permanent generation (``gc.freeze``, Python 3.7+), which no
  collection traverses: done once after start-up (the modules, the
  configuration, the site's rules: nothing of it is garbage) and again
  when the warm-file caches (bytes and metadata) reach a new high-water
  mark of entries (:meth:`Collector.grown`), so that their long-lived
  entries stop being traversed by every full collection.  A full cache
  that replaces entries (more files than it holds) is not frozen again:
  what full collections traverse then is at most the caches' entries
  made since the last freeze.  Entries that change (the per-second
  answer a warm entry memoises, a replaced entry) are new objects that
  reach the oldest generation anyway, so :meth:`Collector.tick` also
  freezes once per period (a tenth of a second; a second while idle,
  serverio.ops.run.watch_collector) after objects were promoted there
  (a collection of generation 1 ran), as long as no collection of
  generation 1 or 2 has ever found cyclic garbage in this process: a
  serving process finds none (tested per request; 2,767 collections of a
  100,000-file run found 0), and should one appear, only the growth rule
  freezes from then on, and its freezes are few (the young generations
  are still collected past their bound).  Frozen objects are still freed by
  reference counting when dropped (an evicted cache entry is); only
  cyclic garbage present at the moment of a freeze would stay, and so
  would a cycle among the objects of a connection open at that moment,
  once the connection ends: which is why the warm request path and a
  connection's objects (HTTP/1.1 and HTTP/2, plain and TLS, the proxy's)
  are kept free of reference cycles (tests/test_cyclic_garbage.py,
  tests/test_connection_garbage.py), and why freezes after growth are
  few: each needs the cache a eighth larger than at the last one, so a
  cache of N entries is frozen at most about
  ``log(N / 1024) / log(9 / 8)`` times over the life of the process.
* The tick also collects the young generations when they hold more than
  :data:`YOUNG_MAX` objects.  CPython collects generation 0 when
  allocations of tracked objects outnumber their deallocations by its
  threshold (700), and any deallocation counts, an old object's too: a
  process that frees an old object for each new one it keeps never gets
  there.  A full warm-file cache does exactly that (each admitted file's
  entry, facts and metadata made, an older file's freed): 58,793 objects
  piled up in generation 0 of a 100,000-file run under the default
  settings before a collection of 27 ms, and collections of generation 1
  of up to 33 ms; with the bound, the longest of either was 3.3 ms.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "COLLECTOR",
    "GENERATIONS",
    "YOUNG_IDLE",
    "YOUNG_MAX",
    "Collector",
    "gc_snapshot",
    "merge_gc",
    "young_objects",
]

GENERATIONS = 3

# A freeze after cache growth needs at least this many entries more than
# at the last freeze, and at least an eighth more (geometric: few freezes).
_GROWTH_MIN = 1024
_GROWTH_DIVISOR = 8
# Objects in the young generations above which a tick collects them
# (Collector.tick): about what CPython's own schedule leaves there at its
# collections of generation 1 under 64 connections of warm requests.
YOUNG_MAX = 4096
# Objects in the young generations below which a process that collected
# nothing since the last tick is idle (an idle server holds about 60):
# its next tick comes after the idle period (serverio.ops.run.watch_collector).
YOUNG_IDLE = 256


def young_objects() -> int:
    """The objects tracked in generations 0 and 1 now (what a collection of
    generation 1 traverses): O(their number), a list made and dropped."""
    return len(gc.get_objects(0)) + len(gc.get_objects(1))


class Collector:
    """Collection counts and pauses by generation (``gc.callbacks``), and
    the freeze policy (module docstring).  One per process: :data:`COLLECTOR`."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._started = 0.0
        self.collections = [0] * GENERATIONS
        self.pause_seconds = [0.0] * GENERATIONS
        self.pause_longest = [0.0] * GENERATIONS
        self.collected = [0] * GENERATIONS
        self.uncollectable = [0] * GENERATIONS
        self.freezes = 0
        self._frozen_at = 0  # cache entries at the last freeze after growth
        self._promoted_at = 0  # collections of generations 1-2 at the last freeze
        self.young = 0  # objects in generations 0-1 at the last tick

    @property
    def installed(self) -> bool:
        return self._callback in gc.callbacks

    def install(self) -> None:
        """Start measuring (idempotent)."""
        if not self.installed:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        while self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        # Runs inside the collector, in whichever thread triggered it (the
        # GIL is held; collections do not nest): plain stores only.
        if phase == "start":
            self._started = self._clock()
            return
        pause = self._clock() - self._started
        gen = info.get("generation", 0)
        if not 0 <= gen < GENERATIONS:
            return
        self.collections[gen] += 1
        self.pause_seconds[gen] += pause
        if pause > self.pause_longest[gen]:
            self.pause_longest[gen] = pause
        self.collected[gen] += info.get("collected", 0)
        self.uncollectable[gen] += info.get("uncollectable", 0)

    def freeze(self) -> None:
        """Move everything tracked now to the permanent generation."""
        gc.freeze()
        self.freezes += 1
        self._promoted_at = self.collections[1] + self.collections[2]

    def after_start(self) -> None:
        """Start-up is done: collect what start-up left (once, before any
        request waits), then freeze the rest."""
        gc.collect()
        self.freeze()

    def grown(self, entries: int) -> bool:
        """The warm-file cache holds ``entries`` now: freeze if that is a new
        high-water mark by an eighth (and :data:`_GROWTH_MIN`) since the
        last freeze after growth.  Only the young generations are collected
        first (bounded: they hold what was allocated since the last
        collection of generation 1).  Returns whether it froze."""
        step = max(_GROWTH_MIN, self._frozen_at // _GROWTH_DIVISOR)
        if entries < self._frozen_at + step:
            return False
        self._frozen_at = entries
        gc.collect(1)
        self.freeze()
        return True

    def tick(self, entries: int) -> bool:
        """Once per period (``watch_collector``): freeze after growth
        (:meth:`grown`), or else after promotion into the oldest
        generation while no cyclic garbage was ever found there or in
        generation 1 (module docstring).  The young generations are
        collected first, so nothing young is frozen unexamined; and
        collected whenever they hold more than :data:`YOUNG_MAX` objects,
        a freeze or not (the stalled count: module docstring).  Returns
        whether it froze."""
        if self.grown(entries):
            return True
        self.young = young_objects()
        collected = self.young > YOUNG_MAX
        if collected:
            gc.collect(1)
        if self.collections[1] + self.collections[2] == self._promoted_at:
            return False  # nothing reached generation 2 since the last freeze
        if self.collected[1] or self.collected[2]:
            return False  # cycles outlive young collections here: growth only
        if not collected:
            gc.collect(1)
        self.freeze()
        return True

    def snapshot(self) -> dict[str, Any]:
        """The figures as a JSON-able dict (see :func:`merge_gc`)."""
        return {
            "collections": list(self.collections),
            "pause_seconds": list(self.pause_seconds),
            "pause_longest_seconds": list(self.pause_longest),
            "collected": list(self.collected),
            "uncollectable": list(self.uncollectable),
            "freezes": self.freezes,
            "frozen_objects": gc.get_freeze_count(),
        }


COLLECTOR = Collector()


def gc_snapshot() -> dict[str, Any]:
    """This process's collector figures (:data:`COLLECTOR`)."""
    return COLLECTOR.snapshot()


def merge_gc(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two processes' figures together: counts and totals add up, the
    longest pause is the longer one."""
    if a is None or b is None:
        return b if a is None else a
    out: dict[str, Any] = {}
    for key, value in a.items():
        if isinstance(value, list):
            other = b.get(key, [0] * GENERATIONS)
            if key == "pause_longest_seconds":
                out[key] = [max(x, y) for x, y in zip(value, other, strict=True)]
            else:
                out[key] = [x + y for x, y in zip(value, other, strict=True)]
        else:
            out[key] = value + b.get(key, 0)
    return out
