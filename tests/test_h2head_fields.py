"""The pure request-head layer: HTTP/2 header-block checks and the header
field mapping both protocols share."""

from __future__ import annotations

import pytest

from serverio.errors import HTTPError
from serverio.wire import h2head
from serverio.wire.fields import scan_fields
from serverio.wire.h2head import MalformedRequest, RequestHeads, parse_request_head

BASE = [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/a"), (b":authority", b"h")]


def test_valid_head_splits_pseudo_and_regular_fields() -> None:
    head = parse_request_head([*BASE, (b"accept", b"*/*"), (b"content-length", b"0")])
    assert head.method == b"GET" and head.path == b"/a" and head.authority == b"h"
    assert head.scheme == b"https"
    assert head.fields == ((b"accept", b"*/*"), (b"content-length", b"0"))
    assert head.content_length == 0
    assert head.size == sum(len(n) + len(v) + 32 for n, v in [*BASE, *head.fields])


def test_connect_needs_only_authority() -> None:
    head = parse_request_head([(b":method", b"CONNECT"), (b":authority", b"h:443")])
    assert head.path is None and head.scheme is None


@pytest.mark.parametrize(
    "headers",
    [
        BASE[1:],  # no :method
        [BASE[0], BASE[1], BASE[3]],  # no :path
        [BASE[0], BASE[2], BASE[3]],  # no :scheme
        [BASE[0], BASE[1], (b":path", b""), BASE[3]],  # empty :path
        [*BASE, (b":path", b"/b")],  # duplicate
        [BASE[0], (b"accept", b"x"), *BASE[1:]],  # pseudo after regular
        [*BASE, (b":status", b"200")],  # response pseudo-header
        [*BASE, (b":protocol", b"websocket")],  # unknown pseudo-header
        [*BASE, (b"Accept", b"x")],  # upper-case name
        [*BASE, (b"bad name", b"x")],  # not a token
        [*BASE, (b"connection", b"keep-alive")],
        [*BASE, (b"keep-alive", b"5")],
        [*BASE, (b"transfer-encoding", b"chunked")],
        [*BASE, (b"upgrade", b"h2c")],
        [*BASE, (b"proxy-connection", b"x")],
        [*BASE, (b"te", b"gzip")],
        [*BASE, (b"x", b"a\r\nb")],
        [*BASE, (b"x", b"a\x00")],
        [*BASE, (b"x", b" lead")],
        [*BASE, (b"x", b"trail\t")],
        [*BASE, (b"content-length", b"-1")],
        [*BASE, (b"content-length", b"1"), (b"content-length", b"2")],
        [(b":method", b"G T"), *BASE[1:]],
        [(b":method", b"CONNECT"), (b":authority", b"h"), (b":path", b"/")],
    ],
)
def test_malformed_heads(headers: list[tuple[bytes, bytes]]) -> None:
    with pytest.raises(MalformedRequest):
        parse_request_head(headers)
    heads = RequestHeads()
    for _ in range(2):  # refused each time: a malformed block is never remembered
        with pytest.raises(MalformedRequest):
            heads.parse(headers)


def test_remembered_heads_are_what_parsing_gives() -> None:
    """A connection's RequestHeads gives, for a block it saw, the head
    parsing gives (the same object again); a block over its size limit is
    parsed each time; a full memory is cleared whole, never grown."""
    heads = RequestHeads()
    block = [*BASE, (b"accept", b"*/*")]
    first = heads.parse(block)
    assert first == parse_request_head(block)
    assert heads.parse(list(block)) is first
    other = heads.parse([*BASE[:2], (b":path", b"/b"), BASE[3]])
    assert other.path == b"/b" and heads.parse(block) is first
    large = [*BASE, (b"cookie", b"c" * h2head._KEPT_SIZE)]
    assert heads.parse(large) is not heads.parse(large)
    for i in range(3 * h2head._KEPT_MAX):
        heads.parse([*BASE[:2], (b":path", b"/%d" % i), BASE[3]])
        assert len(heads._kept) <= h2head._KEPT_MAX


def test_te_trailers_is_allowed() -> None:
    assert parse_request_head([*BASE, (b"te", b"trailers")]).fields == ((b"te", b"trailers"),)


@pytest.mark.parametrize(
    ("headers", "values", "extra"),
    [
        ([(b"range", b"bytes=0-1")], {"range": "bytes=0-1"}, {}),
        ([(b"accept", b"a"), (b"accept", b"b")], {"accept": "a, b"}, {}),
        ([(b"if-none-match", b'"x"')], {"if_none_match": '"x"'}, {}),
        ([(b"user-agent", b"ua"), (b"referer", b"r")], {}, {"user_agent": "ua", "referer": "r"}),
        ([(b"x-request-id", b"id")], {}, {"request_id": "id"}),
        ([(b"connection", b"close"), (b"connection", b"te")], {}, {"connection": b"close,te"}),
        ([(b"content-length", b"0")], {}, {"content_length": True, "nonzero_length": False}),
        ([(b"content-length", b"5")], {}, {"content_length": True, "nonzero_length": True}),
        ([(b"transfer-encoding", b"chunked")], {}, {"chunked": True}),
        ([(b"host", b"[::1]:8080")], {}, {}),
        ([(b"x-other", b"ignored")], {}, {}),
    ],
)
def test_scan_fields_table(
    headers: list[tuple[bytes, bytes]], values: dict[str, str], extra: dict[str, object]
) -> None:
    f = scan_fields(headers)
    assert f.values == values
    for name, value in extra.items():
        assert getattr(f, name) == value


@pytest.mark.parametrize("host", [b"a b", b"x/y", b"h:po", b"[zz]"])
def test_scan_fields_rejects_invalid_host(host: bytes) -> None:
    with pytest.raises(HTTPError) as info:
        scan_fields([(b"host", host)])
    assert info.value.status == 400
