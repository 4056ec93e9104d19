"""A streaming multipart/form-data parser (RFC 7578, RFC 2046 §5.1), sans-IO.

:func:`boundary_of` takes the boundary from a request's Content-Type;
:class:`MultipartParser` is fed the body in pieces of any size and returns
events: :class:`PartStart` (the part's header fields, its form ``name`` and
``filename``), :class:`PartData` (bytes of the part's content, released as
they arrive), :class:`PartEnd`, and :class:`Done` at the close delimiter.
It is a state machine (:class:`MultipartState`; every transition is in
``_NEXT``), as :class:`serverio.wire.bodyframe.ChunkedDecoder` is.

Memory is bounded: the parser never holds a part's content, only the
delimiter's length minus one byte of it (a delimiter may straddle two
pieces), a part's header section (:data:`MAX_PART_HEADER_BYTES`), and the
transport padding after a delimiter.  The number of parts and of header
fields per part are bounded too.  Refused with :class:`HTTPError`:

* 400: a header line not ended by CRLF (bare LF or CR), an obs-fold, a
  malformed header line; a part without ``Content-Disposition: form-data``
  and a ``name`` (RFC 7578 §4.2), a repeated parameter, a ``filename*``
  that does not decode; a ``Content-Transfer-Encoding`` other than
  7bit/8bit/binary (§4.7: deprecated; we do not decode); a delimiter
  followed by anything but ``--``, padding and CRLF (the boundary
  appeared inside a part's content, which RFC 2046 §5.1.1 forbids); no
  part at all; and, at :meth:`MultipartParser.end`, a missing close
  delimiter (a truncated upload).
* 413: more than ``max_parts`` parts, a part header section over
  ``max_header_bytes`` or with more than ``max_headers`` fields.

The preamble and the epilogue are ignored (§5.1.1).  The ``filename`` is
returned as sent (after quoted-string unescaping); the caller reduces it
with :func:`serverio.fs.names.reduce_name`.  A ``filename*``
(RFC 5987 ext-value, UTF-8 or ISO-8859-1) is preferred over ``filename``
when both are present, as RFC 6266 §4.3 asks of recipients; RFC 7578 §4.2
says senders must not use it, but some libraries did.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote_to_bytes

from ..errors import HTTPError

__all__ = [
    "MAX_PARTS",
    "MAX_PART_HEADERS",
    "MAX_PART_HEADER_BYTES",
    "Done",
    "Event",
    "MultipartParser",
    "MultipartState",
    "PartData",
    "PartEnd",
    "PartStart",
    "boundary_of",
]

MAX_PARTS: Final = 256
MAX_PART_HEADERS: Final = 16
MAX_PART_HEADER_BYTES: Final = 8192
# Transport padding (LWSP) after a delimiter, before its CRLF.
_MAX_PADDING: Final = 64

_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_VALUE = "(" + _QUOTED + "|" + _TOKEN + ")"
_PARAM = re.compile(r"[ \t]*;[ \t]*(" + _TOKEN + r")[ \t]*=[ \t]*" + _VALUE + r"[ \t]*")
# A disposition type, or a media type's type "/" subtype.
_HEAD = re.compile(r"[ \t]*(" + _TOKEN + "(?:/" + _TOKEN + r")?)[ \t]*")
# RFC 9110 §5.5: field-value = VCHAR / obs-text / SP / HTAB (no other control).
_FIELD_LINE = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([\t\x20-\x7e\x80-\xff]*?)[ \t]*")
# RFC 2046 §5.1.1: boundary := 0*69<bchars> bcharsnospace.
_BOUNDARY = re.compile(r"[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]")
# RFC 5987 §3.2.1: ext-value := charset "'" [ language ] "'" value-chars.
_EXT_VALUE = re.compile(r"([A-Za-z0-9!#$%&+\-^_`{}~]+)'[A-Za-z0-9\-]*'([A-Za-z0-9!#$&+\-.^_`|~%]*)")
_CHARSETS: Final = {"utf-8": "utf-8", "iso-8859-1": "latin-1"}


def _unquote(value: str) -> str:
    if not value.startswith('"'):
        return value
    # quoted-pair for '"' and '\' only: other backslashes are kept, as
    # browsers send a Windows path's "\" unescaped (HTML's form encoding).
    return re.sub(r'\\(["\\])', r"\1", value[1:-1])


def _params(value: str, what: str) -> tuple[str, dict[str, str]]:
    """``type; k=v; ...`` -> (lower-case type, {lower-case key: value})."""
    head = _HEAD.match(value)
    if head is None:
        raise HTTPError(400, f"malformed {what}")
    params: dict[str, str] = {}
    pos = head.end()
    while pos < len(value):
        match = _PARAM.match(value, pos)
        if match is None:
            raise HTTPError(400, f"malformed {what} parameters")
        key = match.group(1).lower()
        if key in params:
            raise HTTPError(400, f"repeated {what} parameter {key}")
        params[key] = _unquote(match.group(2))
        pos = match.end()
    return head.group(1).lower(), params


def boundary_of(content_type: bytes) -> bytes:
    """The boundary of a ``multipart/form-data`` Content-Type (quoted or
    not, 1-70 characters of RFC 2046 bchars).  Raises 415 for another media
    type, 400 for a missing or invalid boundary."""
    kind, params = _params(content_type.decode("latin-1"), "Content-Type")
    if kind != "multipart/form-data":
        raise HTTPError(415, "not multipart/form-data")
    boundary = params.get("boundary")
    if boundary is None or _BOUNDARY.fullmatch(boundary) is None:
        raise HTTPError(400, "missing or invalid multipart boundary")
    return boundary.encode("ascii")


@dataclass(frozen=True, slots=True)
class PartStart:
    """A part begins: its header fields (names lower-case, values as sent),
    its form field ``name`` and its ``filename`` (None for a plain field)."""

    headers: tuple[tuple[bytes, bytes], ...]
    name: str
    filename: str | None
    content_type: bytes | None


@dataclass(frozen=True, slots=True)
class PartData:
    """Bytes of the current part's content."""

    data: bytes


