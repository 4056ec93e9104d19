"""Request header fields -> what the decision core and the access log read.

One mapping for both protocols: the HTTP/1.1 connection hands it h11's
header list, an HTTP/2 stream the regular (non-pseudo) fields of its header
block (:mod:`serverio.wire.h2head`).  What is protocol-specific stays with
the caller: HTTP/1.1 framing (Content-Length vs Transfer-Encoding, RFC 9112
§6.1) and Connection tokens; HTTP/2's pseudo-headers.

A field sent on several lines is joined with ``", "`` (RFC 9110 §5.3),
which makes a repeated singleton (If-Modified-Since, Range) invalid, as the
RFC requires.  Names must already be lower-case (h11 and h2 both give them
so).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import HTTPError
from ..http.core import NO_EXTRA, ExtraFields

__all__ = ["EXTRA_FIELDS", "FACT_FIELDS", "HOST_RE", "Fields", "check_host", "scan_fields"]

# Fields the decision core reads, by RequestFacts attribute.
FACT_FIELDS: dict[bytes, str] = {
    b"if-match": "if_match",
    b"if-none-match": "if_none_match",
    b"if-modified-since": "if_modified_since",
    b"if-unmodified-since": "if_unmodified_since",
    b"range": "range",
    b"if-range": "if_range",
    b"accept": "accept",
    b"accept-encoding": "accept_encoding",
    b"want-repr-digest": "want_repr_digest",
    # Site rules: Basic authentication (RFC 7617).
    b"authorization": "authorization",
}

# Fields one feature each reads, by ExtraFields attribute.
EXTRA_FIELDS: dict[bytes, str] = {
    # Uploads (serverio.upload): the digests a PUT's content must match (RFC 9530).
    b"content-digest": "digests",
    b"repr-digest": "digests",
    b"content-type": "content_type",
    b"sec-fetch-site": "sec_fetch_site",
    # ... and a PUT's Content-Range (RFC 9110 §9.3.4: a partial PUT is 400).
    b"content-range": "content_range",
    # Site rules: CORS (Fetch standard).
    b"origin": "origin",
    b"access-control-request-method": "cors_method",
    b"access-control-request-headers": "cors_headers",
    # The client behind a trusted reverse proxy (serverio.http.forwarded):
    # kept raw; parsed only when the peer is a --trusted-proxies address.
    b"forwarded": "forwarded",
    b"x-forwarded-for": "x_forwarded_for",
    # The reverse proxy's --proxy-fallback (serverio.proxy): a request that
    # asks to switch protocols (RFC 9110 §7.8, a WebSocket) is the
    # fallback's, not a file's.
    b"upgrade": "upgrade",
    # WebDAV (serverio.dav, RFC 4918 §10).
    b"depth": "depth",
    b"destination": "destination",
    b"overwrite": "overwrite",
    b"if": "dav_if",
    b"lock-token": "lock_token",
    b"timeout": "timeout",
}

# uri-host [":" port] (RFC 9110 §7.2, RFC 3986 §3.2.2), loosely: an IP
# literal in brackets or reg-name characters.
HOST_RE = re.compile(rb"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]*)(?::[0-9]*)?")


@dataclass(slots=True)
class Fields:
    """What one scan of the header list found."""

    values: dict[str, str]  # RequestFacts keyword -> joined value
    extra: ExtraFields = NO_EXTRA  # RequestFacts.extra
    user_agent: str | None = None
    referer: str | None = None
    request_id: str | None = None  # X-Request-Id, for the access log only
    connection: bytes | None = None  # Connection lines joined with ","
    content_length: bool = False  # a Content-Length line was present
    nonzero_length: bool = False  # ... with a value other than "0"
    chunked: bool = False  # a Transfer-Encoding line was present


def check_host(value: bytes) -> None:
    """400 for a Host (or ``:authority``) that is not ``host[:port]``."""
    if HOST_RE.fullmatch(value) is None:
        raise HTTPError(400, "invalid Host", close=True)


def scan_fields(
    headers: Iterable[tuple[bytes, bytes]], authority: bytes | None = None, keep_host: bool = False
) -> Fields:
    """One pass over the (lower-case) header list.  ``authority``:
    HTTP/2's ``:authority`` (HTTP/1.1 has a Host line instead); kept in
    ``extra.host`` (with the Host line's value) when another extra field
    is present (a Destination for WebDAV COPY / MOVE, an Origin or a
    Content-Type for the upload form's CSRF rule), or always with
    ``keep_host`` (the Host check, :mod:`serverio.http.hosts`, reads it
    on every request).

    Raises :class:`HTTPError` 400 for an invalid Host, and for a Host line
    that names another host than ``:authority`` (RFC 9113 §8.3.1: such a
    request is malformed; the two must not be checked and used apart).
    """
    host = authority
    values: dict[str, str] = {}
    extra: dict[str, str] = {}
    out = Fields(values)
    for name, value in headers:
        attr = FACT_FIELDS.get(name)
        if attr is not None:
            v = value.decode("latin-1")
            old = values.get(attr)
            values[attr] = v if old is None else f"{old}, {v}"
        elif name == b"host":
            if HOST_RE.fullmatch(value) is None:
                raise HTTPError(400, "invalid Host", close=True)
            if authority is not None and value.lower() != authority.lower():
                raise HTTPError(400, "Host differs from :authority", close=True)
            host = value
        elif name == b"connection":
            c = out.connection
            out.connection = value if c is None else c + b"," + value
        elif name == b"content-length":
            out.content_length = True
            if value != b"0":
                out.nonzero_length = True
        elif name == b"transfer-encoding":
            out.chunked = True
        elif name == b"user-agent":
            out.user_agent = value.decode("latin-1")
        elif name == b"referer":
            out.referer = value.decode("latin-1")
        elif name == b"x-request-id":
            out.request_id = value.decode("latin-1")
        elif (key := EXTRA_FIELDS.get(name)) is not None:
            v = value.decode("latin-1")
            old = extra.get(key)
            extra[key] = v if old is None else f"{old}, {v}"
    if extra or (keep_host and host is not None):
        if host is not None:
            # WebDAV's Destination and the upload form's CSRF rule compare with it.
            extra["host"] = host.decode("latin-1")
        out.extra = ExtraFields(**extra)
    return out
