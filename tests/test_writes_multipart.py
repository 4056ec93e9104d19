"""The streaming multipart/form-data parser (serverio.writes.multipart).

Every valid body is parsed whole, one byte at a time and split at random
points, with the same result; every hostile body is refused however it is
split; a hypothesis round trip builds bodies from random parts; memory
stays bounded by the delimiter's length whatever the part size."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serverio.errors import HTTPError
from serverio.fs.names import UnsafeName, reduce_name
from serverio.writes.multipart import (
    MAX_PART_HEADER_BYTES,
    Done,
    Event,
    MultipartParser,
    MultipartState,
    PartData,
    PartEnd,
    PartStart,
    boundary_of,
)

B = b"----b0undary"

# A part as the parser reports it: (name, filename, content).
Part = tuple[str, str | None, bytes]


def splits(body: bytes, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(body)), min(len(body) - 1, 7))) if len(body) > 1 else []
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]


def feeds(body: bytes) -> list[list[bytes]]:
    return [[body], [body[i : i + 1] for i in range(len(body))]] + [
        splits(body, seed) for seed in range(5)
    ]


def parse(pieces: list[bytes], boundary: bytes = B, **limits: int) -> list[Event]:
    parser = MultipartParser(boundary, **limits)
    events: list[Event] = []
    for piece in pieces:
        events += parser.feed(piece)
    events += parser.end()
    return events


def parts_of(events: list[Event]) -> list[Part]:
    """Fold events into parts, checking their order on the way."""
    out: list[Part] = []
    current: tuple[str, str | None, bytearray] | None = None
    assert isinstance(events[-1], Done)
    for ev in events[:-1]:
        if isinstance(ev, PartStart):
            assert current is None
            current = (ev.name, ev.filename, bytearray())
        elif isinstance(ev, PartData):
            assert current is not None and ev.data
            current[2].extend(ev.data)
        elif isinstance(ev, PartEnd):
            assert current is not None
            out.append((current[0], current[1], bytes(current[2])))
            current = None
        else:
            raise AssertionError(f"Done before the end: {events}")
    assert current is None
    return out


def part(headers: list[bytes], content: bytes) -> bytes:
    return (
        b"--" + B + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + content + b"\r\n"
    )


def field(name: bytes, content: bytes) -> bytes:
    return part([b'Content-Disposition: form-data; name="' + name + b'"'], content)


def upload(filename: bytes, content: bytes, name: bytes = b"file") -> bytes:
    return part(
        [
            b'Content-Disposition: form-data; name="' + name + b'"; filename="' + filename + b'"',
            b"Content-Type: application/octet-stream",
        ],
        content,
    )


END = b"--" + B + b"--\r\n"

VALID: list[tuple[str, bytes, list[Part]]] = [
    ("one field", field(b"a", b"1") + END, [("a", None, b"1")]),
    ("empty content", field(b"a", b"") + END, [("a", None, b"")]),
    (
        "two files",
        upload(b"a.txt", b"hello\r\n") + upload(b"b.bin", b"\x00\xff\r\n--") + END,
        [("file", "a.txt", b"hello\r\n"), ("file", "b.bin", b"\x00\xff\r\n--")],
    ),
    ("preamble", b"this is ignored\r\n" + field(b"a", b"x") + END, [("a", None, b"x")]),
    (
        "preamble with a fake boundary",
        b"x--" + B + b"\r\n" + field(b"a", b"x") + END,
        [("a", None, b"x")],
    ),
    (
        "epilogue",
        field(b"a", b"x") + END + b"trailing epilogue --" + B + b"\r\n",
        [("a", None, b"x")],
    ),
    ("close delimiter without CRLF", field(b"a", b"x") + b"--" + B + b"--", [("a", None, b"x")]),
    (
        "transport padding",
        b"--" + B + b" \t\r\n" + b'Content-Disposition: form-data; name="a"\r\n\r\nx\r\n' + END,
        [("a", None, b"x")],
    ),
    (
        "boundary-like data",
        field(b"a", b"--" + B + b"x --" + B + b"\n--" + B) + END,
        [("a", None, b"--" + B + b"x --" + B + b"\n--" + B)],
    ),
    ("CR LF inside data", field(b"a", b"\r\n\r\n-\r\n--") + END, [("a", None, b"\r\n\r\n-\r\n--")]),
    (
        "unquoted name",
        part([b"Content-Disposition: form-data; name=a"], b"1") + END,
        [("a", None, b"1")],
    ),
    (
        "case and spacing",
        part([b'content-DISPOSITION:Form-Data ;NAME = "a"  '], b"1") + END,
        [("a", None, b"1")],
    ),
    ("quoted-pair", upload(b'say \\"hi\\".txt', b"") + END, [("file", 'say "hi".txt', b"")]),
    (
        "windows path",
        upload(b"C:\\Users\\me\\a.txt", b"") + END,
        [("file", "C:\\Users\\me\\a.txt", b"")],
    ),
    (
        "traversal kept for reduce_name",
        upload(b"../../etc/passwd", b"") + END,
        [("file", "../../etc/passwd", b"")],
    ),
    (
        "utf-8 filename",
        upload("r\u00e9sum\u00e9.pdf".encode(), b"") + END,
        [("file", "r\u00e9sum\u00e9.pdf", b"")],
    ),
    ("empty filename (no file chosen)", upload(b"", b"") + END, [("file", "", b"")]),
    (
        "filename* preferred",
        part(
            [
                b'Content-Disposition: form-data; name=f; filename="fallback.txt"; '
                b"filename*=UTF-8''%E2%82%AC%20rates.txt"
            ],
            b"x",
        )
        + END,
        [("f", "\u20ac rates.txt", b"x")],
    ),
    (
        "filename* latin-1",
        part([b"Content-Disposition: form-data; name=f; filename*=iso-8859-1'en'%A3.txt"], b"x")
        + END,
        [("f", "\u00a3.txt", b"x")],
    ),
    (
        "content-transfer-encoding binary",
        part(
            [b"Content-Disposition: form-data; name=a", b"Content-Transfer-Encoding: binary"], b"1"
        )
        + END,
        [("a", None, b"1")],
    ),
]


@pytest.mark.parametrize(("label", "body", "expected"), VALID, ids=[v[0] for v in VALID])
def test_valid_bodies_parse_the_same_however_split(
    label: str, body: bytes, expected: list[Part]
) -> None:
    for pieces in feeds(body):
        assert parts_of(parse(pieces)) == expected, label


def test_part_start_carries_headers_and_content_type() -> None:
    events = parse([upload(b"a.txt", b"x") + END])
    start = events[0]
    assert isinstance(start, PartStart)
    assert start.content_type == b"application/octet-stream"
    assert start.headers[0][0] == b"content-disposition"
    assert [type(e) for e in events] == [PartStart, PartData, PartEnd, Done]


HOSTILE: list[tuple[str, bytes, int]] = [
    ("empty body", b"", 400),
    ("no delimiter at all", b"just some bytes", 400),
    ("truncated in data", field(b"a", b"xyz")[:-5], 400),
    ("truncated in headers", b"--" + B + b"\r\nContent-Disposition: form-da", 400),
    ("truncated after a part", field(b"a", b"x"), 400),
    ("truncated close delimiter", field(b"a", b"x") + b"--" + B + b"-", 400),
    ("close delimiter first", END, 400),
    ("boundary inside data", field(b"a", b"x\r\n--" + B + b"X") + END, 400),
    ("delimiter then junk", b"--" + B + b"junk\r\n" + END, 400),
    ("bare LF after delimiter", b"--" + B + b"\n" + END, 400),
    (
        "bare LF in headers",
        b"--" + B + b"\r\nContent-Disposition: form-data; name=a\n\r\nx\r\n" + END,
        400,
    ),
    ("bare CR in headers", part([b"Content-Disposition: form-data; name=a\rX: y"], b"") + END, 400),
    ("obs-fold", part([b"Content-Disposition: form-data;", b" name=a"], b"") + END, 400),
    ("header without colon", part([b"Content-Disposition form-data"], b"") + END, 400),
    (
        "NUL in a header value",
        part([b'Content-Disposition: form-data; name="a\x00"'], b"") + END,
        400,
    ),
    ("no disposition", part([b"Content-Type: text/plain"], b"x") + END, 400),
    ("not form-data", part([b"Content-Disposition: attachment; name=a"], b"x") + END, 400),
    ("no name", part([b"Content-Disposition: form-data; filename=a"], b"x") + END, 400),
    (
        "two dispositions",
        part(
            [b"Content-Disposition: form-data; name=a", b"Content-Disposition: form-data; name=b"],
            b"x",
        )
        + END,
        400,
    ),
    (
        "two filenames",
        part([b'Content-Disposition: form-data; name=a; filename="x"; filename="../y"'], b"") + END,
        400,
    ),
    ("unterminated quote", part([b'Content-Disposition: form-data; name="a'], b"") + END, 400),
    ("quote in token", part([b'Content-Disposition: form-data; name=a"b'], b"") + END, 400),
    (
        "bad filename*",
        part([b"Content-Disposition: form-data; name=a; filename*=%2e%2e"], b"") + END,
        400,
    ),
    (
        "filename* charset",
        part([b"Content-Disposition: form-data; name=a; filename*=koi8-r''x"], b"") + END,
        400,
    ),
    (
        "filename* not utf-8",
        part([b"Content-Disposition: form-data; name=a; filename*=UTF-8''%FF"], b"") + END,
        400,
    ),
    (
        "base64 transfer encoding",
        part(
            [b"Content-Disposition: form-data; name=a", b"Content-Transfer-Encoding: base64"],
            b"eA==",
        )
        + END,
        400,
    ),
    (
        "huge header",
        part(
            [b"Content-Disposition: form-data; name=a", b"X: " + b"y" * MAX_PART_HEADER_BYTES], b""
        )
        + END,
        413,
    ),
    ("endless header line", b"--" + B + b"\r\n" + b"X" * (MAX_PART_HEADER_BYTES + 10), 413),
    (
        "many headers",
        part([b"Content-Disposition: form-data; name=a"] + [b"X-%d: 1" % i for i in range(20)], b"")
        + END,
        413,
    ),
    ("endless padding", b"--" + B + b" " * 100 + b"\r\n", 400),
    ("many parts", field(b"a", b"") * 257 + END, 413),
]


@pytest.mark.parametrize(("label", "body", "status"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_bodies_are_refused_however_split(label: str, body: bytes, status: int) -> None:
    for pieces in feeds(body) if len(body) < 4000 else [[body], splits(body, 1)]:
        parser = MultipartParser(B)
        with pytest.raises(HTTPError) as info:
            for piece in pieces:
                parser.feed(piece)
            parser.end()
        assert info.value.status == status, label
        assert parser.state is MultipartState.FAILED
        with pytest.raises(RuntimeError):
            parser.feed(b"more")


def test_a_boundary_inside_content_is_refused_not_taken_as_data() -> None:
    # RFC 2046 §5.1.1: the delimiter must not appear in a part.  A lenient
    # parser would take "--B" + "X" for content; two parsers that disagree
    # on where a part ends are how a filter is bypassed.
    body = field(b"a", b"x\r\n--" + B + b"X-more") + END
    with pytest.raises(HTTPError, match="boundary inside a part"):
        parse([body])


def test_limits_are_the_callers_to_choose() -> None:
    body = field(b"a", b"") * 3 + END
    assert len(parts_of(parse([body], max_parts=3))) == 3
    with pytest.raises(HTTPError) as info:
        parse([body], max_parts=2)
    assert info.value.status == 413


def test_hostile_file_names_are_refused_or_reduced_by_names() -> None:
    # The parser reports the filename as sent; reduce_name decides.
    sent = {
        b"../../etc/passwd": "passwd",
        b"C:\\\\Windows\\\\win.ini": "win.ini",  # quoted-pair: one backslash each
        b"..": None,
        b".env": None,
        b"CON.txt": None,
        b"a\\\\": None,
    }
    for raw, expected in sent.items():
        (start, *_rest) = parse([upload(raw, b"") + END])
        assert isinstance(start, PartStart) and start.filename is not None
        if expected is None:
            with pytest.raises(UnsafeName):
                reduce_name(start.filename)
        else:
            assert reduce_name(start.filename) == expected


def test_memory_stays_bounded_by_the_delimiter() -> None:
    parser = MultipartParser(B)
    head = b"--" + B + b'\r\nContent-Disposition: form-data; name="f"; filename="big"\r\n\r\n'
    events = parser.feed(head)
    released = 0
    chunk = bytes(range(256)) * 256  # 64 KiB, no CR: never a delimiter start
    for _ in range(64):  # 4 MiB through
        for ev in parser.feed(chunk):
            assert isinstance(ev, PartData)
            released += len(ev.data)
        assert parser.buffered < len(B) + 4
    events = parser.feed(b"\r\n" + END)
    assert isinstance(events[-1], Done)
    assert released + sum(len(e.data) for e in events if isinstance(e, PartData)) == 64 * len(chunk)


def test_fed_after_done_ignores_the_epilogue() -> None:
    parser = MultipartParser(B)
    parser.feed(field(b"a", b"x") + END)
    assert parser.done
    assert parser.feed(b"--" + B + b"\r\nanything") == []
    assert parser.end() == []


def test_an_invalid_boundary_is_a_programming_error() -> None:
    for bad in (b"", b"x" * 71, b"ends with space ", b"semi;colon"):
        with pytest.raises(ValueError):
            MultipartParser(bad)


# ------------------------------------------------------------ boundary_of

BOUNDARIES: list[tuple[bytes, bytes]] = [
    (b"multipart/form-data; boundary=abc", b"abc"),
    (b'multipart/form-data; boundary="abc def"', b"abc def"),
    (
        b"Multipart/Form-Data;BOUNDARY=----WebKitFormBoundary7MA4YWxkTrZu0gW",
        b"----WebKitFormBoundary7MA4YWxkTrZu0gW",
    ),
    (b'multipart/form-data; charset=utf-8; boundary="\'()+_,-./:=?"', b"'()+_,-./:=?"),
    (b"multipart/form-data; boundary=" + b"x" * 70, b"x" * 70),
]


@pytest.mark.parametrize(("value", "boundary"), BOUNDARIES)
def test_boundary_of(value: bytes, boundary: bytes) -> None:
    assert boundary_of(value) == boundary


@pytest.mark.parametrize(
    ("value", "status"),
    [
        (b"application/x-www-form-urlencoded", 415),
        (b"multipart/mixed; boundary=abc", 415),
        (b"multipart/form-datax; boundary=abc", 415),
        (b"multipart/form-data", 400),
        (b"multipart/form-data; boundary=", 400),
        (b'multipart/form-data; boundary=""', 400),
        (b"multipart/form-data; boundary=" + b"x" * 71, 400),
        (b'multipart/form-data; boundary="trailing "', 400),
        (b'multipart/form-data; boundary="semi;colon"', 400),
        (b"multipart/form-data; boundary=a; boundary=b", 400),
        (b"multipart/form-data; boundary", 400),
    ],
)
def test_boundary_of_refuses(value: bytes, status: int) -> None:
    with pytest.raises(HTTPError) as info:
        boundary_of(value)
    assert info.value.status == status


# ------------------------------------------------------------ round trip

_names = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cc", "Cs"), exclude_characters='"\\'),
    min_size=1,
    max_size=12,
)
_parts = st.lists(
    st.tuples(_names, st.one_of(st.none(), _names), st.binary(max_size=200)), min_size=1, max_size=6
)


def build(parts: list[Part], boundary: bytes, preamble: bytes, epilogue: bytes) -> bytes:
    out = [preamble + b"\r\n" if preamble else b""]
    for name, filename, content in parts:
        disposition = b'Content-Disposition: form-data; name="' + name.encode() + b'"'
        if filename is not None:
            disposition += b'; filename="' + filename.encode() + b'"'
        out.append(b"--" + boundary + b"\r\n" + disposition + b"\r\n\r\n" + content + b"\r\n")
    out.append(b"--" + boundary + b"--\r\n" + epilogue)
    return b"".join(out)


@settings(max_examples=200, deadline=None)
@given(
    _parts,
    st.binary(min_size=1, max_size=40).filter(lambda b: b"\r\n--" not in b),
    st.binary(max_size=40),
    st.randoms(use_true_random=False),
)
def test_round_trip(
    parts: list[Part], preamble: bytes, epilogue: bytes, rng: random.Random
) -> None:
    boundary = b"rt" + bytes(rng.choice(b"0123456789abcdefXYZ'()+_,-./:=?") for _ in range(20))
    if any(boundary in p[2] for p in parts) or b"--" + boundary in preamble:
        return  # a sender picks a boundary that its content does not contain
    body = build(parts, boundary, preamble, epilogue)
    cuts = sorted(rng.sample(range(1, len(body)), min(10, len(body) - 1)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    assert parts_of(parse(pieces, boundary)) == parts
