"""HTTP/1.1 request-body framing (RFC 9112 §6, §7), pure: no I/O.

Two parts, both table-tested (tests/test_chunked.py):

* :func:`request_framing` chooses a request's framing once, from its head:
  a ``Content-Length``, ``Transfer-Encoding: chunked``, or no body.  Every
  ambiguous head is refused with a status and ``close=True``: this is the
  request-smuggling defence (RFC 9112 §6.3, §11.2), at least as strict as
  h11's ``normalize_and_validate`` and ``_body_framing``.
* :class:`ChunkedDecoder`, a strict chunked decoder as a small state machine
  (:class:`ChunkState`; every transition is in ``_NEXT``).  It is fed bytes
  and returns the data they carry; what follows the last chunk's trailer
  section is kept as :attr:`ChunkedDecoder.leftover` (a pipelined next
  request).

It lives beside :mod:`serverio.wire.fasthead` (the head parser) because it is
a wire codec with no I/O; :mod:`serverio.net.h1body` does the reading.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import HTTPError

__all__ = [
    "MAX_CHUNK_LINE",
    "MAX_TRAILERS",
    "ChunkState",
    "ChunkedDecoder",
    "Framing",
    "FramingKind",
    "request_framing",
]

# A Content-Length of at most 19 digits fits a signed 64-bit integer; h11
# accepts 20 (CONTENT_LENGTH_MAX_DIGITS), any real body is far below both.
_MAX_LENGTH_DIGITS = 19
_DIGITS = re.compile(rb"[0-9]+")
# RFC 9110 §5.6.1: a list element is separated by "," with optional
# whitespace (OWS = SP / HTAB) around it.
_OWS = b" \t"


class FramingKind(enum.Enum):
    """How a request's body is delimited (RFC 9112 §6.3)."""

    NONE = "none"  # no Content-Length, no Transfer-Encoding: length 0 (§6.3 rule 7)
    LENGTH = "length"  # Content-Length (§6.3 rule 6)
    CHUNKED = "chunked"  # Transfer-Encoding: chunked (§6.3 rule 4)


@dataclass(frozen=True, slots=True)
class Framing:
    """The framing a request head selected, and its ``Expect: 100-continue``."""

    kind: FramingKind
    length: int | None = None  # the Content-Length, for LENGTH only
    expect_continue: bool = False  # RFC 9110 §10.1.1, ignored for HTTP/1.0

    @property
    def empty(self) -> bool:
        """True when the framing says there is no body byte to read."""
        return self.kind is FramingKind.NONE or self.length == 0


def _bad(detail: str, status: int = 400) -> HTTPError:
    return HTTPError(status, detail, close=True)


def _elements(values: list[bytes]) -> list[bytes]:
    """The comma-separated list elements of every line of a field."""
    return [e.strip(_OWS) for v in values for e in v.split(b",")]


def _content_length(values: list[bytes]) -> int:
    # RFC 9110 §8.6: Content-Length = 1*DIGIT.  A list of identical values
    # (lines or commas) may be taken as one; different ones are a 400
    # (RFC 9112 §6.3 rule 5: "unrecoverable error").
    lengths = set(_elements(values))
    if len(lengths) != 1:
        raise _bad("conflicting Content-Length")
    (value,) = lengths
    if _DIGITS.fullmatch(value) is None or len(value) > _MAX_LENGTH_DIGITS:
        raise _bad("invalid Content-Length")
    return int(value)


def _check_codings(values: list[bytes]) -> None:
    codings = [c.lower() for c in _elements(values)]
    if not codings or codings[-1] != b"chunked":
        # RFC 9112 §6.3 rule 4: chunked not final -> the length cannot be
        # determined; the server MUST answer 400 and close.
        raise _bad("Transfer-Encoding without a final chunked")
    if b"chunked" in codings[:-1]:
        # RFC 9112 §7: chunked MUST NOT be applied more than once.
        raise _bad("chunked applied twice")
    if len(codings) > 1:
        # RFC 9112 §6.1: a transfer coding the server does not understand
        # SHOULD get 501 (h11 answers 501 for anything but "chunked" too).
        # Empty elements ("chunked, ," -> b"") land here as well.
        raise _bad("unsupported transfer coding", 501)