@dataclass(frozen=True, slots=True)
class PartEnd:
    """The current part's content is complete."""


@dataclass(frozen=True, slots=True)
class Done:
    """The close delimiter: no more parts (the epilogue is ignored)."""


Event = PartStart | PartData | PartEnd | Done


class MultipartState(enum.Enum):
    """Where the parser is (RFC 2046 §5.1.1)."""

    PREAMBLE = "preamble"  # before the first delimiter (ignored)
    BOUNDARY = "boundary"  # after a delimiter: "--", or padding and CRLF
    HEADERS = "headers"  # a part's header lines, until an empty line
    DATA = "data"  # a part's content, until CRLF "--" boundary
    EPILOGUE = "epilogue"  # after the close delimiter (ignored): done
    FAILED = "failed"  # an error was raised; nothing more is accepted


class _Ev(enum.Enum):
    DELIMITER = "delimiter"  # CRLF "--" boundary
    LINE_END = "line-end"  # padding and CRLF after a delimiter
    CLOSE = "close"  # "--" after a delimiter
    FIELD = "field"  # one part header line
    BLANK = "blank"  # the empty line ending a part's headers


# Every transition of the parser; any other (state, event) cannot happen.
_NEXT: dict[tuple[MultipartState, _Ev], MultipartState] = {
    (MultipartState.PREAMBLE, _Ev.DELIMITER): MultipartState.BOUNDARY,
    (MultipartState.BOUNDARY, _Ev.LINE_END): MultipartState.HEADERS,
    (MultipartState.BOUNDARY, _Ev.CLOSE): MultipartState.EPILOGUE,
    (MultipartState.HEADERS, _Ev.FIELD): MultipartState.HEADERS,
    (MultipartState.HEADERS, _Ev.BLANK): MultipartState.DATA,
    (MultipartState.DATA, _Ev.DELIMITER): MultipartState.BOUNDARY,
}


