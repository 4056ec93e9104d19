"""A strict fast path for common upstream response heads and bodies; h11 stays the judge.

The reverse proxy's upstream client (:mod:`serverio.proxy.client`) reads
each response with a :class:`ResponseReader` first.  It recognises a small,
strict subset of what h11 0.16 accepts (RFC 9112 §4, §5, §6, §7.1):

* the status line ``HTTP/1.1``, one SP, a final status 200-599 other than
  204 and 304 (1xx, 101 and the bodiless statuses are h11's), then either
  nothing or one SP and a reason of visible ASCII and SP, CRLF;
* at most :data:`MAX_FIELDS` field lines ``token ":" OWS value OWS CRLF``
  (visible ASCII with single-run SP/HTAB inside: no obs-text, no control
  bytes, no obs-fold), the blank line CRLF, the whole head within h11's
  default incomplete-event limit (:data:`MAX_HEAD`);
* the framing: exactly one ``Content-Length`` of at most 18 digits, or
  exactly one ``Transfer-Encoding: chunked`` (spelt so) and no
  Content-Length; anything else (both, repeated, a list, another coding,
  neither: a body ended by the close) is h11's.

The request it answers must be one h11 framed as a complete message that
is not HEAD (the caller checks: HEAD and a protocol switch change the
framing, RFC 9110 §6.4.1, §7.8).  For such a head :meth:`ResponseReader.event`
gives exactly h11's result: the status, the reason, the fields as
(lower-cased name, value with OWS stripped) pairs in order; then the body
as ``h11.Data`` events and one ``h11.EndOfMessage``:

* Content-Length: the bytes as they arrive, up to the length (exactly
  h11's ``ContentLengthReader``);
* chunked: ``1*16HEXDIG CRLF`` (no extension), the data as it arrives,
  the CRLF after it, ..., then ``0 CRLF CRLF`` (no trailer fields): the
  same Data events as h11's ``ChunkedReader``.

Anything else returns :data:`DEFER` with the bytes not yet consumed, and
the caller hands them to h11 (:meth:`ResponseReader.handoff`), which then
decides everything, every rejection included: during the head, the same
``h11.Connection`` gets every byte; during a body, at a boundary where
a fresh one is given a synthetic head with the same framing and, inside
a chunk, a synthetic size line that puts its reader where this one is
(:meth:`ResponseReader.handoff`), then the rest.  An EOF before the end is deferred the same
way (h11 says whether it is an error).

The reader's phase is one :class:`FastPhase`, changed only through the
transitions :data:`TRANSITIONS` lists (as h11 keeps its states in
``_state.py``); anything else is a bug, raised where it happens:

==========  ===================================================  ===================
phase       the reader ...                                       goes to
==========  ===================================================  ===================
HEAD        waits for the whole head                             BODY, DEFERRED
BODY        gives the body as ``h11.Data``                       DONE, DEFERRED
DONE        gave ``h11.EndOfMessage``: nothing more to read      —
DEFERRED    declined: h11 reads the rest (:meth:`handoff`)       —
==========  ===================================================  ===================
"""

from __future__ import annotations

import enum
import re
from typing import Final

import h11

__all__ = [
    "BODY",
    "DEFER",
    "DEFERRED",
    "DONE",
    "HEAD",
    "MAX_FIELDS",
    "MAX_HEAD",
    "TRANSITIONS",
    "FastPhase",
    "FastResponse",
    "ResponseReader",
    "parse_response",
]

MAX_FIELDS: Final = 32
# h11's default max_incomplete_event_size (the upstream client's h11 uses it).
MAX_HEAD: Final = 16 * 1024

_TOKEN = rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+"
_FIELD: Final = rb"(" + _TOKEN + rb"):[ \t]*+((?:[!-~]++(?:[ \t]++[!-~]++)*+)?)[ \t]*+\r\n"
_HEAD_RE: Final = re.compile(
    rb"HTTP/1\.1 ([2-5][0-9][0-9])(?: ([ !-~]*+))?\r\n((?:" + _FIELD + rb"){0,%d})\r\n" % MAX_FIELDS
)
_FIELD_RE: Final = re.compile(_FIELD)
# Where h11 would see the end of a head (a blank line, CRLF or bare LF).
_HEAD_END: Final = re.compile(rb"\n\r?\n")
_CHUNK_RE: Final = re.compile(rb"([0-9A-Fa-f]{1,16})\r\n")
_DIGITS: Final = re.compile(rb"[0-9]{1,18}")
_BODILESS: Final = frozenset((b"204", b"304"))