def request_framing(headers: Iterable[tuple[bytes, bytes]], http_version: bytes) -> Framing:
    """The body framing of a request head (names lower-case, as h11 and
    :mod:`serverio.wire.fasthead` deliver them).

    Raises :class:`HTTPError` with ``close=True``: 400 for Content-Length
    together with Transfer-Encoding, different or invalid Content-Lengths,
    a Transfer-Encoding whose last coding is not ``chunked`` or that applies
    it twice, or any Transfer-Encoding in an HTTP/1.0 request; 501 for a
    transfer coding other than chunked before the final chunked.
    """
    lengths: list[bytes] = []
    codings: list[bytes] = []
    expect = False
    for name, value in headers:
        if name == b"content-length":
            lengths.append(value)
        elif name == b"transfer-encoding":
            codings.append(value)
        elif name == b"expect":
            # RFC 9110 §10.1.1: 100-continue is the only expectation; other
            # members are not ours to honour (a MAY-417 we do not send).
            expect = expect or b"100-continue" in (e.lower() for e in _elements([value]))
    # RFC 9110 §10.1.1: a 100-continue expectation in HTTP/1.0 MUST be ignored.
    expect = expect and http_version != b"1.0"
    if codings:
        if lengths:
            # RFC 9112 §6.1, §11.2: both framings at once is how requests
            # get smuggled; refuse rather than pick one.
            raise _bad("Content-Length with Transfer-Encoding")
        if http_version == b"1.0":
            # RFC 9112 §6.1: Transfer-Encoding in HTTP/1.0 means faulty framing.
            raise _bad("Transfer-Encoding in HTTP/1.0")
        _check_codings(codings)
        return Framing(FramingKind.CHUNKED, None, expect)
    if lengths:
        return Framing(FramingKind.LENGTH, _content_length(lengths), expect)
    return Framing(FramingKind.NONE, None, False)


# ------------------------------------------------------------ chunked


class ChunkState(enum.Enum):
    """Where the chunked decoder is (RFC 9112 §7.1)."""

    SIZE = "size"  # reading a chunk-size line: chunk-size [ chunk-ext ] CRLF
    DATA = "data"  # inside chunk-data, ``remaining`` bytes to go
    DATA_END = "data-end"  # the CRLF that ends chunk-data
    TRAILER = "trailer"  # trailer field lines until an empty line
    DONE = "done"  # the last chunk and its trailer section are read
    FAILED = "failed"  # a framing error was raised; nothing more is accepted


class _Ev(enum.Enum):
    CHUNK = "chunk"  # a size line with size > 0
    LAST = "last"  # the size line "0"
    DATA_READ = "data-read"  # the chunk's last data byte
    CRLF = "crlf"  # the CRLF after chunk-data
    FIELD = "field"  # one trailer field line
    END = "end"  # the empty line ending the trailer section


# Every transition of the decoder; any other (state, event) cannot happen.
_NEXT: dict[tuple[ChunkState, _Ev], ChunkState] = {
    (ChunkState.SIZE, _Ev.CHUNK): ChunkState.DATA,
    (ChunkState.SIZE, _Ev.LAST): ChunkState.TRAILER,
    (ChunkState.DATA, _Ev.DATA_READ): ChunkState.DATA_END,
    (ChunkState.DATA_END, _Ev.CRLF): ChunkState.SIZE,
    (ChunkState.TRAILER, _Ev.FIELD): ChunkState.TRAILER,
    (ChunkState.TRAILER, _Ev.END): ChunkState.DONE,
}

# The longest chunk-size line (size and extensions, CRLF excluded); the
# extensions are ignored, so a long one is only a cost.
MAX_CHUNK_LINE = 4096
# The whole trailer section (every field line and its CRLF); discarded.
MAX_TRAILERS = 8192
# 16 hex digits: a size up to 2**64 - 1 (h11 allows 20 digits).
_MAX_SIZE_DIGITS = 16

# RFC 9110 §5.6.2 token, §5.6.4 quoted-string (qdtext / quoted-pair; obs-text
# allowed) and RFC 9112 §7.1.1 chunk-ext with its BWS.
_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = rb'"(?:[\t !#-\[\]-~\x80-\xff]|\\[\t -~\x80-\xff])*"'
_EXT_VALUE = rb"(?:" + _TOKEN + rb"|" + _QUOTED + rb")"
# One deviation from the grammar: no BWS between chunk-size and the first
# ";" ("3 ;x"), which h11 refuses too; sizes followed by whitespace are a
# known way to make two parsers disagree.  BWS is accepted elsewhere.
_EXT = rb"(?:;[ \t]*" + _TOKEN + rb"(?:[ \t]*=[ \t]*" + _EXT_VALUE + rb")?[ \t]*)*"
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,%d})" % _MAX_SIZE_DIGITS + _EXT)
# RFC 9112 §5, RFC 9110 §5.5: field-name ":" OWS field-value OWS; a line
# starting with SP or HTAB (obs-fold) never matches (the name is a token).
_FIELD_LINE = re.compile(_TOKEN + rb":[\t \x21-\x7e\x80-\xff]*")


