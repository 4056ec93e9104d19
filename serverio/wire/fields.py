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
from typing import Final

from ..errors import HTTPError
from ..http.core import NO_EXTRA, Extra
from ..http.extra import HOST, KEPT

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

# The fields a feature reads are not named here: each feature registers its
# own (serverio.http.extra.request_field), and the scan keeps what KEPT names.
EXTRA_FIELDS: Final = KEPT

# uri-host [":" port] (RFC 9110 §7.2, RFC 3986 §3.2.2), loosely: an IP
# literal in brackets or reg-name characters.
HOST_RE = re.compile(rb"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]*)(?::[0-9]*)?")


@dataclass(slots=True)
class Fields:
    """What one scan of the header list found."""

    values: dict[str, str]  # RequestFacts keyword -> joined value
    extra: Extra = NO_EXTRA  # RequestFacts.extra
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
    ``extra`` as :data:`~serverio.http.extra.HOST` (with the Host line's
    value) when a registered field is present (a feature may compare with
    it: WebDAV's Destination, the upload form's CSRF rule), or always with
    ``keep_host`` (the Host check, :mod:`serverio.http.hosts`, reads it
    on every request).  Every other field is kept only when a feature
    registered it (:func:`serverio.http.extra.request_field`).

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
            # A feature's field may be compared with it (a WebDAV Destination).
            extra[HOST.name] = host.decode("latin-1")
        out.extra = tuple(extra.items())
    return out
