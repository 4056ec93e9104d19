"""Read a directory's README for its listing (blocking).

The one blocking step of :mod:`serverio.http.readme` (which renders what
this reads, a :class:`~serverio.http.readme.Readme`): open the file the
listing found through the root opener (the containment of a request:
``openat2(RESOLVE_BENEATH)`` or the component walk, symlinks as
``--follow-symlinks`` says), check it is a regular file, and read at most
the bound.  Run in the work pool (:func:`serverio.run_blocking`), like the
listing scan it follows.
"""

from __future__ import annotations

import hashlib
import os
import stat

from ..http.readme import Readme
from .opener import ContainedRoot
from .reads import pread

__all__ = ["read_readme"]


def read_readme(opener: ContainedRoot, relpath: str, name: str, limit: int) -> Readme | None:
    """The README ``name`` of the directory ``relpath`` (``.``: the root),
    or None when it cannot be read as a regular file (gone since the scan,
    replaced by a directory or a FIFO, refused by the containment).

    At most ``limit + 1`` bytes are read: a file over ``limit`` (or grown
    past it since its ``fstat``) is reported by size only.  The text is
    UTF-8 with each undecodable byte as U+FFFD.

    Cancellation handling: runs in a worker thread and closes the
    descriptor it opened itself before returning, whether or not its
    caller is still waiting; an abandoned call's result is dropped by
    :func:`~serverio.run_blocking`.
    """
    path = name if relpath == "." else relpath + "/" + name
    try:
        fd = opener.open(path)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if st.st_size > limit:
            return Readme(name, None, st.st_size, b"size:%d" % st.st_size)
        parts: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = pread(fd, limit + 1 - got, got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        if got > limit:
            return Readme(name, None, got, b"size:%d" % got)
        data = b"".join(parts)
    except OSError:
        return None
    finally:
        os.close(fd)
    digest = hashlib.blake2b(data, digest_size=16).digest()
    return Readme(name, data.decode("utf-8", "replace"), len(data), digest)
