"""HTTP/1.1 request-body framing, pure (serverio.wire.bodyframe).

Which framing a head selects (RFC 9112 §6.3) and the chunked decoder
(RFC 9112 §7.1), table-tested: every valid case fed whole, one byte at a
time and followed by a pipelined next request (as h11's test_io.py does);
every invalid case refused however it is split.  Both tables are also run
through h11: whatever h11 refuses, serverio refuses too (the
request-smuggling defence must not be looser than h11's)."""

from __future__ import annotations

import itertools

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serverio.errors import HTTPError
from serverio.wire.bodyframe import (
    MAX_CHUNK_LINE,
    MAX_TRAILERS,
    ChunkedDecoder,
    ChunkState,
    Framing,
    FramingKind,
    request_framing,
)

H = list[tuple[bytes, bytes]]

# ------------------------------------------------------------ framing

FRAMING_OK: list[tuple[H, bytes, Framing]] = [
    ([], b"1.1", Framing(FramingKind.NONE)),
    ([(b"content-length", b"0")], b"1.1", Framing(FramingKind.LENGTH, 0)),
    ([(b"content-length", b"12")], b"1.1", Framing(FramingKind.LENGTH, 12)),
    # RFC 9110 §8.6: identical values, as a list or on several lines.
    ([(b"content-length", b"7, 7")], b"1.1", Framing(FramingKind.LENGTH, 7)),
    (
        [(b"content-length", b"7"), (b"content-length", b"7")],
        b"1.1",
        Framing(FramingKind.LENGTH, 7),
    ),
    ([(b"transfer-encoding", b"chunked")], b"1.1", Framing(FramingKind.CHUNKED)),
    ([(b"transfer-encoding", b"Chunked")], b"1.1", Framing(FramingKind.CHUNKED)),
    (
        [(b"content-length", b"5"), (b"expect", b"100-continue")],
        b"1.1",
        Framing(FramingKind.LENGTH, 5, True),
    ),
    (
        [(b"transfer-encoding", b"chunked"), (b"expect", b"100-Continue")],
        b"1.1",
        Framing(FramingKind.CHUNKED, None, True),
    ),
    # RFC 9110 §10.1.1: ignored in HTTP/1.0.
    (
        [(b"content-length", b"5"), (b"expect", b"100-continue")],
        b"1.0",
        Framing(FramingKind.LENGTH, 5, False),
    ),
    (
        [(b"content-length", b"5"), (b"expect", b"something-else")],
        b"1.1",
        Framing(FramingKind.LENGTH, 5, False),
    ),
    (
        [(b"content-length", b"9999999999999999999")],
        b"1.1",
        Framing(FramingKind.LENGTH, 9999999999999999999),
    ),
]

FRAMING_BAD: list[tuple[str, H, bytes, int]] = [
    ("CL and TE", [(b"content-length", b"3"), (b"transfer-encoding", b"chunked")], b"1.1", 400),
    ("TE and CL", [(b"transfer-encoding", b"chunked"), (b"content-length", b"3")], b"1.1", 400),
    ("two CLs", [(b"content-length", b"3"), (b"content-length", b"4")], b"1.1", 400),
    ("CL list", [(b"content-length", b"3, 4")], b"1.1", 400),
    ("CL sign", [(b"content-length", b"+3")], b"1.1", 400),
    ("CL negative", [(b"content-length", b"-1")], b"1.1", 400),
    ("CL hex", [(b"content-length", b"0x10")], b"1.1", 400),
    ("CL empty", [(b"content-length", b"")], b"1.1", 400),
    ("CL space inside", [(b"content-length", b"1 2")], b"1.1", 400),
    ("CL 20 digits", [(b"content-length", b"1" * 20)], b"1.1", 400),
    ("CL empty element", [(b"content-length", b"3,")], b"1.1", 400),
    ("TE identity", [(b"transfer-encoding", b"identity")], b"1.1", 400),
    ("TE gzip", [(b"transfer-encoding", b"gzip")], b"1.1", 400),
    ("TE chunked not final", [(b"transfer-encoding", b"chunked, gzip")], b"1.1", 400),
    ("TE chunked twice", [(b"transfer-encoding", b"chunked, chunked")], b"1.1", 400),
    (
        "TE two lines chunked",
        [(b"transfer-encoding", b"chunked"), (b"transfer-encoding", b"chunked")],
        b"1.1",
        400,
    ),
    ("TE empty", [(b"transfer-encoding", b"")], b"1.1", 400),
    ("TE chunked in 1.0", [(b"transfer-encoding", b"chunked")], b"1.0", 400),
    ("TE gzip then chunked", [(b"transfer-encoding", b"gzip, chunked")], b"1.1", 501),
    (
        "TE two lines gzip chunked",
        [(b"transfer-encoding", b"gzip"), (b"transfer-encoding", b"chunked")],
        b"1.1",
        501,
    ),
    ("TE empty element", [(b"transfer-encoding", b", chunked")], b"1.1", 501),
]


