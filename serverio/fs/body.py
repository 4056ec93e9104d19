"""The body source: what a response sends after its head.

A :class:`Body` is either literal bytes only (pieces in memory: a small file
read in the hop, a warm-file-cache entry, a compressed or generated body) or
literal bytes and :class:`~serverio.http.core.FileSpan` pieces together with
the descriptor those spans read from.  The transport that emits it owns it
and calls :meth:`Body.close` exactly once when it is done, whatever happened
(sent, client gone, cancelled, error): an HTTP/1.1 connection sends the
spans with ``sendfile`` (or positional reads on TLS), an HTTP/2 stream in
flow-controlled DATA frames read with positional reads.

A literal body owns nothing, so closing it does nothing and one instance may
be shared (:data:`NO_BODY`); a file-backed one closes its descriptor on the
first :meth:`close` and never again.
"""

from __future__ import annotations

import os

from ..http.core import FileSpan, Plan

__all__ = ["NO_BODY", "Body", "close_fd"]


def close_fd(fd: int) -> None:
    """Close a descriptor a body source or a preparation owned (one place,
    so a test can count every close)."""
    os.close(fd)


class Body:
    """The pieces to send, in order, and the descriptor their spans read from
    (``fd == -1``: literal only)."""

    __slots__ = ("fd", "pieces")

    def __init__(self, pieces: tuple[bytes | FileSpan, ...], fd: int = -1) -> None:
        self.pieces = pieces
        self.fd = fd

    @classmethod
    def of(cls, plan: Plan, fd: int = -1) -> Body:
        """The body source of ``plan`` (nothing for HEAD or a bodiless
        status), reading its spans from ``fd``, which it then owns.  A plan
        that sends no span does not need the descriptor: it is closed now."""
        if not plan.send_body or not plan.body:
            if fd >= 0:
                close_fd(fd)
            return NO_BODY
        if fd >= 0 and not plan.needs_file:
            close_fd(fd)
            fd = -1
        return cls(plan.body, fd)

    @property
    def size(self) -> int:
        return sum(map(len, self.pieces))

    def close(self) -> None:
        """Release the descriptor; the second and later calls do nothing."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            close_fd(fd)


# The empty body, shared: a literal body owns nothing to close.
NO_BODY = Body(())
