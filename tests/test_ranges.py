"""Byte ranges (RFC 9110 §14): parsing, coalescing, multipart/byteranges,
416, the amplification guard; pure, table-driven, no event loop.  The cases
include Go net/http's ``fs_test.go`` range table."""

from __future__ import annotations

import pytest

from serverio.config import Config
from serverio.http.core import (
    UNSATISFIABLE,
    FileSpan,
    coalesce,
    decide_file,
    multipart_body,
    parse_range,
)

from .core_tables import (
    CFG,
    DATA,
    ETAG,
    NOW,
    file_facts,
    header_map,
    materialise,
    request,
)

# ------------------------------------------------------------------- ranges

U = UNSATISFIABLE
HUGE = "9" * 30


@pytest.mark.parametrize(
    ("value", "size", "expected"),
    [
        # size 10: first/last positions, clamping, suffixes.
        ("bytes=0-4", 10, [(0, 5)]),
        ("bytes=0-0", 10, [(0, 1)]),
        ("bytes=2-", 10, [(2, 10)]),
        ("bytes=0-", 10, [(0, 10)]),
        ("bytes=-5", 10, [(5, 10)]),
        ("bytes=-1", 10, [(9, 10)]),
        ("bytes=-10", 10, [(0, 10)]),
        ("bytes=-11", 10, [(0, 10)]),  # suffix larger than the file
        ("bytes=-999999999999", 10, [(0, 10)]),
        ("bytes=9-9", 10, [(9, 10)]),  # size-1
        ("bytes=9-", 10, [(9, 10)]),
        ("bytes=9-10", 10, [(9, 10)]),
        ("bytes=0-9", 10, [(0, 10)]),
        ("bytes=0-10", 10, [(0, 10)]),  # size: clamped
        ("bytes=0-11", 10, [(0, 10)]),  # size+1: clamped
        ("bytes=3-999999999999", 10, [(3, 10)]),
        ("bytes=10-", 10, U),  # first == size
        ("bytes=10-10", 10, U),
        ("bytes=11-", 10, U),  # size+1
        ("bytes=11-20", 10, U),
        ("bytes=-0", 10, U),  # suffix 0
        # size 0: nothing is satisfiable.
        ("bytes=0-", 0, U),
        ("bytes=0-0", 0, U),
        ("bytes=-1", 0, U),
        ("bytes=-0", 0, U),
        ("bytes=1-", 0, U),
        # size 1
        ("bytes=0-0", 1, [(0, 1)]),
        ("bytes=0-", 1, [(0, 1)]),
        ("bytes=0-1", 1, [(0, 1)]),
        ("bytes=0-2", 1, [(0, 1)]),
        ("bytes=-1", 1, [(0, 1)]),
        ("bytes=-2", 1, [(0, 1)]),
        ("bytes=1-", 1, U),
        ("bytes=1-1", 1, U),
        ("bytes=2-", 1, U),
        # size 2
        ("bytes=1-1", 2, [(1, 2)]),
        ("bytes=1-", 2, [(1, 2)]),
        ("bytes=0-2", 2, [(0, 2)]),
        ("bytes=0-3", 2, [(0, 2)]),
        ("bytes=-1", 2, [(1, 2)]),
        ("bytes=-3", 2, [(0, 2)]),
        ("bytes=2-", 2, U),
        ("bytes=3-", 2, U),
        # Several members: request order kept, unsatisfiable members dropped.
        ("bytes=0-0,-2", 10, [(0, 1), (8, 10)]),
        ("bytes=5-,0-1", 10, [(5, 10), (0, 2)]),
        ("bytes=10-,0-0", 10, [(0, 1)]),
        ("bytes=0-0,-0", 10, [(0, 1)]),
        ("bytes=10-,11-,-0", 10, U),
        # Whitespace around members and empty members (RFC 9110 §5.6.1).
        ("bytes= 0-1 , 3-4 ", 10, [(0, 2), (3, 5)]),
        ("bytes=\t0-1\t", 10, [(0, 2)]),
        ("bytes=, 0-1,", 10, [(0, 2)]),
        ("bytes=,,0-1,,", 10, [(0, 2)]),
        ("Bytes=0-1", 10, [(0, 2)]),  # range units are case-insensitive (§14.1)
        # Ignored (None -> 200): malformed or another unit.
        ("bytes=", 10, None),
        ("bytes=,", 10, None),
        ("bytes= , ", 10, None),
        ("bytes=5-1", 10, None),  # last < first
        ("bytes=0-1,5-1", 10, None),
        ("bytes=0-1,junk", 10, None),
        ("bytes=abc", 10, None),
        ("bytes=0", 10, None),
        ("bytes=-", 10, None),
        ("bytes=0-1-2", 10, None),
        ("bytes=--1", 10, None),
        ("bytes=1--2", 10, None),
        ("bytes=+1-2", 10, None),
        ("bytes=1-+2", 10, None),
        ("bytes=-+1", 10, None),
        ("bytes=1 0-20", 10, None),  # space inside a number
        ("bytes=0-1 0", 10, None),
        ("bytes=0x1-2", 10, None),
        ("bytes=1.5-2", 10, None),
        ("bytes=\u0661-2", 10, None),  # a non-ASCII digit
        ("bytes=0-1;2-3", 10, None),
        ("bytes 0-1", 10, None),  # missing '='
        ("0-1", 10, None),
        ("=0-1", 10, None),
        ("", 10, None),
        ("items=0-1", 10, None),
        ("bytesx=0-1", 10, None),
        # Numbers of 30+ digits: ignored, never parsed in full.
        (f"bytes={HUGE}-", 10, None),
        (f"bytes=0-{HUGE}", 10, None),
        (f"bytes=-{HUGE}", 10, None),
        (f"bytes={HUGE}-{HUGE}9", 10, None),
        (f"bytes=0-{'1' * 5000}", 10, None),  # beyond Python's int() digit limit
    ],
)
def test_parse_range(
    value: str, size: int, expected: list[tuple[int, int]] | object | None
) -> None:
    assert parse_range(value, size) == expected


