"""Fair use of the write slots (issue 41 item 14).

``--max-uploads`` bounds the writes in flight; without more, one client
that opens that many slow uploads holds every slot and every other
writer gets 503 for as long as its bodies trickle (up to
``--body-total-timeout`` each, again and again).  Two bounds make that
cost the client instead:

* :class:`ClientSlots`, a per-client share of the slots
  (``--max-uploads-per-client``; by default half of ``--max-uploads``, at
  least one): a client past its share gets 503 (``Retry-After``) while
  others still find free slots.  The client is the one the access log and
  the auth limiter name (the peer, or the one a ``--trusted-proxies``
  proxy names: :attr:`serverio.http.core.RequestFacts.client`, keyed as
  the auth limiter keys it, :func:`serverio.site.gate.client_key`).
* :class:`PacedContent`, a minimum upload rate (``--min-upload-rate``
  bytes per second, after :data:`RATE_GRACE` seconds): a body that
  arrives slower is cut with 408 (and the connection closed, the
  stream reset), like a download whose client stops reading is cut by
  ``--write-timeout``.  Only the time spent waiting for the client counts:
  a slow disk (the pool's steps between pulls) never makes a client late.

Both are the upload service's (:class:`serverio.upload.service.Uploads`),
on the event loop, no I/O.
"""

from __future__ import annotations

from typing import Final

import trio

from ..errors import HTTPError
from ..pipeline.hooks import WriteContent
from ..site.gate import client_key

__all__ = ["RATE_GRACE", "ClientSlots", "PacedContent", "client_share"]

# Seconds of waiting for the client before --min-upload-rate applies (a
# connection's start, TLS, a 100 Continue round trip, a slow first hop).
RATE_GRACE: Final = 10.0


def client_share(max_uploads: int, per_client: int) -> int:
    """The slots one client may hold: ``per_client`` (``--max-uploads-per-client``),
    or when it is 0 half of ``max_uploads``, at least one; never more than
    ``max_uploads``."""
    share = per_client or max_uploads // 2
    return max(1, min(share, max_uploads))


class ClientSlots:
    """How many writes each client has in flight, against its share.

    Cancellation handling: synchronous; the caller gives back in a
    ``finally`` what it took.
    """

    __slots__ = ("held", "share")

    def __init__(self, share: int) -> None:
        self.share = share
        self.held: dict[str, int] = {}

    def take(self, client: str) -> str | None:
        """A slot for ``client`` (``RequestFacts.client``; "" when not
        known: every such write shares one key): its key, to :meth:`give`
        back; None when it holds its share already."""
        key = client_key(client) if client else "-"
        held = self.held.get(key, 0)
        if held >= self.share:
            return None
        self.held[key] = held + 1
        return key

    def give(self, key: str) -> None:
        """Give back a slot :meth:`take` returned (the table keeps only
        clients with writes in flight)."""
        left = self.held[key] - 1
        if left:
            self.held[key] = left
        else:
            del self.held[key]


class PacedContent:
    """``content`` pulled under a minimum rate: by the time the client was
    waited for ``w`` seconds in all, at least ``rate * (w - RATE_GRACE)``
    bytes must have arrived, else 408.

    Cancellation handling: each pull runs under a ``move_on_at`` scope of
    its own; when it fires the body is left unusable (the request body
    marks itself failed: bytes may be lost) and :class:`HTTPError` 408
    with ``close`` is raised, which the write step answers.  An outer
    cancellation propagates as is.
    """

    __slots__ = ("content", "declared", "grace", "rate", "received", "waited")

    def __init__(self, content: WriteContent, rate: int, grace: float = RATE_GRACE) -> None:
        self.content = content
        self.declared = content.declared
        self.received = content.received  # as content's, after each pull
        self.rate = rate
        self.grace = grace
        self.waited = 0.0  # seconds spent waiting for the client, all pulls

    async def next_chunk(self) -> bytes | None:
        # How much longer the client may take, with what it has sent so far.
        room = self.grace + self.content.received / self.rate - self.waited
        start = trio.current_time()
        with trio.move_on_at(start + max(room, 0.0)) as scope:
            chunk = await self.content.next_chunk()
        self.waited += trio.current_time() - start
        self.received = self.content.received
        if scope.cancelled_caught:
            raise HTTPError(408, "upload slower than --min-upload-rate", close=True)
        return chunk
