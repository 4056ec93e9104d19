"""A reusable output buffer for a connection's writer.

Bytes waiting for the socket are collected in a ``bytearray`` whose
capacity is kept between writes: appending copies into memory that is
already allocated and touched, and a scatter read (``os.preadv``) can fill
a reserved region in place.  A fresh ``bytearray`` per write costs an
allocation, a page fault per 4 KiB page for large rounds, and (to reserve
room for a read) a zero-filled temporary copied in: several passes over
the data for each pass that matters.

The buffer tracks its own length (``len(buf)``); the ``bytearray`` behind it
only grows.  :meth:`shrink` gives the memory back (a connection with
nothing in flight keeps at most ``keep`` bytes of capacity); up to
``SPARE_MAX`` large buffers are kept process-wide for the next connection
that needs one, so the memory they hold is bounded by
``SPARE_MAX`` x the largest buffer a connection can need.

Capacities of ``MAP_FROM`` and more are anonymous mappings (``mmap``), not
heap memory: a large buffer dropped goes back to the operating system at
once, where the allocator would keep a freed heap block (and the process's
RSS) after a burst of busy connections; the mapping costs a system call per
growth, which happens a few times per busy connection, not per write.
"""

from __future__ import annotations

import mmap

__all__ = ["GROW_STEP", "MAP_FROM", "SPARE_MAX", "OutBuffer"]

GROW_STEP = 65536  # bytes: the capacity grows in steps of this
SPARE_MAX = 16  # large buffers kept for reuse, process-wide
MAP_FROM = 131072  # capacities from here on are anonymous mappings (mmap)

# Large buffers given back by idle connections (shrink), taken again by
# the next one that needs room (_room): a connection that serves one large
# body after another does not zero-fill and copy its buffers each time.
# All of it runs on the trio thread, so a plain list needs no lock.
_spares: list[bytearray | mmap.mmap] = []


class OutBuffer:
    """Pending output: ``data[:len(self)]`` of a growing ``bytearray``.

    Not thread-safe; one connection's trio-side code uses it between
    checkpoints.  While a ``memoryview`` of :attr:`data` is alive the
    buffer must not grow (``bytearray`` refuses to resize while exported),
    so callers release their views before the next :meth:`add` or
    :meth:`reserve`.
    """

    __slots__ = ("data", "size")

    def __init__(self) -> None:
        self.data: bytearray | mmap.mmap = bytearray()
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def _room(self, end: int) -> None:
        """Capacity for ``end`` bytes at least, in steps of GROW_STEP: small
        appends rarely reallocate, and the capacity stays within one step
        of the most that was pending (the memory budget counts that)."""
        have = len(self.data)
        if end <= have:
            return
        for i, spare in enumerate(_spares):
            if len(spare) >= end:
                del _spares[i]
                spare[: self.size] = memoryview(self.data)[: self.size]
                self.data = spare
                return
        cap = -(-end // GROW_STEP) * GROW_STEP
        if cap < MAP_FROM and isinstance(self.data, bytearray):
            self.data += bytes(cap - have)
            return
        grown = mmap.mmap(-1, cap)
        grown[: self.size] = memoryview(self.data)[: self.size]
        self.data = grown

    def add(self, chunk: bytes | bytearray | memoryview) -> None:
        """Append ``chunk``."""
        start = self.size
        end = start + len(chunk)
        self._room(end)
        self.data[start:end] = chunk
        self.size = end

    def reserve(self, n: int) -> int:
        """Append ``n`` bytes of unspecified content (to be written in
        place, e.g. by a scatter read); returns where they start."""
        start = self.size
        self._room(start + n)
        self.size = start + n
        return start

    def truncate(self, size: int) -> None:
        """Drop everything from ``size`` on."""
        if size < self.size:
            self.size = size

    def clear(self) -> None:
        """Empty, keeping the capacity."""
        self.size = 0

    def shrink(self, keep: int) -> None:
        """Empty; give back the capacity if it is more than ``keep`` bytes."""
        self.size = 0
        if len(self.data) > keep:
            if len(_spares) < SPARE_MAX:
                _spares.append(self.data)
            self.data = bytearray()

    def view(self) -> memoryview:
        """The pending bytes (release the view before the buffer grows)."""
        return memoryview(self.data)[: self.size]