@pytest.mark.parametrize(
    ("spans", "expected"),
    [
        ([], []),
        ([(0, 1)], [(0, 1)]),
        ([(0, 2), (2, 4)], [(0, 4)]),  # adjacent
        ([(0, 3), (1, 2)], [(0, 3)]),  # contained
        ([(0, 3), (2, 5)], [(0, 5)]),  # overlapping
        ([(5, 7), (0, 2)], [(0, 2), (5, 7)]),  # sorted
        ([(0, 2), (3, 4)], [(0, 2), (3, 4)]),  # a one-byte gap stays
        ([(4, 6), (0, 1), (1, 4), (8, 9)], [(0, 6), (8, 9)]),
        ([(3, 4), (3, 4)], [(3, 4)]),
    ],
)
def test_coalesce(spans: list[tuple[int, int]], expected: list[tuple[int, int]]) -> None:
    assert coalesce(spans) == expected


# Go net/http fs_test.go ServeFileRangeTests (testFileLen = 11), status and
# parts.  Go does not coalesce, but none of these cases overlap or touch.
GO_LEN = 11


@pytest.mark.parametrize(
    ("value", "status", "parts"),
    [
        ("", 200, None),
        ("bytes=0-4", 206, [(0, 5)]),
        ("bytes=2-", 206, [(2, GO_LEN)]),
        ("bytes=-5", 206, [(GO_LEN - 5, GO_LEN)]),
        ("bytes=3-7", 206, [(3, 8)]),
        ("bytes=0-0,-2", 206, [(0, 1), (GO_LEN - 2, GO_LEN)]),
        ("bytes=0-1,5-8", 206, [(0, 2), (5, 9)]),
        ("bytes=0-1,5-", 206, [(0, 2), (5, GO_LEN)]),
        ("bytes=5-1000", 206, [(5, GO_LEN)]),
        ("bytes=0-,1-,2-,3-,4-", 200, None),  # ignore wasteful range request
        ("bytes=0-9", 206, [(0, GO_LEN - 1)]),
        ("bytes=0-10", 206, [(0, GO_LEN)]),
        ("bytes=0-11", 206, [(0, GO_LEN)]),
        ("bytes=10-11", 206, [(GO_LEN - 1, GO_LEN)]),
        ("bytes=10-", 206, [(GO_LEN - 1, GO_LEN)]),
        ("bytes=11-", 416, None),
        ("bytes=11-12", 416, None),
        ("bytes=12-12", 416, None),
        ("bytes=11-100", 416, None),
        ("bytes=12-100", 416, None),
        ("bytes=100-", 416, None),
        ("bytes=100-1000", 416, None),
    ],
)
def test_go_serve_file_range_table(
    value: str, status: int, parts: list[tuple[int, int]] | None
) -> None:
    data = b"0123456789\n"
    facts = file_facts(size=GO_LEN, ctype="text/plain; charset=utf-8")
    req = request(range=value or None)
    plan = decide_file(req, facts, CFG, NOW, boundary="gOb0unDaRy")
    assert plan.status == status
    hs = header_map(plan)
    if status == 416:
        assert hs[b"content-range"] == b"bytes */11"
        return
    body = materialise(plan.body, data)
    assert hs[b"content-length"] == b"%d" % len(body)
    if parts is None:
        assert body == data and b"content-range" not in hs
    elif len(parts) == 1:
        ((start, end),) = parts
        assert body == data[start:end]
        assert hs[b"content-range"] == b"bytes %d-%d/11" % (start, end - 1)
    else:
        assert hs[b"content-type"] == b"multipart/byteranges; boundary=gOb0unDaRy"
        got = parse_multipart(body, b"gOb0unDaRy")
        assert [p for _, p in got] == [data[s:e] for s, e in parts]
        assert [h[b"content-range"] for h, _ in got] == [
            b"bytes %d-%d/11" % (s, e - 1) for s, e in parts
        ]