class _Defer:
    """The fast path declines: h11 decides from here."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFER"


DEFER: Final = _Defer()
_END: Final = h11.EndOfMessage()


class FastPhase(enum.IntEnum):
    # An IntEnum, as serverio.net.h1state.Phase: its members hash as ints
    # (in C), so the table lookup of a transition is cheap.
    HEAD = 0
    BODY = 1
    DONE = 2
    DEFERRED = 3


# The members as plain module constants: the reader compares its phase on
# every event, and a module global is a fraction of an Enum class
# attribute lookup (serverio.net.h1state).
HEAD: Final = FastPhase.HEAD
BODY: Final = FastPhase.BODY
DONE: Final = FastPhase.DONE
DEFERRED: Final = FastPhase.DEFERRED

# Every allowed transition, from -> the phases it may go to.
TRANSITIONS: Final[dict[FastPhase, frozenset[FastPhase]]] = {
    # A head the fast path accepts starts its body; anything else is h11's.
    FastPhase.HEAD: frozenset({FastPhase.BODY, FastPhase.DEFERRED}),
    # The end of the body (Content-Length reached, the last chunk), or a
    # byte, an EOF or a syntax the fast path leaves to h11.
    FastPhase.BODY: frozenset({FastPhase.DONE, FastPhase.DEFERRED}),
    # Both final: a reader is used for one response.
    FastPhase.DONE: frozenset(),
    FastPhase.DEFERRED: frozenset(),
}


class FastResponse:
    """A response head accepted by the fast path: the attributes of the
    ``h11.Response`` h11 would have produced (``headers`` is a plain list),
    and its framing."""

    __slots__ = ("headers", "http_version", "keep_alive", "length", "reason", "size", "status_code")

    def __init__(
        self,
        status_code: int,
        reason: bytes,
        headers: list[tuple[bytes, bytes]],
        length: int | None,
        keep_alive: bool,
        size: int,
    ) -> None:
        self.status_code = status_code
        self.reason = reason
        self.http_version = b"1.1"
        self.headers = headers
        self.length = length  # None: chunked
        self.keep_alive = keep_alive  # h11's rule (RFC 9112 §9.3): no "close" token
        self.size = size  # bytes of the head, blank line included

    def __repr__(self) -> str:
        return (
            f"FastResponse({self.status_code}, {self.reason!r}, {self.headers!r}, "
            f"length={self.length}, keep_alive={self.keep_alive}, size={self.size})"
        )


def parse_response(buf: bytes) -> FastResponse | None:
    """The response head at the start of ``buf`` (whole), or None: defer."""
    m = _HEAD_RE.match(buf)
    if m is None or m.end() > MAX_HEAD:
        return None
    status, reason, block = m.group(1, 2, 3)
    if status in _BODILESS:
        return None
    headers = []
    length: bytes | None = None
    chunked = False
    keep_alive = True
    for name, value in _FIELD_RE.findall(block):
        name = name.lower()
        if name == b"content-length":
            if length is not None or _DIGITS.fullmatch(value) is None:
                return None
            length = value
        elif name == b"transfer-encoding":
            if chunked or value != b"chunked":
                return None
            chunked = True
        elif name == b"connection":
            if b"close" in (t.strip() for t in value.lower().split(b",")):
                keep_alive = False
        headers.append((name, value))
    if chunked == (length is not None):
        return None  # both (h11's rules) or neither (ended by the close)
    size = m.end()
    framing = None if length is None else int(length)
    return FastResponse(int(status), reason or b"", headers, framing, keep_alive, size)


class ResponseReader:
    """One response's bytes, read by the fast path until it defers.

    :meth:`feed` the bytes read (``b""``: EOF), :meth:`event` for the next
    event: a :class:`FastResponse`, ``h11.Data``, ``h11.EndOfMessage``,
    None (more bytes needed) or :data:`DEFER` (then :meth:`handoff`)."""

    __slots__ = ("_buf", "_footer", "_left", "eof", "head", "leftover", "phase", "reusable")

    def __init__(self) -> None:
        self._buf = b""
        self.eof = False
        self.head: FastResponse | None = None
        self._left = 0  # Content-Length bytes, or the chunk's data bytes, still to come
        self._footer = False  # a chunk's data read, its CRLF not yet
        self.phase = HEAD  # changed only by _to (the TRANSITIONS table)
        self.leftover = False  # bytes after the end (the connection is not reused)
        # The response read to its end by the fast path, nothing past it,
        # and keep-alive (RFC 9112 §9.3): its connection may carry the next
        # request.  Decided once, by the move to DONE (_end).
        self.reusable = False

    def _to(self, new: FastPhase) -> None:
        """Move to ``new``; a transition the table does not list is a bug."""
        if new not in TRANSITIONS[self.phase]:
            raise RuntimeError(f"fast response reader phase {self.phase.name} -> {new.name}")
        self.phase = new

    def feed(self, data: bytes) -> None:
        if data:
            self._buf += data
        else:
            self.eof = True

    def event(self) -> object:
        phase = self.phase
        if phase is BODY:
            return self._body()
        if phase is HEAD:
            return self._head()
        if phase is DONE:
            return None
        return DEFER

    def _head(self) -> object:
        buf = self._buf
        if _HEAD_END.search(buf) is None:
            # h11 would not have a head yet either: it looks for the same
            # blank line, except that a first byte below "!" (a blank line,
            # a control byte, a space) it rejects at once; past its limit,
            # or at EOF, it decides too.
            if len(buf) <= MAX_HEAD and not self.eof and (not buf or buf[0] > 0x20):
                return None
            return self._defer()
        head = parse_response(buf)
        if head is None:
            return self._defer()
        self.head = head
        self._buf = buf[head.size :]
        self._left = head.length if head.length is not None else 0
        self._to(BODY)
        return head

    def _body(self) -> object:
        head = self.head
        assert head is not None
        buf = self._buf
        if head.length is not None:
            left = self._left
            if not left:
                return self._end(buf)
            if not buf:
                return self._defer() if self.eof else None
            data = buf[:left]
            self._buf = buf[left:]
            self._left = left - len(data)
            return h11.Data(data=data)
        if self._footer:
            # The CRLF after a chunk's data (RFC 9112 §7.1), taken whole.
            if buf[:2] == b"\r\n":
                buf = self._buf = buf[2:]
                self._footer = False
            elif (buf == b"" or buf == b"\r") and not self.eof:
                return None
            else:
                return self._defer()  # h11 says what a bad footer is
        left = self._left
        if left:
            # A chunk's data as it arrives, as h11's ChunkedReader gives it.
            if not buf:
                return self._defer() if self.eof else None
            data = buf[:left]
            self._buf = buf[left:]
            self._left = left - len(data)
            self._footer = not self._left
            return h11.Data(data=data)
        m = _CHUNK_RE.match(buf)
        if m is None:
            if len(buf) < 18 and b"\n" not in buf and not self.eof:
                return None  # the size line is not whole yet
            return self._defer()
        size = int(m.group(1), 16)
        start = m.end()
        if size == 0:
            if len(buf) < start + 2 and buf[start:] in (b"", b"\r") and not self.eof:
                return None
            if buf[start : start + 2] != b"\r\n":
                return self._defer()  # trailer fields, or the end is missing: h11's
            return self._end(buf[start + 2 :])
        self._buf = buf[start:]
        self._left = size
        return self._body()

    def _end(self, rest: bytes) -> object:
        self._to(DONE)
        self._buf = b""
        self.leftover = bool(rest)
        head = self.head
        self.reusable = not rest and head is not None and head.keep_alive
        return _END

    def _defer(self) -> _Defer:
        self._to(DEFERRED)
        return DEFER

    def handoff(self, conn: h11.Connection) -> tuple[h11.Connection, bool]:
        """After :data:`DEFER`: the h11 connection that reads the rest, and
        whether it is a fresh one (the body's rest; never reused after).
        ``conn`` is the exchange's own, its request sent."""
        head = self.head
        if head is None:
            h = conn  # it gets every byte of the response
        else:
            h = h11.Connection(h11.CLIENT)
            h.send(h11.Request(method=b"GET", target=b"/", headers=[(b"host", b"h")]))
            h.send(h11.EndOfMessage())
            framing = (
                b"transfer-encoding: chunked"
                if head.length is None
                else b"content-length: %d" % self._left
            )
            h.receive_data(b"HTTP/1.1 200 OK\r\n" + framing + b"\r\n\r\n")
            event = h.next_event()
            assert isinstance(event, h11.Response)
            if head.length is None:
                # Put h11's ChunkedReader where this reader is: within a
                # chunk's data (its size line for what is left), or at its
                # footer (a one-byte chunk whose byte is consumed here, so
                # that h11 checks the footer bytes that follow).
                if self._left:
                    h.receive_data(b"%x\r\n" % self._left)
                elif self._footer:
                    h.receive_data(b"1\r\nX")
                    event = h.next_event()
                    assert isinstance(event, h11.Data) and event.data == b"X"
        if self._buf:
            h.receive_data(self._buf)
            self._buf = b""
        if self.eof:
            h.receive_data(b"")
        return h, head is not None
