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
A full warm-file cache asks one question more before it stores a key
its doorkeeper has seen again: is it asked for at least as often as the
entry it would evict (:class:`FrequencySketch`, TinyLFU's admission)?  A
random walk over many more files than fit keeps passing the doorkeeper
(a file asked for twice within two of its generations); the sketch stops
most of those stores, while a file asked for more often than the least
recently used one still gets in.  Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["AdmittedMemo", "Doorkeeper", "FrequencySketch"]

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


# The sketch's counters: 4 bits' worth, one byte each (saturating at 15).
_COUNT_MAX = 15
# Halving every counter at once: a byte's new value, by its old one.
_HALVED = bytes(i >> 1 for i in range(256))
# Odd 64-bit multipliers for the rows' indexes (Fibonacci hashing): each
# row takes the top bits of the hash times its own constant.
_ROWS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93)
_MASK64 = (1 << 64) - 1


class FrequencySketch:
    """How often keys were counted lately, approximately: a count-min
    sketch of four rows of small counters, halved all at once after ten
    times ``span`` counts (so that a key's old popularity fades).  An
    estimate is the least of its four counters: never below the key's
    own count since the last halving (at most 15), above it only where
    other keys share all four counters.  Each row has ``span`` counters,
    rounded up to a power of two (at least 1,024): 4 to 8 bytes per key of
    ``span`` in all, however many keys are counted.  Not synchronised:
    the warm-file cache counts under its lock.

    TinyLFU (Einziger, Friedman, Manes: "TinyLFU: A Highly Efficient
    Cache Admission Policy", 2017): a candidate is stored in a full cache
    only if its estimate is at least its victim's.
    """

    __slots__ = ("_adds", "_bits", "_counts", "_sample", "span")

    def __init__(self, span: int) -> None:
        self.span = span
        self._bits = 10
        self._counts = bytearray(0)
        self._adds = 0
        self._sample = 1
        self._reset(span)

    def _reset(self, span: int) -> None:
        """Empty rows sized for ``span``."""
        width = 1024
        while width < span:
            width *= 2
        self.span = span
        self._bits = width.bit_length() - 1
        self._counts = bytearray(4 * width)
        self._adds = 0
        self._sample = 10 * max(span, 1)

    @property
    def width(self) -> int:
        """Counters per row."""
        return 1 << self._bits

    def _slots(self, h: int) -> tuple[int, int, int, int]:
        shift = 64 - self._bits
        width = 1 << self._bits
        h &= _MASK64
        a, b, c, d = _ROWS
        return (
            ((h * a) & _MASK64) >> shift,
            width + (((h * b) & _MASK64) >> shift),
            2 * width + (((h * c) & _MASK64) >> shift),
            3 * width + (((h * d) & _MASK64) >> shift),
        )

    def estimate(self, h: int) -> int:
        """The count of the key of hash ``h`` (an upper bound, at most 15)."""
        counts = self._counts
        i, j, k, m = self._slots(h)
        return min(counts[i], counts[j], counts[k], counts[m])

    def add(self, h: int) -> int:
        """Count the key of hash ``h`` once; its estimate after."""
        counts = self._counts
        least = _COUNT_MAX
        for i in self._slots(h):
            n = counts[i]
            if n < _COUNT_MAX:
                n += 1
                counts[i] = n
            if n < least:
                least = n
        self._adds += 1
        if self._adds >= self._sample:
            # Age: every count halved at once (one C call over the rows).
            self._counts = bytearray(counts.translate(_HALVED))
            self._adds = 0
        return least

    def resize(self, span: int) -> None:
        """Follow a new ``span`` (the cache's entries now): when it outgrows
        the rows, counting starts again with rows sized for it (what was
        counted is dropped, as the doorkeeper's generations are)."""
        if span > self.width:
            self._reset(span)
        else:
            self.span = span
            self._sample = 10 * max(span, 1)


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
