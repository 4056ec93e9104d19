"""An HTTP/1.1 request head -> :class:`~serverio.http.core.RequestFacts`.

What the decision core and the access log read of a request head, with
HTTP/1.1's own rules beside the field scan it shares with HTTP/2
(:func:`serverio.wire.fields.scan_fields`): the version (505 for any but
1.0 and 1.1), framing (Content-Length with Transfer-Encoding is refused,
RFC 9112 §6.1) and the Connection tokens (keep-alive, RFC 9112 §9.3).

Called by the head parser itself for a head of the fast path
(:class:`serverio.wire.fasthead.HeadParser`, given the server's
configuration), so that reading a common request is one call from the
connection into this layer; for a head h11 parsed, by the connection.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import Final, Protocol

from ..config import Config
from ..errors import HTTPError
from ..http.core import RequestFacts
from ..http.target import parse_target
from .fields import scan_fields

__all__ = ["Facts", "HeadLike", "request_facts"]

# Request facts, whether it is an HTTP/1.0 keep-alive, user agent, referer,
# request id (X-Request-Id, for the access log only).
Facts = tuple[RequestFacts, bool, str | None, str | None, str | None]


class HeadLike(Protocol):
    """A request head: an ``h11.Request`` or the fast path's ``FastRequest``."""

    @property
    def method(self) -> bytes: ...

    @property
    def target(self) -> bytes: ...

    @property
    def http_version(self) -> bytes: ...

    @property
    def headers(self) -> Iterable[tuple[bytes, bytes]]: ...


# The Connection values nearly every client sends, as received: their token
# sets without the split (what _tokens computes for them).
_SINGLE_TOKENS: Final[dict[bytes, frozenset[bytes]]] = {
    b"close": frozenset({b"close"}),
    b"keep-alive": frozenset({b"keep-alive"}),
}
_NO_TOKENS: Final[frozenset[bytes]] = frozenset()


def _tokens(value: bytes) -> AbstractSet[bytes]:
    """The Connection field's tokens, lower-cased (RFC 9110 §7.6.1)."""
    known = _SINGLE_TOKENS.get(value)
    if known is not None:
        return known
    return {t.strip().lower() for t in value.split(b",")}


def request_facts(event: HeadLike, cfg: Config, tls: bool = False) -> Facts:
    """Request facts, whether it is an HTTP/1.0 keep-alive, user agent,
    referer, request id (X-Request-Id, for the access log only).  ``tls``:
    the connection is TLS (the facts say so, for --hsts).

    Raises :class:`HTTPError`: 505 (version), the target's 400 or 414, 400
    for an invalid Host or both framings at once; the target is judged
    first, as a reader of the request line would."""
    version = event.http_version
    if version != b"1.1" and version != b"1.0":
        raise HTTPError(505, "unsupported HTTP version", close=True)
    # The field mapping is shared with HTTP/2 (serverio.wire.fields);
    # framing and Connection tokens are HTTP/1.1's own.  The fields are
    # scanned before the target is parsed (this layer's work, then the
    # pure layer's, in one go), but a bad target still wins over a bad
    # Host: it is the error a client sees.
    max_target = cfg.conn.max_target_size
    try:
        f = scan_fields(event.headers, keep_host=cfg.site.check_hosts)
    except HTTPError:
        parse_target(event.method, event.target, max_size=max_target)
        raise
    has_body = f.nonzero_length
    if f.chunked:
        if f.content_length:
            # RFC 9112 §6.1: both framings at once is how requests get
            # smuggled; refuse rather than pick one (after the target's
            # own errors, as before the fields were scanned first).
            parse_target(event.method, event.target, max_size=max_target)
            raise HTTPError(400, "Content-Length with Transfer-Encoding", close=True)
        has_body = True
    connection = f.connection
    tokens = _tokens(connection) if connection is not None else _NO_TOKENS
    if version == b"1.1":
        keep_alive = b"close" not in tokens
        ka10 = False
    else:
        keep_alive = b"keep-alive" in tokens and b"close" not in tokens
        ka10 = keep_alive
    facts = RequestFacts(
        method=event.method,
        target=parse_target(event.method, event.target, max_size=max_target),
        # A body no longer closes the connection by itself: the connection
        # drains it after the answer, or closes (serverio.net.connection).
        keep_alive=keep_alive,
        has_body=has_body,
        tls=tls,
        extra=f.extra,
        **f.values,
    )
    return facts, ka10, f.user_agent, f.referer, f.request_id