def parse_multipart(body: bytes, boundary: bytes) -> list[tuple[dict[bytes, bytes], bytes]]:
    """A strict multipart/byteranges reader (RFC 9110 §14.6, RFC 2046 §5.1.1)."""
    first = b"--" + boundary + b"\r\n"
    between = b"\r\n--" + boundary + b"\r\n"
    final = b"\r\n--" + boundary + b"--\r\n"
    assert body.startswith(first), body[:40]
    assert body.endswith(final), body[-40:]
    assert body.count(final) == 1
    parts: list[tuple[dict[bytes, bytes], bytes]] = []
    for chunk in body[len(first) : -len(final)].split(between):
        head, sep, payload = chunk.partition(b"\r\n\r\n")
        assert sep, chunk
        headers: dict[bytes, bytes] = {}
        for line in head.split(b"\r\n"):
            assert b"\n" not in line and b"\r" not in line
            name, colon, value = line.partition(b":")
            assert colon and name == name.strip() and name.lower() not in headers
            headers[name.lower()] = value.strip()
        assert set(headers) == {b"content-type", b"content-range"}
        parts.append((headers, payload))
    return parts


@pytest.mark.parametrize(
    ("value", "parts"),
    [
        ("bytes=0-1,5-7,-3", [(0, 2), (5, 8), (37, 40)]),
        ("bytes=30-,0-0", [(0, 1), (30, 40)]),  # sorted
        ("bytes=0-1,3-4", [(0, 2), (3, 5)]),
        ("bytes=0-4,3-6,20-21", [(0, 7), (20, 22)]),  # overlap coalesced
        ("bytes=0-1,2-3,10-11", [(0, 4), (10, 12)]),  # adjacency coalesced
        ("bytes=20-,-20", [(20, 40)]),  # sum == size: allowed, one part
        ("bytes=-1,-2,-3", [(37, 40)]),
    ],
)
def test_multipart_byteranges(value: str, parts: list[tuple[int, int]]) -> None:
    boundary = "3d6b6a416f9b5"
    plan = decide_file(request(range=value), file_facts(), CFG, NOW, boundary=boundary)
    assert plan.status == 206 and plan.send_body and plan.needs_file
    hs = header_map(plan)
    body = materialise(plan.body, DATA)
    # Framing: the header, the pieces and the written bytes all agree.
    assert int(hs[b"content-length"]) == sum(len(p) for p in plan.body) == len(body)
    assert plan.file_bytes == sum(e - s for s, e in parts)
    assert hs[b"accept-ranges"] == b"bytes" and hs[b"etag"] == ETAG.encode()
    if len(parts) == 1:
        ((start, end),) = parts
        assert hs[b"content-type"] == b"text/plain"
        assert hs[b"content-range"] == b"bytes %d-%d/40" % (start, end - 1)
        assert body == DATA[start:end]
        return
    assert hs[b"content-type"] == b"multipart/byteranges; boundary=" + boundary.encode()
    assert b"content-range" not in hs
    # Literal pieces use CRLF only (no bare LF or CR).
    for piece in plan.body:
        if isinstance(piece, bytes):
            assert b"\n" not in piece.replace(b"\r\n", b"")
            assert b"\r" not in piece.replace(b"\r\n", b"")
    got = parse_multipart(body, boundary.encode())
    assert [p for _, p in got] == [DATA[s:e] for s, e in parts]
    for (headers, _), (s, e) in zip(got, parts, strict=True):
        assert headers[b"content-type"] == b"text/plain"
        assert headers[b"content-range"] == b"bytes %d-%d/40" % (s, e - 1)