@pytest.mark.parametrize(("headers", "version", "want"), FRAMING_OK)
def test_framing_ok(headers: H, version: bytes, want: Framing) -> None:
    assert request_framing(headers, version) == want


@pytest.mark.parametrize(("name", "headers", "version", "status"), FRAMING_BAD)
def test_framing_refused(name: str, headers: H, version: bytes, status: int) -> None:
    with pytest.raises(HTTPError) as info:
        request_framing(headers, version)
    assert info.value.status == status
    assert info.value.close


def _h11_head(headers: H, version: bytes) -> str:
    """'ok' or 'refused': what h11's server side makes of the head."""
    conn = h11.Connection(h11.SERVER)
    lines = b"".join(n + b": " + v + b"\r\n" for n, v in headers)
    conn.receive_data(b"POST / HTTP/" + version + b"\r\nHost: a\r\n" + lines + b"\r\n")
    try:
        conn.next_event()
    except h11.RemoteProtocolError:
        return "refused"
    return "ok"


@pytest.mark.parametrize(
    ("headers", "version"),
    [(h, v) for h, v, _ in FRAMING_OK] + [(h, v) for _, h, v, _ in FRAMING_BAD],
)
def test_framing_at_least_as_strict_as_h11(headers: H, version: bytes) -> None:
    try:
        request_framing(headers, version)
        ours = "ok"
    except HTTPError:
        ours = "refused"
    if _h11_head(headers, version) == "refused":
        assert ours == "refused"


# ------------------------------------------------------------ chunked

NEXT = b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n"

