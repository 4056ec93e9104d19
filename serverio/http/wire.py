"""Serialising a plan's status line and header block.

h11 parses every request (strictly) and owns the per-request protocol state;
the response head is written here.  Measured on this machine, h11's
``Connection.send`` for a 6-header response costs ~40 µs (it re-validates
every header with regexes and rewrites the Connection/Transfer-Encoding
fields), more than the whole rest of the request.  Our headers are generated
by the decision core from validated facts, so re-validating them buys
nothing; the rules h11's writer applies still hold here: exact
Content-Length framing, no chunked encoding (every body has a known length),
CRLF line endings, and ``Connection: close`` whenever the connection ends
after this response (RFC 9112 §9.6).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import reason_phrase

__all__ = ["NOSNIFF", "NOSNIFF_FIELD", "head_bytes"]

_CANONICAL = {
    n.lower().encode(): n.encode()
    for n in (
        "Date",
        "Last-Modified",
        "ETag",
        "Cache-Control",
        "Accept-Ranges",
        "Content-Type",
        "Content-Length",
        "Content-Range",
        "Content-Encoding",
        "Content-Disposition",
        "Location",
        "Allow",
        "Retry-After",
        "Vary",
        "Repr-Digest",
        "Content-Security-Policy",
        # Fields the site rules send (serverio.http.rules); a name a rule
        # sets that is not listed goes out lowercase, as h11 sends every
        # name (field names are case-insensitive, RFC 9110 §5.1).
        "WWW-Authenticate",
        "Expires",
        "Access-Control-Allow-Origin",
        "Access-Control-Allow-Credentials",
        "Access-Control-Allow-Methods",
        "Access-Control-Allow-Headers",
        "Access-Control-Expose-Headers",
        "Access-Control-Max-Age",
        "Cross-Origin-Opener-Policy",
        "Cross-Origin-Embedder-Policy",
        "Cross-Origin-Resource-Policy",
        "Strict-Transport-Security",
        "Referrer-Policy",
        "Permissions-Policy",
        "X-Frame-Options",
    )
}

# Every response says "do not sniff" (WHATWG Fetch §3.5.1): a client must
# not run a text/plain or octet-stream body (an uploaded .txt full of HTML,
# an error page) as HTML or script.  Memoised with the status line, so it
# costs nothing per response.  The serialisers add it, never a Plan: HTTP/1.1
# here, HTTP/2 (NOSNIFF_FIELD) right after :status in net/h2write.py
# (response_fields).
NOSNIFF = b"X-Content-Type-Options: nosniff\r\n"
NOSNIFF_FIELD = (b"x-content-type-options", b"nosniff")

_STATUS_LINES: dict[int, bytes] = {}


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        line = b"HTTP/1.1 %d %s\r\n" % (status, reason_phrase(status)) + NOSNIFF
        _STATUS_LINES[status] = line
    return line


def head_bytes(
    status: int, headers: Iterable[tuple[bytes, bytes]], *, close: bool, keep_alive_10: bool
) -> bytes:
    """The response head.  ``keep_alive_10``: an HTTP/1.0 client asked to
    keep the connection, so say that we do (RFC 9112 §9.3 / RFC 7230 A.1.2)."""
    out = [_status_line(status)]
    get = _CANONICAL.get
    for name, value in headers:
        out.append(get(name, name) + b": " + value + b"\r\n")
    if close:
        out.append(b"Connection: close\r\n")
    elif keep_alive_10:
        out.append(b"Connection: keep-alive\r\n")
    out.append(b"\r\n")
    return b"".join(out)
