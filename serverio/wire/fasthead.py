"""A strict fast path for common HTTP/1.1 request heads; h11 stays the authority.

:func:`parse_head` recognises a small, strict subset of what h11 accepts
(RFC 9112 §3 and §5 as h11 0.16 reads them):

* the request line ``GET`` or ``HEAD``, one SP, an origin-form target
  (``/`` then visible ASCII, RFC 9112 §3.2.1), one SP, ``HTTP/1.1`` or
  ``HTTP/1.0``, CRLF;
* at most :data:`MAX_FIELDS` field lines ``token ":" OWS value OWS CRLF``
  whose value is visible ASCII with single-run SP/HTAB inside (no obs-text,
  no control bytes, no obs-fold: a line starting with whitespace is not a
  field line here);
* no ``Content-Length``, ``Transfer-Encoding`` (framing, RFC 9112 §6),
  ``Upgrade``, ``Expect`` (protocol switches and ``100-continue`` are
  h11's), exactly one ``Host`` for HTTP/1.1 and at most one for HTTP/1.0
  (RFC 9112 §3.2);
* the whole head, blank line included, in the buffer and no longer than
  the head limit.

For such a head it returns exactly what h11 would: the method, target and
version bytes, the fields as (lower-cased name, value with OWS stripped)
pairs in order, and the number of bytes consumed (what follows is the
next request: pipelining).  For anything else it returns None ("defer"):
the caller hands the unchanged bytes to h11, so every rejection, every
unusual framing and every oddity is h11's decision.  The request has no
body (no framing field), and h11's keep-alive rule (RFC 9112 §9.3:
HTTP/1.1 unless ``Connection: close``; HTTP/1.0 never) is
:attr:`FastRequest.keep_alive`.

:class:`HeadParser` is one request cycle's parser built on it: it buffers
bytes, tries the fast path, and creates an ``h11.Connection`` (fed the
same bytes) only when the fast path defers.
"""

from __future__ import annotations

import re
from typing import Final

import h11

__all__ = ["MAX_FIELDS", "FastRequest", "HeadParser", "parse_head"]

MAX_FIELDS: Final = 32

# tchar (RFC 9110 §5.6.2), as h11's ``token``.
_TOKEN = rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+"
# A field line: value = visible ASCII words separated by SP/HTAB runs, OWS
# around it.  Possessive quantifiers (Python 3.11): the pieces are
# disjoint, so nothing is ever given back and a match is linear.
_FIELD: Final = rb"(" + _TOKEN + rb"):[ \t]*+((?:[!-~]++(?:[ \t]++[!-~]++)*+)?)[ \t]*+\r\n"
_HEAD_RE: Final = re.compile(
    rb"(GET|HEAD) (/[!-~]*+) HTTP/(1\.[01])\r\n((?:" + _FIELD + rb"){0,%d})\r\n" % MAX_FIELDS
)
_FIELD_RE: Final = re.compile(_FIELD)
# Lower-cased names that send a head to h11 whatever their value.
_DEFER: Final = frozenset((b"content-length", b"transfer-encoding", b"upgrade", b"expect"))


class FastRequest:
    """A request head accepted by the fast path: the attributes of the
    ``h11.Request`` h11 would have produced (``headers`` is a plain list)."""

    __slots__ = ("headers", "http_version", "method", "size", "target")

    def __init__(
        self,
        method: bytes,
        target: bytes,
        http_version: bytes,
        headers: list[tuple[bytes, bytes]],
        size: int,
    ) -> None:
        self.method = method
        self.target = target
        self.http_version = http_version
        self.headers = headers
        self.size = size  # bytes of the head, blank line included

    @property
    def keep_alive(self) -> bool:
        """h11's keep-alive rule for this request (RFC 9112 §9.3)."""
        if self.http_version != b"1.1":
            return False
        for name, value in self.headers:
            if name == b"connection" and b"close" in (t.strip() for t in value.lower().split(b",")):
                return False
        return True

    def __repr__(self) -> str:
        return (
            f"FastRequest({self.method!r}, {self.target!r}, {self.http_version!r}, "
            f"{self.headers!r}, size={self.size})"
        )


def parse_head(buf: bytes | bytearray, max_head: int) -> FastRequest | None:
    """The request head at the start of ``buf``, or None: defer to h11."""
    m = _HEAD_RE.match(buf)
    if m is None:
        return None
    size = m.end()
    if size > max_head:
        return None  # h11 + the caller's head limit decide (431)
    method, target, version, block = m.group(1, 2, 3, 4)
    headers = []
    hosts = 0
    defer = _DEFER
    for name, value in _FIELD_RE.findall(block):
        name = name.lower()
        if name == b"host":
            hosts += 1
        elif name in defer:
            return None
        headers.append((name, value))
    if hosts > 1 or (hosts == 0 and version == b"1.1"):
        return None  # h11 rejects these (RFC 9112 §3.2)
    return FastRequest(method, target, version, headers, size)


class HeadParser:
    """One request cycle: the fast path first, h11 for everything else.

    The interface is the part of ``h11.Connection`` a server reading one
    request head per parser uses: :meth:`receive_data`, :meth:`next_event`
    (once per cycle, up to the request head) and :attr:`trailing_data`.
    Until the fast path defers, bytes are only buffered; then an
    ``h11.Connection`` is created, given every byte received so far, and
    answers from then on, so its results (events, errors, buffered bytes)
    are exactly h11's.
    """

    __slots__ = ("_buf", "_closed", "_done", "_h11", "_max")

    def __init__(self, max_head: int, leftover: bytes = b"") -> None:
        self._max = max_head
        self._buf = leftover
        self._h11: h11.Connection | None = None
        self._done = False  # the fast path returned the head; _buf is what follows
        self._closed = False  # EOF received after that head

    @property
    def fast(self) -> bool:
        """No h11 parser was needed (so far)."""
        return self._h11 is None

    def receive_data(self, data: bytes | bytearray) -> None:
        """Buffer ``data``; ``b""`` is the peer's EOF, as for h11."""
        h = self._h11
        if h is None:
            if data:
                self._buf += data
                return
            if self._done:
                self._closed = True
                return
            h = self._defer()
        h.receive_data(data)  # type: ignore[arg-type]  # bytes-like is fine

    def _defer(self) -> h11.Connection:
        h = self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=self._max)
        h.receive_data(self._buf)
        self._buf = b""
        return h

    def next_event(self) -> object:
        h = self._h11
        if h is None:
            if self._done:
                raise RuntimeError("one request head per HeadParser")
            buf = self._buf
            if not buf:
                return h11.NEED_DATA  # what h11 says for an empty, open buffer
            req = parse_head(buf, self._max)
            if req is not None:
                self._done = True
                self._buf = buf[req.size :]
                return req
            h = self._defer()
        return h.next_event()

    @property
    def trailing_data(self) -> tuple[bytes, bool]:
        """Bytes received and not consumed by the request head, and whether
        the peer closed (EOF received)."""
        h = self._h11
        if h is None:
            return self._buf, self._closed
        return h.trailing_data