CHUNKED_OK: list[tuple[str, bytes, bytes]] = [
    ("empty body", b"0\r\n\r\n", b""),
    ("one chunk", b"5\r\nhello\r\n0\r\n\r\n", b"hello"),
    ("two chunks", b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", b"hello world"),
    ("upper hex", b"A\r\n0123456789\r\n0\r\n\r\n", b"0123456789"),
    ("lower hex, leading zeros", b"000a\r\n0123456789\r\n0000\r\n\r\n", b"0123456789"),
    ("extension, no value", b"3;foo\r\nabc\r\n0\r\n\r\n", b"abc"),
    ("extension token value", b"3;foo=bar\r\nabc\r\n0\r\n\r\n", b"abc"),
    ("extensions with BWS", b"3; a = b ;c \r\nabc\r\n0;last\r\n\r\n", b"abc"),
    ("quoted extension", b'3;name="a \\"q\\" ;=\\\\"\r\nabc\r\n0\r\n\r\n', b"abc"),
    ("CRLF inside data", b"4\r\n\r\n\r\n\r\n0\r\n\r\n", b"\r\n\r\n"),
    ("binary data", b"3\r\n\x00\xff\n\r\n0\r\n\r\n", b"\x00\xff\n"),
    ("one trailer", b"3\r\nabc\r\n0\r\nDigest: x\r\n\r\n", b"abc"),
    ("trailers", b"3\r\nabc\r\n0\r\nA: 1\r\nB:\r\nC:  x y \t\r\n\r\n", b"abc"),
    ("16 hex digits", b"0000000000000003\r\nabc\r\n0\r\n\r\n", b"abc"),
]

CHUNKED_BAD: list[tuple[str, bytes]] = [
    ("no size", b"\r\nabc\r\n0\r\n\r\n"),
    ("not hex", b"g\r\nabc\r\n0\r\n\r\n"),
    ("sign", b"+3\r\nabc\r\n0\r\n\r\n"),
    ("0x prefix", b"0x3\r\nabc\r\n0\r\n\r\n"),
    ("17 hex digits", b"00000000000000003\r\nabc\r\n0\r\n\r\n"),
    ("space before size", b" 3\r\nabc\r\n0\r\n\r\n"),
    ("space before the first extension", b"3 ;a\r\nabc\r\n0\r\n\r\n"),
    ("trailing space, no extension", b"3 \r\nabc\r\n0\r\n\r\n"),
    ("bare LF after size", b"3\nabc\r\n0\r\n\r\n"),
    ("bare CR after size", b"3\rabc\r\n0\r\n\r\n"),
    ("bare LF after data", b"3\r\nabc\n0\r\n\r\n"),
    ("data too long", b"3\r\nabcd\r\n0\r\n\r\n"),
    ("data too short", b"3\r\nab\r\n0\r\n\r\n"),
    ("no CRLF after data", b"3\r\nabcX\r\n0\r\n\r\n"),
    ("extension without name", b"3;\r\nabc\r\n0\r\n\r\n"),
    ("extension =value", b"3;=x\r\nabc\r\n0\r\n\r\n"),
    ("extension unterminated quote", b'3;a="x\r\nabc\r\n0\r\n\r\n'),
    ("extension control char", b"3;a=\x01\r\nabc\r\n0\r\n\r\n"),
    ("bare LF after last chunk", b"0\n\r\n"),
    ("bare LF ending trailers", b"0\r\n\n"),
    ("bare LF after a trailer", b"0\r\nA: 1\n\r\n"),
    ("obs-fold in trailer", b"0\r\nA: 1\r\n continued\r\n\r\n"),
    ("trailer starts with space", b"0\r\n A: 1\r\n\r\n"),
    ("trailer without colon", b"0\r\nnot a field\r\n\r\n"),
    ("trailer space before colon", b"0\r\nA : 1\r\n\r\n"),
    ("trailer control char", b"0\r\nA: \x00\r\n\r\n"),
    ("size line too long", b"3;" + b"a" * MAX_CHUNK_LINE + b"\r\nabc\r\n0\r\n\r\n"),
    ("trailers too long", b"0\r\n" + b"A: " + b"x" * MAX_TRAILERS + b"\r\n\r\n"),
    ("many trailers too long", b"0\r\n" + b"A: xxxxxxx\r\n" * (MAX_TRAILERS // 12 + 1) + b"\r\n"),
]


def decode(data: bytes, step: int | None = None) -> tuple[bytes, bytes]:
    """(content, leftover), feeding ``data`` whole or ``step`` bytes at a time."""
    d = ChunkedDecoder()
    out: list[bytes] = []
    pieces = [data] if step is None else [data[i : i + step] for i in range(0, len(data), step)]
    for piece in pieces:
        if d.done:
            d.leftover += piece  # what a reader keeps past the end
            continue
        out += d.feed(piece)
    assert d.done
    return b"".join(out), d.leftover


@pytest.mark.parametrize(("name", "wire", "content"), CHUNKED_OK)
@pytest.mark.parametrize("step", [None, 1, 2, 7])
def test_chunked_ok(name: str, wire: bytes, content: bytes, step: int | None) -> None:
    assert decode(wire, step) == (content, b"")
    # Followed by a pipelined request: the same content, the rest exactly kept.
    assert decode(wire + NEXT, step) == (content, NEXT)


@pytest.mark.parametrize(("name", "wire"), CHUNKED_BAD)
@pytest.mark.parametrize("step", [None, 1, 3])
def test_chunked_refused(name: str, wire: bytes, step: int | None) -> None:
    d = ChunkedDecoder()
    pieces = [wire] if step is None else [wire[i : i + step] for i in range(0, len(wire), step)]
    with pytest.raises(HTTPError) as info:
        for piece in pieces:
            d.feed(piece)
        d.feed(NEXT)  # an incomplete body (too short) is refused by the garbage after it
    assert info.value.status == 400
    assert info.value.close
    assert d.state is ChunkState.FAILED
    with pytest.raises(RuntimeError):
        d.feed(b"0\r\n\r\n")  # a failed decoder accepts nothing more


def test_bad_bytes_fail_at_once() -> None:
    """Garbage after chunk-data is refused on its first byte, not after a
    line's worth of waiting."""
    d = ChunkedDecoder()
    assert d.feed(b"3\r\nabc") == [b"abc"]
    with pytest.raises(HTTPError):
        d.feed(b"X")


def test_long_size_line_refused_before_its_end() -> None:
    """A size line is refused as soon as it passes the bound, without
    waiting for (or buffering) more."""
    d = ChunkedDecoder()
    d.feed(b"3;" + b"a" * (MAX_CHUNK_LINE - 2))  # exactly at the bound: still fine
    with pytest.raises(HTTPError):
        d.feed(b"aa")


def test_data_is_streamed_not_buffered() -> None:
    """A large chunk's data is handed out as it arrives."""
    d = ChunkedDecoder()
    assert d.feed(b"100000\r\n" + b"x" * 10) == [b"x" * 10]
    assert d.state is ChunkState.DATA
    assert d.feed(b"y" * 5) == [b"y" * 5]


def test_fed_after_done() -> None:
    d = ChunkedDecoder()
    d.feed(b"0\r\n\r\nrest")
    assert d.done and d.leftover == b"rest"
    with pytest.raises(RuntimeError):
        d.feed(b"more")


def _h11_chunked(wire: bytes) -> bytes | None:
    """The content h11's server side decodes from ``wire``, or None when it
    refuses it (or does not see the end of the body)."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" + wire)
    out = b""
    try:
        while True:
            ev = conn.next_event()
            if isinstance(ev, h11.Data):
                out += ev.data
            elif isinstance(ev, h11.EndOfMessage):
                return out
            elif ev is h11.NEED_DATA:
                return None
    except h11.RemoteProtocolError:
        return None


@pytest.mark.parametrize("wire", [w for _, w, _ in CHUNKED_OK] + [w for _, w in CHUNKED_BAD])
def test_chunked_at_least_as_strict_as_h11(wire: bytes) -> None:
    theirs = _h11_chunked(wire)
    try:
        ours: bytes | None = decode(wire)[0]
    except HTTPError:
        ours = None
    if theirs is None:
        assert ours is None
    else:
        assert ours in (None, theirs)  # never a different body


# ------------------------------------------------------------ property

_token = st.text("abcXYZ019!#$%&'*+-.^_`|~", min_size=1, max_size=8).map(str.encode)
_qtext = st.text('ab \t!#[]~"\\', max_size=8).map(
    lambda s: b'"' + s.encode().replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'
)
_ext = st.tuples(_token, st.one_of(st.none(), _token, _qtext)).map(
    lambda nv: b";" + nv[0] + (b"" if nv[1] is None else b"=" + nv[1])
)


@st.composite
def _encoded(draw: st.DrawFn) -> tuple[bytes, bytes, list[int]]:
    body = draw(st.binary(max_size=600))
    wire = bytearray()
    pos = 0
    while pos < len(body):
        n = draw(st.integers(1, len(body) - pos))
        hexsize = format(n, draw(st.sampled_from(["x", "X", "04x"]))).encode()
        wire += hexsize + b"".join(draw(st.lists(_ext, max_size=3))) + b"\r\n"
        wire += body[pos : pos + n] + b"\r\n"
        pos += n
    wire += b"0" + b"".join(draw(st.lists(_ext, max_size=2))) + b"\r\n"
    for name in draw(st.lists(_token, max_size=3)):
        value = draw(st.binary(max_size=10)).hex().encode()
        wire += name + b": " + value + b"\r\n"
    wire += b"\r\n"
    cuts = sorted(draw(st.lists(st.integers(0, len(wire)), max_size=12)))
    return body, bytes(wire), cuts


@settings(max_examples=300, deadline=None)
@given(_encoded(), st.binary(max_size=40))
def test_chunked_roundtrip(case: tuple[bytes, bytes, list[int]], after: bytes) -> None:
    """Any body encoded in random chunk sizes with random extensions and
    trailers decodes to itself, split at any byte boundaries; the bytes
    after it come back exactly."""
    body, wire, cuts = case
    data = wire + after
    d = ChunkedDecoder()
    out: list[bytes] = []
    bounds = [0, *cuts, len(data)]
    rest = b""
    for a, b in itertools.pairwise(bounds):
        piece = data[a:b]
        if d.done:
            rest += piece
        else:
            out += d.feed(piece)
    assert d.done
    assert b"".join(out) == body
    assert d.leftover + rest == after
