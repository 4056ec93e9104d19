"""HTTP/2 request header blocks: the checks RFC 9113 §8 makes stream errors.

The h2 library can validate inbound header blocks itself, but it reports a
malformed block as a connection-level ``ProtocolError`` (and queues GOAWAY),
which would let one bad request end every other stream of the connection.
RFC 9113 §8.1.1 makes a malformed request a *stream* error of type
PROTOCOL_ERROR, so the server turns h2's validation off and applies these
checks itself; :class:`MalformedRequest` becomes ``RST_STREAM`` on that
stream only.

Pure: bytes in, a :class:`RequestHead` or an exception out.  What the
decision core reads from the regular fields is mapped by
:func:`serverio.wire.fields.scan_fields`, the same function HTTP/1.1 uses.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CONNECTION_SPECIFIC",
    "MalformedRequest",
    "RequestHead",
    "RequestHeads",
    "parse_request_head",
    "path_bytes_ok",
]

# RFC 9113 §8.2.2: connection-specific fields must not appear in HTTP/2
# (a request carrying one is malformed; a response must not carry one).
CONNECTION_SPECIFIC = frozenset(
    {b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade"}
)
_PSEUDO = frozenset({b":method", b":scheme", b":path", b":authority"})
# RFC 9110 §5.1: a field name is a token; HTTP/2 additionally requires it
# lower-case (RFC 9113 §8.2.1).
_NAME_RE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9a-z]+")
# RFC 9113 §8.2.1: no NUL, CR or LF anywhere in a value, and no leading or
# trailing space or tab.
_BAD_VALUE_RE = re.compile(rb"[\x00\r\n]|^[ \t]|[ \t]$")
_TOKEN_RE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


# RFC 9112 §3.2 as h11 parses an HTTP/1.1 request-target: one or more
# VCHAR (0x21-0x7E).  A control byte, DEL, a space or a non-ASCII byte in
# :path is what h11 answers 400 for; the same bytes get the same 400 here.
_TARGET_RE = re.compile(rb"[\x21-\x7e]+")


def path_bytes_ok(path: bytes) -> bool:
    """Whether ``:path`` has only the bytes an HTTP/1.1 request-target may
    have (otherwise: 400, as over HTTP/1.1)."""
    return _TARGET_RE.fullmatch(path) is not None


class MalformedRequest(Exception):
    """The header block breaks RFC 9113 §8: answer with a stream error."""


@dataclass(frozen=True, slots=True)
class RequestHead:
    """A validated request header block."""

    method: bytes
    path: bytes | None  # None only for CONNECT (which has no :path)
    authority: bytes | None
    scheme: bytes | None
    fields: tuple[tuple[bytes, bytes], ...]  # the regular fields, in order
    content_length: int | None  # the declared body length, if any
    size: int  # header list size as RFC 9113 §6.5.2 counts it


def parse_request_head(headers: Sequence[tuple[bytes, bytes]]) -> RequestHead:
    """Validate one request header block (RFC 9113 §8.2 and §8.3.1).

    Raises :class:`MalformedRequest` for: an unknown, duplicated or late
    pseudo-header (or a response one such as ``:status``); a missing
    ``:method``, or a missing ``:scheme``/``:path`` on a non-CONNECT request;
    an empty ``:path``; an upper-case or invalid field name; a value with
    NUL/CR/LF or surrounding white space; a connection-specific field; ``te``
    other than ``trailers``; an invalid or inconsistent ``content-length``.
    """
    pseudo: dict[bytes, bytes] = {}
    fields: list[tuple[bytes, bytes]] = []
    size = 0
    length: int | None = None
    for name, value in headers:
        size += len(name) + len(value) + 32
        if _BAD_VALUE_RE.search(value) is not None:
            raise MalformedRequest("invalid field value")
        if name.startswith(b":"):
            if fields:
                raise MalformedRequest("pseudo-header after a regular field")
            if name not in _PSEUDO:
                raise MalformedRequest("unknown pseudo-header")
            if name in pseudo:
                raise MalformedRequest("duplicate pseudo-header")
            pseudo[name] = value
            continue
        if _NAME_RE.fullmatch(name) is None:
            raise MalformedRequest("invalid or upper-case field name")
        if name in CONNECTION_SPECIFIC:
            raise MalformedRequest("connection-specific field")
        if name == b"te" and value.lower() != b"trailers":
            raise MalformedRequest("te other than trailers")
        if name == b"content-length":
            if not value.isdigit():
                raise MalformedRequest("invalid content-length")
            n = int(value)
            if length is not None and n != length:
                raise MalformedRequest("conflicting content-length")
            length = n
        fields.append((name, value))
    method = pseudo.get(b":method")
    if method is None or _TOKEN_RE.fullmatch(method) is None:
        raise MalformedRequest("missing or invalid :method")
    path = pseudo.get(b":path")
    scheme = pseudo.get(b":scheme")
    if method == b"CONNECT":
        # §8.5: CONNECT carries :authority only.
        if path is not None or scheme is not None:
            raise MalformedRequest("CONNECT with :path or :scheme")
    else:
        if scheme is None or path is None:
            raise MalformedRequest("missing :scheme or :path")
        if not path:
            raise MalformedRequest("empty :path")
    return RequestHead(
        method=method,
        path=path,
        authority=pseudo.get(b":authority"),
        scheme=scheme,
        fields=tuple(fields),
        content_length=length,
        size=size,
    )


# What one connection's RequestHeads remembers at most: blocks of up to
# _KEPT_SIZE bytes (as RFC 9113 §6.5.2 counts them), _KEPT_MAX of them
# (cleared whole when full): at most ~16 KiB per connection.
_KEPT_MAX = 16
_KEPT_SIZE = 1024


class RequestHeads:
    """:func:`parse_request_head` for one connection's streams, remembering
    the heads of small blocks by their fields.

    Clients repeat a request's fields exactly (h2load, a page's reloads, a
    download manager's ranges differ only where a field differs), and the
    checks are a pure function of the fields, so a remembered head is the
    one parsing would give; a malformed block is never remembered (it is
    checked, and refused, each time)."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: dict[tuple[tuple[bytes, bytes], ...], RequestHead] = {}

    def parse(self, headers: Sequence[tuple[bytes, bytes]]) -> RequestHead:
        key = tuple(headers)
        head = self._kept.get(key)
        if head is None:
            head = parse_request_head(key)
            if head.size <= _KEPT_SIZE:
                if len(self._kept) >= _KEPT_MAX:
                    self._kept.clear()
                self._kept[key] = head
        return head