def test_multipart_body_exact_bytes() -> None:
    body = multipart_body([(0, 2), (5, 6)], 10, b"image/png", b"XY")
    assert body == (
        b"--XY\r\ncontent-type: image/png\r\ncontent-range: bytes 0-1/10\r\n\r\n",
        FileSpan(0, 2),
        b"\r\n--XY\r\ncontent-type: image/png\r\ncontent-range: bytes 5-5/10\r\n\r\n",
        FileSpan(5, 1),
        b"\r\n--XY--\r\n",
    )


@pytest.mark.parametrize(
    ("value", "max_ranges", "boundary", "status"),
    [
        ("bytes=0-0,2-2,4-4", 3, "b", 206),
        ("bytes=0-0,2-2,4-4,6-6", 3, "b", 200),  # more than max_ranges
        ("bytes=0-0,2-2", 1, "b", 200),
        ("bytes=0-0,1-1", 1, "b", 200),  # counted before coalescing
        ("bytes=0-,0-", 16, "b", 200),  # sums beyond the size
        ("bytes=0-,-1", 16, "b", 200),
        ("bytes=0-19,20-", 16, "b", 206),  # sums to exactly the size
        ("bytes=0-1,5-6", 16, "", 200),  # several ranges but no boundary
        ("bytes=0-1,2-3", 16, "", 206),  # ...coalesced into one: no boundary needed
    ],
)
def test_range_amplification_guard(value: str, max_ranges: int, boundary: str, status: int) -> None:
    plan = decide_file(
        request(range=value), file_facts(), Config.of(max_ranges=max_ranges), NOW, boundary
    )
    assert plan.status == status
    if status == 200:
        assert plan.body == (FileSpan(0, len(DATA)),)
        assert header_map(plan)[b"content-length"] == b"40"


@pytest.mark.parametrize("value", ["bytes=999-", "bytes=-0", "bytes=40-40,41-"])
def test_unsatisfiable_is_416_with_content_range(value: str) -> None:
    plan = decide_file(request(range=value), file_facts(), CFG, NOW, "b")
    assert plan.status == 416
    hs = header_map(plan)
    assert hs[b"content-range"] == b"bytes */40"
    assert not plan.needs_file
    assert int(hs[b"content-length"]) == len(materialise(plan.body, b""))


def test_empty_file_range_is_416_and_plain_get_is_empty_200() -> None:
    facts = file_facts(size=0)
    plan = decide_file(request(range="bytes=0-"), facts, CFG, NOW)
    assert plan.status == 416 and header_map(plan)[b"content-range"] == b"bytes */0"
    plain = decide_file(request(), facts, CFG, NOW)
    assert plain.status == 200 and header_map(plain)[b"content-length"] == b"0"
    assert materialise(plain.body, b"") == b"" and not plain.needs_file


@pytest.mark.parametrize("value", ["bytes=0-1", "bytes=999-", "bytes=0-1,3-4", "bytes=x"])
def test_range_is_ignored_for_head(value: str) -> None:
    plan = decide_file(request(b"HEAD", range=value), file_facts(), CFG, NOW, "b")
    assert plan.status == 200 and not plan.send_body
    hs = header_map(plan)
    assert hs[b"content-length"] == b"40" and b"content-range" not in hs


@pytest.mark.parametrize(
    "value", ["bytes=5-1", "items=0-1", "bytes 0-1", f"bytes=0-{HUGE}", "bytes=+0-1"]
)
def test_malformed_range_is_full_200(value: str) -> None:
    plan = decide_file(request(range=value), file_facts(), CFG, NOW, "b")
    assert plan.status == 200
    assert materialise(plan.body, DATA) == DATA
