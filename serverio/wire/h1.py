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
from typing import Final

from ..errors import reason_phrase
from ..http.core import Plan
from ..http.dates import format_http_date

__all__ = [
    "SHARED_HEADS",
    "SHARED_HEADS_MAX",
    "Canned",
    "head_bytes",
    "interim_bytes",
    "keep_spellings",
    "shared_head",
]

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
        "Transfer-Encoding",  # a body produced while sent (net.emit.Emitter.emit_stream)
        "Location",
        "Allow",
        "Retry-After",
        "Vary",
        "Repr-Digest",
        "Content-Security-Policy",
        "X-Content-Type-Options",
        # Fields the site rules send (serverio.site.rules); a name a rule
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
        # WebDAV locking (serverio.dav.lockplans): the LOCK answer's token.
        "Lock-Token",
    )
}

_BUILTIN: Final = frozenset(_CANONICAL)


def keep_spellings(names: Iterable[str]) -> None:
    """Write these field names as given (``-H 'X-Test: 1'`` goes out as
    ``X-Test``, not ``x-test``), over HTTP/1.1; HTTP/2 sends every name
    lower-case (RFC 9113 §8.2.1).  Field names are case-insensitive (RFC
    9110 §5.1), but people read them and some clients still compare them
    byte for byte.  A name serverio spells itself (above) keeps that
    spelling; of two spellings of one name, the first given wins.  Called
    with the names the site rules set when a server compiles them; the
    table only grows, by the names a configuration gives.
    """
    for name in names:
        if not name.isascii():
            continue  # refused by the rules' own check, with its message
        key = name.lower().encode("ascii")
        if key not in _BUILTIN and key not in _CANONICAL:
            _CANONICAL[key] = name.encode("ascii")


# Nothing here adds a field: every field of a response, the common ones
# (nosniff, Date: serverio.http.core.common_fields) included, is in the
# plan the pure layer made.  This module only writes them out.

_STATUS_LINES: dict[int, bytes] = {}


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        line = b"HTTP/1.1 %d %s\r\n" % (status, reason_phrase(status))
        _STATUS_LINES[status] = line
    return line


def interim_bytes(status: int, headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """An interim (1xx) response head (RFC 9110 §15.2, RFC 9112 §4): the
    status line and the fields; no framing, it never has content."""
    get = _CANONICAL.get
    out = [_status_line(status)]
    out += [get(name, name) + b": " + value + b"\r\n" for name, value in headers]
    out.append(b"\r\n")
    return b"".join(out)


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


# The head cache: the HTTP/1.1 side's memo of the heads of shared plans
# (``Plan.shared``: memoised per second by the warm-file cache and the site
# rules, then sent to every plain request of that second).  Keyed by the
# plan's identity; the entry keeps the plan's headers tuple, so an id can
# only be reused by a plan whose headers are a different object (a miss)
# or the same object (the same head).  It keeps no body bytes.  Cleared
# whole when full: at worst one head_bytes per plan and second, as before.
SHARED_HEADS_MAX: Final = 4096
# id(plan) -> (plan.headers, plan.status, head).  Read directly by the
# emitter's warm path (serverio.net.emit: one dict lookup, no call); written
# only by shared_head.
SHARED_HEADS: Final[dict[int, tuple[tuple[tuple[bytes, bytes], ...], int, bytes]]] = {}
_SHARED_HEADS = SHARED_HEADS


def shared_head(plan: Plan) -> bytes:
    """``head_bytes(plan..., close=False, keep_alive_10=False)`` for a
    shared plan, serialised once per plan (a connection that closes
    appends its ``Connection: close`` to this; HTTP/1.0 keep-alive
    serialises its own)."""
    hit = _SHARED_HEADS.get(id(plan))
    if hit is not None and hit[0] is plan.headers and hit[1] == plan.status:
        return hit[2]
    head = head_bytes(plan.status, plan.headers, close=False, keep_alive_10=False)
    if len(_SHARED_HEADS) >= SHARED_HEADS_MAX:
        _SHARED_HEADS.clear()
    _SHARED_HEADS[id(plan)] = (plan.headers, plan.status, head)
    return head


class Canned:
    """A fixed response written by the transport itself (the over-limit 503,
    the admin endpoint's 400 and 405): a plan from the pure layer
    (:func:`serverio.http.core.error_plan`), serialised once at import or
    start-up and closing its connection.  Only its ``Date`` value changes
    per send (RFC 9110 §6.6.1), spliced between the two halves.
    """

    __slots__ = ("_after", "_before", "_body", "_memo")

    def __init__(self, plan: Plan) -> None:
        fields = plan.headers
        at = next(i for i, (name, _) in enumerate(fields) if name == b"date")
        # head_bytes of the fields before Date, without its blank line; then
        # the fields after Date, with Connection: close and the blank line.
        self._before = head_bytes(plan.status, fields[:at], close=False, keep_alive_10=False)[:-2]
        after = head_bytes(plan.status, fields[at + 1 :], close=True, keep_alive_10=False)
        self._after = after[len(_status_line(plan.status)) :]
        self._body = b"".join(p for p in plan.body if isinstance(p, bytes))
        self._memo: tuple[int, bytes] = (-1, b"")

    def at(self, now: float, *, head_only: bool = False) -> bytes:
        """The response to send at ``now`` (``head_only``: for a HEAD)."""
        sec = int(now)
        if self._memo[0] != sec:
            date = b"Date: " + format_http_date(sec).encode("ascii") + b"\r\n"
            self._memo = (sec, self._before + date + self._after)
        head = self._memo[1]
        return head if head_only else head + self._body