class ChunkedDecoder:
    """A strict decoder of the chunked transfer coding (RFC 9112 §7.1).

    :meth:`feed` takes any split of the input and returns the chunk-data it
    completes, in order.  Refused with :class:`HTTPError` 400 (``close``):
    a chunk-size that is not 1-16 hex digits, a size line over
    :data:`MAX_CHUNK_LINE` bytes, a malformed chunk extension, chunk-data
    not followed by CRLF, a bare LF (CRLF only, RFC 9112 §2.2: a server
    MAY accept a bare LF; we do not, a front end that disagrees is how a
    body is smuggled), a trailer section over :data:`MAX_TRAILERS` bytes,
    a malformed trailer field line or an obs-fold in it.  Extensions are
    accepted and ignored (§7.1.1); trailer fields are read and discarded
    (§7.1.2 allows it; none is merged into the head).
    """

    __slots__ = ("_buf", "_remaining", "_trailers", "leftover", "state")

    def __init__(self) -> None:
        self.state = ChunkState.SIZE
        self._buf = bytearray()  # bytes of an incomplete line (SIZE, DATA_END, TRAILER)
        self._remaining = 0  # chunk-data bytes still to come (DATA)
        self._trailers = 0  # trailer section bytes seen so far
        self.leftover = b""  # bytes past the end of the body (DONE)

    def _go(self, event: _Ev) -> None:
        self.state = _NEXT[(self.state, event)]

    def _fail(self, detail: str) -> HTTPError:
        self.state = ChunkState.FAILED
        return _bad(detail)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Decode ``data``; returns the chunk-data pieces it completes.

        Raises :class:`HTTPError` 400 for a framing error (then the decoder
        is FAILED), and :class:`RuntimeError` when fed after DONE or FAILED
        (the caller must stop at :attr:`done`; what follows the body is in
        :attr:`leftover`).
        """
        if self.state is ChunkState.DONE or self.state is ChunkState.FAILED:
            raise RuntimeError(f"chunked decoder fed in state {self.state.value}")
        out: list[bytes] = []
        view = memoryview(data)
        pos, end = 0, len(view)
        while pos < end:
            if self.state is ChunkState.DATA:
                take = min(self._remaining, end - pos)
                out.append(bytes(view[pos : pos + take]))
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._go(_Ev.DATA_READ)
            elif self.state is ChunkState.DATA_END:
                pos = self._data_end(view, pos)
            else:
                pos = self._line(view, pos)
                if self.done:
                    self.leftover = bytes(view[pos:])
                    break
        return out

    @property
    def done(self) -> bool:
        """True once the last chunk and the trailer section are read."""
        return self.state is ChunkState.DONE

    def _data_end(self, view: memoryview, pos: int) -> int:
        # Byte by byte against b"\r\n" so that garbage fails at once.
        expected = b"\r\n"[len(self._buf)]
        if view[pos] != expected:
            raise self._fail("chunk-data not followed by CRLF")
        self._buf.append(expected)
        if len(self._buf) == 2:
            self._buf.clear()
            self._go(_Ev.CRLF)
        return pos + 1

    def _line(self, view: memoryview, pos: int) -> int:
        """Collect one CRLF-terminated line (SIZE or TRAILER); handle it
        when complete.  Returns the new position."""
        limit = MAX_CHUNK_LINE if self.state is ChunkState.SIZE else MAX_TRAILERS - self._trailers
        room = limit + 2 - len(self._buf)  # the line, its CR and its LF
        window = view[pos : pos + max(room, 0)]
        lf = bytes(window).find(b"\n")
        if lf < 0:
            if len(window) >= room:
                raise self._fail("chunk line or trailer section too long")
            self._buf += window
            return pos + len(window)
        self._buf += window[:lf]
        if not self._buf.endswith(b"\r"):
            raise self._fail("bare LF in chunked framing")
        line = bytes(self._buf[:-1])
        self._buf.clear()
        if b"\r" in line:
            raise self._fail("bare CR in chunked framing")
        if self.state is ChunkState.SIZE:
            self._size_line(line)
        else:
            self._trailer_line(line)
        return pos + lf + 1

    def _size_line(self, line: bytes) -> None:
        match = _SIZE_LINE.fullmatch(line)
        if match is None:
            raise self._fail("invalid chunk-size line")
        size = int(match.group(1), 16)
        if size == 0:
            self._go(_Ev.LAST)
        else:
            self._remaining = size
            self._go(_Ev.CHUNK)

    def _trailer_line(self, line: bytes) -> None:
        self._trailers += len(line) + 2
        if not line:
            self._go(_Ev.END)
        elif line[:1] in (b" ", b"\t"):
            # RFC 9112 §5.2: obs-fold; a server MUST reject it (or replace
            # it with SP) outside message/http.
            raise self._fail("obs-fold in trailer section")
        elif _FIELD_LINE.fullmatch(line) is None:
            raise self._fail("invalid trailer field line")
        else:
            self._go(_Ev.FIELD)
