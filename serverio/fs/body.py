"""The body source, as the transports import it: :class:`serverio.model.Body`.

A :class:`Body` is either literal bytes only (pieces in memory: a small file
read in the hop, a warm-file-cache entry, a compressed or generated body) or
literal bytes and :class:`~serverio.http.core.FileSpan` pieces together with
the descriptor those spans read from.  The transport that emits it owns it
and calls :meth:`Body.close` exactly once when it is done, whatever happened
(sent, client gone, cancelled, error): an HTTP/1.1 connection sends the
spans with ``sendfile`` (or positional reads on TLS), an HTTP/2 stream in
flow-controlled DATA frames read with positional reads.

It is defined in :mod:`serverio.model` with the other value types the pure
decision makes (a warm plan's memoised body is one), so that the decision
never imports this layer; this module keeps the name where the transports
have always found it.
"""

from __future__ import annotations

from ..model import NO_BODY, Body, StreamBody, close_fd

__all__ = ["NO_BODY", "Body", "StreamBody", "close_fd"]
