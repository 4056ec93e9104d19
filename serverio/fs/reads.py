"""Positional reads: ``pread`` where the platform has it, an emulation elsewhere.

Several readers share one open file description: the connection streams a
body from the response's descriptor while compression and digest jobs read
an ``os.dup`` of it in worker threads, and duplicated descriptors share a
single file offset.  Every read therefore names its offset and never moves
a shared one: :func:`pread` is ``os.pread`` itself on POSIX (no wrapper, no
extra call on the hot path).

Windows has no ``os.pread``.  There :func:`pread` is ``lseek`` + ``read``
under one process-wide lock: every read serverio makes goes through this
function, so no other reader can move the shared offset between the seek
and the read.  A lock per descriptor would not do (a dup is another
number on the same offset); a fresh ``open`` per reader would need the path
and containment again.  The cost is that such reads are serialised in the
process, which a development server on a local disk does not notice.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Final

__all__ = ["HAS_PREAD", "pread", "read_all"]

_SEEK_LOCK: Final = threading.Lock()


def emulated_pread(fd: int, size: int, offset: int) -> bytes:
    """``os.pread`` as ``lseek`` + ``read`` under a process-wide lock."""
    with _SEEK_LOCK:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, size)


HAS_PREAD: Final = hasattr(os, "pread")
pread: Final[Callable[[int, int, int], bytes]] = (
    getattr(os, "pread") if HAS_PREAD else emulated_pread  # noqa: B009
)


def read_all(fd: int, size: int) -> bytes | None:
    """The first ``size`` bytes of the file (positional reads, so no offset
    is shared with other users of ``fd``); None if it is shorter now."""
    data = pread(fd, size, 0)
    while len(data) < size:
        more = pread(fd, size - len(data), len(data))
        if not more:
            return None
        data += more
    return data