class MultipartParser:
    """A multipart/form-data body parser fed in pieces (see the module
    docstring for what it refuses and what it keeps in memory)."""

    __slots__ = (
        "_buf",
        "_delim",
        "_header_bytes",
        "_headers",
        "_max_header_bytes",
        "_max_headers",
        "_max_parts",
        "parts",
        "state",
    )

    def __init__(
        self,
        boundary: bytes,
        *,
        max_parts: int = MAX_PARTS,
        max_headers: int = MAX_PART_HEADERS,
        max_header_bytes: int = MAX_PART_HEADER_BYTES,
    ) -> None:
        if _BOUNDARY.fullmatch(boundary.decode("latin-1")) is None:
            raise ValueError("invalid multipart boundary")
        self._delim = b"\r\n--" + boundary
        self._max_parts = max_parts
        self._max_headers = max_headers
        self._max_header_bytes = max_header_bytes
        # The body is read as if it began with CRLF, so that a delimiter at
        # its very start (no preamble) is found like every other one.
        self._buf = bytearray(b"\r\n")
        self._headers: list[tuple[bytes, bytes]] = []
        self._header_bytes = 0
        self.parts = 0  # parts started so far
        self.state = MultipartState.PREAMBLE

    @property
    def done(self) -> bool:
        """True once the close delimiter is read."""
        return self.state is MultipartState.EPILOGUE

    @property
    def buffered(self) -> int:
        """Bytes held between two feeds (for the memory bound's tests)."""
        return len(self._buf)

    def _go(self, event: _Ev) -> None:
        self.state = _NEXT[(self.state, event)]

    def _fail(self, detail: str, status: int = 400) -> HTTPError:
        self.state = MultipartState.FAILED
        self._buf.clear()
        return HTTPError(status, f"multipart: {detail}")

    def feed(self, data: bytes | bytearray | memoryview) -> list[Event]:
        """Parse the next piece of the body; returns the events it completes.

        Raises :class:`HTTPError` (then the parser is FAILED) and
        :class:`RuntimeError` when fed after failing.
        """
        if self.state is MultipartState.FAILED:
            raise RuntimeError("multipart parser fed after failing")
        if self.state is MultipartState.EPILOGUE:
            return []
        self._buf += data
        out: list[Event] = []
        while self._step(out):
            pass
        return out

    def end(self) -> list[Event]:
        """The body is complete: raises 400 unless the close delimiter was
        read (a truncated body is never taken for a complete one)."""
        if self.state is not MultipartState.EPILOGUE:
            if self.state is MultipartState.FAILED:
                raise RuntimeError("multipart parser ended after failing")
            raise self._fail("body ends before the close delimiter")
        return []

    def _step(self, out: list[Event]) -> bool:
        """One transition's worth of work; False when more input is needed."""
        state = self.state
        if state is MultipartState.PREAMBLE or state is MultipartState.DATA:
            return self._scan(out)
        if state is MultipartState.BOUNDARY:
            return self._after_delimiter(out)
        if state is MultipartState.HEADERS:
            return self._header_line(out)
        self._buf.clear()  # EPILOGUE: ignored
        return False

    def _scan(self, out: list[Event]) -> bool:
        buf, delim = self._buf, self._delim
        at = buf.find(delim)
        data = self.state is MultipartState.DATA
        if at < 0:
            # Keep what could be the start of a delimiter; release the rest.
            keep = len(delim) - 1
            if len(buf) > keep:
                if data:
                    out.append(PartData(bytes(buf[:-keep])))
                del buf[:-keep]
            return False
        if data:
            if at:
                out.append(PartData(bytes(buf[:at])))
            out.append(PartEnd())
        del buf[: at + len(delim)]
        self._go(_Ev.DELIMITER)
        return True

    def _after_delimiter(self, out: list[Event]) -> bool:
        buf = self._buf
        if buf[:2] == b"--":
            if self.parts == 0:
                raise self._fail("no part before the close delimiter")
            self._go(_Ev.CLOSE)
            out.append(Done())
            buf.clear()
            return False
        if buf[:1] == b"-" and len(buf) == 1:
            return False
        padding = len(buf) - len(buf.lstrip(b" \t"))
        rest = buf[padding:]
        if padding > _MAX_PADDING:
            raise self._fail("transport padding too long")
        if not rest or rest == b"\r":
            return False
        if rest[:2] != b"\r\n":
            raise self._fail("delimiter followed by data (boundary inside a part?)")
        if self.parts == self._max_parts:
            raise self._fail("too many parts", 413)
        del buf[: padding + 2]
        self._go(_Ev.LINE_END)
        self._headers = []
        self._header_bytes = 0
        return True

    def _header_line(self, out: list[Event]) -> bool:
        buf = self._buf
        room = self._max_header_bytes - self._header_bytes  # this line and its CRLF
        lf = buf.find(b"\n", 0, max(room, 0))
        if lf < 0:
            if len(buf) >= room:
                raise self._fail("part header section too large", 413)
            return False
        if lf == 0 or buf[lf - 1] != 0x0D:
            raise self._fail("bare LF in part headers")
        line = bytes(buf[: lf - 1])
        del buf[: lf + 1]
        self._header_bytes += len(line) + 2
        if b"\r" in line:
            raise self._fail("bare CR in part headers")
        if not line:
            self._go(_Ev.BLANK)
            out.append(self._start())
            return True
        if line[:1] in (b" ", b"\t"):
            raise self._fail("obs-fold in part headers")
        match = _FIELD_LINE.fullmatch(line)
        if match is None:
            raise self._fail("malformed part header line")
        if len(self._headers) == self._max_headers:
            raise self._fail("too many part header fields", 413)
        self._headers.append((match.group(1).lower(), match.group(2)))
        self._go(_Ev.FIELD)
        return True

    def _start(self) -> PartStart:
        headers = tuple(self._headers)
        fields = dict(headers)
        if len(fields) != len(headers):
            raise self._fail("repeated part header field")
        cte = fields.get(b"content-transfer-encoding")
        if cte is not None and cte.lower() not in (b"7bit", b"8bit", b"binary"):
            raise self._fail("unsupported Content-Transfer-Encoding")
        disposition = fields.get(b"content-disposition")
        if disposition is None:
            raise self._fail("part without Content-Disposition")
        try:
            kind, params = _params(disposition.decode("utf-8", "surrogateescape"), "disposition")
        except HTTPError as exc:
            raise self._fail(exc.detail) from None
        name = params.get("name")
        if kind != "form-data" or name is None:
            raise self._fail("Content-Disposition is not form-data with a name")
        filename = params.get("filename")
        if "filename*" in params:
            filename = self._ext_value(params["filename*"])
        self.parts += 1
        return PartStart(headers, name, filename, fields.get(b"content-type"))

    def _ext_value(self, value: str) -> str:
        match = _EXT_VALUE.fullmatch(value)
        charset = _CHARSETS.get(match.group(1).lower()) if match else None
        if match is None or charset is None:
            raise self._fail("invalid filename* (RFC 5987)")
        try:
            return unquote_to_bytes(match.group(2)).decode(charset)
        except UnicodeDecodeError:
            raise self._fail("filename* does not decode") from None
