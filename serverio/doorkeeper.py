"""Admission on the second ask: TinyLFU's doorkeeper in its simplest form.

A memo or cache that stores everything it is asked for turns over on
every request when its keys are asked for at random among more than it
holds (a site of 100,000 files): each store builds an entry and evicts
another, for no hit.  Stored only when asked for a second time within
about ``span`` keys, a key asked for once in that span costs nothing,
and one asked for again soon is kept one ask later.  Used by the
warm-file caches (serverio.fs.filecache, "Admission when full") and the
memos of pure functions (:class:`AdmittedMemo`: the request-target's,
serverio.http.target, and a file's validator fields, serverio.http.core).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["AdmittedMemo", "Doorkeeper"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Doorkeeper:
    """The keys a memo was asked to store, in two generations of ``span``
    keys each: :meth:`again` says whether a key's hash was seen within
    the last one to two generations, and remembers it.  Each generation
    is a bitmap of 16 bits per key it may hold (one bit per key: a key
    that shares a bit with another in either generation is admitted
    early, at most about one in eight of them: harmless), so it costs 4
    to 8 bytes per key of ``span`` whatever the keys.  Not synchronised:
    the warm-file cache calls its own under its lock; a race between
    threads costs at most a key forgotten (one admission a miss later)."""

    __slots__ = ("_before", "_count", "_now", "span")

    def __init__(self, span: int) -> None:
        self.span = span
        self._count = 0
        self._now = _bitmap(span)
        self._before = _bitmap(0)

    def resize(self, span: int) -> None:
        """Follow a new ``span`` (the cache's entries now).  A generation
        sized for far fewer keys would fill up (one bit per key in a
        bitmap made for a sixteenth of them: most keys asked for once
        admitted, 45-81% of a random walk's for 60,000 asks after a cache
        of 10,922 entries filled, against 21% once sized): when ``span``
        outgrows the current generation's bitmap, both generations are
        dropped and admission starts again with one sized for ``span``
        (a key asked for again then is kept one ask later)."""
        self.span = span
        if 16 * span > self._now[1] + 1:
            self._now, self._before, self._count = _bitmap(span), _bitmap(0), 0

    def again(self, h: int) -> bool:
        """Was the key of hash ``h`` seen recently?  Remembers it if not."""
        bits, mask = self._now
        i = h & mask
        bit = 1 << (i & 7)
        if bits[i >> 3] & bit:
            return True
        old, old_mask = self._before
        j = h & old_mask
        if old[j >> 3] & (1 << (j & 7)):
            return True
        bits[i >> 3] |= bit
        self._count += 1
        if self._count >= self.span:  # a new generation, sized for the span now
            self._before, self._now, self._count = self._now, _bitmap(self.span), 0
        return False


def _bitmap(span: int) -> tuple[bytearray, int]:
    """An empty generation for ``span`` keys: its bits (a power of two, at
    least 16 per key and 1,024 in all) and the mask that indexes them."""
    bits = 1024
    while bits < 16 * span:
        bits *= 2
    return bytearray(bits // 8), bits - 1


class AdmittedMemo(Generic[K, V]):
    """A memo of at most ``max_entries`` keys that stores a key on its
    second :meth:`offer` within about ``max_entries`` others (a
    :class:`Doorkeeper`) and is cleared whole when full: for pure
    functions asked with keys that may be many and random.  ``entries``
    is the dict itself, read directly on a hit (one lookup, no call).
    Thread-safe as dicts are; its doorkeeper's races cost at most a key
    kept one offer later."""

    __slots__ = ("_door", "_max", "entries")

    def __init__(self, max_entries: int) -> None:
        self._max = max_entries
        self._door = Doorkeeper(max_entries)
        self.entries: dict[K, V] = {}

    def clear(self) -> None:
        """Forget every entry and every key offered."""
        self.entries.clear()
        self._door = Doorkeeper(self._max)

    def offer(self, key: K, value: V) -> None:
        """``value`` was just made for ``key``: keep it if ``key`` was
        offered recently."""
        if self._door.again(hash(key)):
            entries = self.entries
            if len(entries) >= self._max:
                entries.clear()
            entries[key] = value
