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

:class:`HeadParser` is a connection's request-head parser built on it:
per request cycle it buffers bytes, tries the fast path, and creates an
``h11.Connection`` (fed the same bytes) only when the fast path defers;
asked for the next event after a head, it starts the next cycle with the
bytes past that head (pipelining).  Given the server's configuration, it
builds a fast head's request facts as it parses it
(:func:`serverio.wire.h1facts.request_facts`): reading a common request
is one call from the connection into this layer (:meth:`HeadParser.feed`).
"""

from __future__ import annotations

import re
from typing import Final

import h11

from ..config import Config
from ..errors import HTTPError
from .h1facts import Facts, request_facts

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

    __slots__ = ("facts", "headers", "http_version", "method", "size", "target")

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
        # Its request facts, built by the parser that read it when it was
        # given the configuration (None: not built, or they are an error
        # the connection meets again when it builds them itself).
        self.facts: Facts | None = None

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
    """A connection's request heads: the fast path first, h11 for everything else.

    The interface is the part of ``h11.Connection`` a server reading
    request heads uses: :meth:`receive_data`, :meth:`next_event` and
    :attr:`trailing_data`.  Per request cycle, until the fast path defers,
    bytes are only buffered; then an ``h11.Connection`` is created, given
    every byte received so far, and answers for the rest of the cycle, so
    its results (events, errors, buffered bytes) are exactly h11's.  Once a
    head was returned, the next :meth:`next_event` starts the next cycle
    from the bytes past it (what a new parser given them would do: the
    peer's EOF is the connection's to remember).

    ``cfg`` (and ``tls``): the server's configuration, with which a fast
    head's facts are built as it is parsed (:attr:`FastRequest.facts`).
    :attr:`fed` counts the bytes held for the head being read (the
    connection's head-size bound and the watcher's backpressure).
    """

    __slots__ = ("_buf", "_cfg", "_closed", "_done", "_h11", "_max", "_tls", "fed")

    def __init__(
        self, max_head: int, leftover: bytes = b"", cfg: Config | None = None, tls: bool = False
    ) -> None:
        self._max = max_head
        self._cfg = cfg
        self._tls = tls
        self.restart(leftover)

    def restart(self, leftover: bytes) -> None:
        """A new cycle from ``leftover`` (the bytes read past a request's
        content, or those past the last head)."""
        self._buf = leftover
        self._h11: h11.Connection | None = None
        self._done = False  # the head was returned; _buf is what follows
        self._closed = False  # EOF received after that head
        self.fed = len(leftover)

    @property
    def fast(self) -> bool:
        """No h11 parser was needed (so far)."""
        return self._h11 is None

    def receive_data(self, data: bytes | bytearray) -> None:
        """Buffer ``data``; ``b""`` is the peer's EOF, as for h11."""
        self.fed += len(data)
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
        """The next request head, ``h11.NEED_DATA`` or another h11 event;
        h11's errors as h11 raises them."""
        if self._done:
            self.restart(self.trailing_data[0])  # the next cycle
        h = self._h11
        if h is None:
            buf = self._buf
            if not buf:
                return h11.NEED_DATA  # what h11 says for an empty, open buffer
            req = parse_head(buf, self._max)
            if req is not None:
                self._done = True
                self._buf = rest = buf[req.size :]
                self.fed = len(rest)
                cfg = self._cfg
                if cfg is not None:
                    try:
                        req.facts = request_facts(req, cfg, self._tls)
                    except HTTPError:
                        pass  # the connection builds them again and answers the error
                return req
            h = self._defer()
        event = h.next_event()
        if type(event) is h11.Request:
            self._done = True
        return event

    def next_head(self) -> object:
        """:meth:`next_event` for a server: h11's protocol errors as the
        :class:`HTTPError` to answer (closing), and a head longer than the
        limit refused (431: h11 only limits an *incomplete* head, so a
        whole oversized head in one read would get through)."""
        try:
            event = self.next_event()
        except h11.RemoteProtocolError as exc:
            raise HTTPError(exc.error_status_hint, str(exc), close=True) from None
        if type(event) is h11.Request:
            rest = len(self.trailing_data[0])
            if self.fed - rest > self._max:
                raise HTTPError(431, "request head too large", close=True)
            self.fed = rest  # from now on: the bytes held past the head
        return event

    def feed(self, data: bytes | bytearray) -> object:
        """:meth:`receive_data`, then :meth:`next_head`: one read's bytes,
        and the head they complete (or ``h11.NEED_DATA``)."""
        self.receive_data(data)
        return self.next_head()

    @property
    def trailing_data(self) -> tuple[bytes, bool]:
        """Bytes received and not consumed by the request head, and whether
        the peer closed (EOF received)."""
        h = self._h11
        if h is None:
            return self._buf, self._closed
        return h.trailing_data
