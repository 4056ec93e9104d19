"""WebDAV request fields (serverio.dav.ifheader, RFC 4918 §10): If (tagged
and untagged lists, Not, state tokens, entity tags, evaluation), Depth,
Overwrite, Timeout and Destination."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serverio.dav.ifheader import (
    MAX_IF_CONDITIONS,
    MAX_IF_FIELD,
    MAX_TIMEOUT,
    Condition,
    Depth,
    IfField,
    IfList,
    ResourceState,
    parse_depth,
    parse_destination,
    parse_if,
    parse_overwrite,
    parse_timeout,
)
from serverio.errors import HTTPError

T1 = "urn:uuid:181d4fae-7d8c-11d0-a765-00a0c91e6bf2"
T2 = "opaquelocktoken:e71d4fae-5dec-22d6-fea5-00a0c91e6be4"

IF_OK: list[tuple[bytes, IfField]] = [
    # RFC 4918 §10.4.6
    (
        b"(<" + T1.encode() + b'> ["I am an ETag"]) (["I am another ETag"])',
        IfField(
            (
                IfList(None, (Condition(False, token=T1), Condition(False, etag='"I am an ETag"'))),
                IfList(None, (Condition(False, etag='"I am another ETag"'),)),
            )
        ),
    ),
    # §10.4.7
    (
        b"(Not <urn:uuid:181d4fae-7d8c-11d0-a765-00a0c91e6bf2>"
        b" <urn:uuid:58f202ac-22cf-11d1-b12d-002035b29092>)",
        IfField(
            (
                IfList(
                    None,
                    (
                        Condition(True, token=T1),
                        Condition(False, token="urn:uuid:58f202ac-22cf-11d1-b12d-002035b29092"),
                    ),
                ),
            )
        ),
    ),
    # §10.4.8: the "always true" idiom
    (
        b"(<" + T1.encode() + b">) (Not <DAV:no-lock>)",
        IfField(
            (
                IfList(None, (Condition(False, token=T1),)),
                IfList(None, (Condition(True, token="DAV:no-lock"),)),
            )
        ),
    ),
    # §10.4.9: tagged lists
    (
        b"<http://www.example.com/specs/> (<" + T1.encode() + b">) "
        b'<http://www.example.com/specs/rfc2518.doc> (["4217"]) (["4218"])',
        IfField(
            (
                IfList("http://www.example.com/specs/", (Condition(False, token=T1),)),
                IfList(
                    "http://www.example.com/specs/rfc2518.doc", (Condition(False, etag='"4217"'),)
                ),
                IfList(
                    "http://www.example.com/specs/rfc2518.doc", (Condition(False, etag='"4218"'),)
                ),
            )
        ),
    ),
    # weak tags, "Not" spellings, whitespace variants
    (b'([W/"x"])', IfField((IfList(None, (Condition(False, etag='W/"x"'),)),))),
    (b"(NOT<" + T2.encode() + b">)", IfField((IfList(None, (Condition(True, token=T2),)),))),
    (b"\t( <" + T2.encode() + b"> )  ", IfField((IfList(None, (Condition(False, token=T2),)),))),
    (b'</a%20b> (["1"])', IfField((IfList("/a%20b", (Condition(False, etag='"1"'),)),))),
]


@pytest.mark.parametrize(("value", "expected"), IF_OK)
def test_if_parsed(value: bytes, expected: IfField) -> None:
    assert parse_if([value]) == expected


def test_if_absent_and_several_lines() -> None:
    assert parse_if([]) is None
    field = parse_if([b"(<" + T1.encode() + b">)", b"(<" + T2.encode() + b">)"])
    assert field is not None and len(field.lists) == 2
    assert field.tokens == {T1, T2}
    assert not field.tagged


IF_BAD: list[bytes] = [
    b"",
    b"   ",
    b"()",  # a list needs a condition
    b"(",
    b"(<" + T1.encode() + b">",  # unclosed
    b"<" + T1.encode() + b">",  # no list
    b"(<no-scheme>)",  # a state token is an absolute URI
    b"(<>)",
    b'("no brackets")',
    b"([unquoted])",
    b'(["x" ])',  # nothing inside the brackets but the tag
    b"(Not)",
    b"(Nota <" + T1.encode() + b">)",
    b"(<" + T1.encode() + b">) <http://x/> (<" + T2.encode() + b">)",  # untagged, then tagged
    b"<http://x/> (<" + T1.encode() + b">) (<" + T2.encode() + b">) junk",
    b"(<a b:c>)",
    b"<a b> (<x:y>)",
]


@pytest.mark.parametrize("value", IF_BAD)
def test_if_malformed_is_a_400(value: bytes) -> None:
    with pytest.raises(HTTPError) as info:
        parse_if([value])
    assert info.value.status == 400


def test_if_bounds() -> None:
    many = b"(" + b" ".join([b"<x:%d>" % i for i in range(MAX_IF_CONDITIONS + 1)]) + b")"
    assert len(many) < MAX_IF_FIELD
    with pytest.raises(HTTPError, match="too many"):
        parse_if([many])
    assert parse_if([b"(" + b" ".join([b"<x:%d>" % i for i in range(MAX_IF_CONDITIONS)]) + b")"])
    with pytest.raises(HTTPError, match="too long"):
        parse_if([b"(<x:" + b"y" * MAX_IF_FIELD + b">)"])


@given(st.binary(max_size=200))
def test_if_any_bytes_parse_or_raise_400(value: bytes) -> None:
    try:
        parse_if([value])
    except HTTPError as exc:
        assert exc.status == 400


LOCKED = ResourceState('"e1"', frozenset({T1}))
UNLOCKED = ResourceState('"e1"', frozenset())
MISSING = ResourceState(None, frozenset())

HOLDS: list[tuple[bytes, ResourceState, bool]] = [
    (b"(<" + T1.encode() + b">)", LOCKED, True),
    (b"(<" + T1.encode() + b">)", UNLOCKED, False),
    (b"(Not <" + T1.encode() + b">)", UNLOCKED, True),
    (b"(<" + T1.encode() + b'> ["e1"])', LOCKED, True),
    (b"(<" + T1.encode() + b'> ["e2"])', LOCKED, False),
    (b'(["e1"])', UNLOCKED, True),
    (b'([W/"e1"])', UNLOCKED, False),  # strong comparison
    (b'([W/"e1"])', ResourceState('W/"e1"', frozenset()), False),  # weak never matches
    (b'(["e1"])', MISSING, False),
    (b'(Not ["e1"])', MISSING, True),
    (b"(<DAV:no-lock>)", LOCKED, False),
    (b"(<" + T2.encode() + b">) (Not <DAV:no-lock>)", LOCKED, True),  # one list suffices
    (b"(<" + T2.encode() + b">) (<DAV:no-lock>)", LOCKED, False),
]


@pytest.mark.parametrize(("value", "state", "holds"), HOLDS)
def test_if_evaluation_untagged(value: bytes, state: ResourceState, holds: bool) -> None:
    field = parse_if([value])
    assert field is not None
    assert field.holds("/r", lambda uri: state) is holds


def test_if_evaluation_tagged_uses_each_lists_resource() -> None:
    table = {"/a": LOCKED, "/b": UNLOCKED}
    field = parse_if([b"</b> (<" + T1.encode() + b">) </a> (<" + T1.encode() + b">)"])
    assert field is not None and field.tagged
    assert field.holds("/b", table.__getitem__)  # the list for /a holds
    field = parse_if([b"</b> (<" + T1.encode() + b">)"])
    assert field is not None
    assert not field.holds("/a", table.__getitem__)


# ------------------------------------------------------------ Depth, Overwrite, Timeout


@pytest.mark.parametrize(
    ("value", "depth"),
    [
        (b"0", Depth.ZERO),
        (b"1", Depth.ONE),
        (b"infinity", Depth.INFINITY),
        (b"Infinity", Depth.INFINITY),
        (b" 1 ", Depth.ONE),
        (None, Depth.INFINITY),
    ],
)
def test_depth(value: bytes | None, depth: Depth) -> None:
    assert parse_depth(value, Depth.INFINITY) is depth


@pytest.mark.parametrize("value", [b"", b"2", b"-1", b"01", b"inf", b"0,1", b"infinite"])
def test_depth_refused(value: bytes) -> None:
    with pytest.raises(HTTPError) as info:
        parse_depth(value, Depth.ZERO)
    assert info.value.status == 400


def test_overwrite() -> None:
    assert parse_overwrite(None) is True
    assert parse_overwrite(b"T") is True
    assert parse_overwrite(b"t") is True
    assert parse_overwrite(b"F") is False
    for bad in (b"", b"true", b"0", b"TF"):
        with pytest.raises(HTTPError):
            parse_overwrite(bad)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ()),
        (b"Second-4100000000", (4100000000,)),
        (b"Infinite, Second-4100000000", (None, 4100000000)),
        (b"second-60 ,  infinite", (60, None)),
        (b"Second-99999999999999", (MAX_TIMEOUT,)),
    ],
)
def test_timeout(value: bytes | None, expected: tuple[int | None, ...]) -> None:
    assert parse_timeout(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"Second-",
        b"Second-x",
        b"Second--1",
        b"60",
        b"Infinite,",
        b"Minute-1",
        b"Second-" + b"9" * 21,
        b",".join([b"Second-1"] * 17),
    ],
)
def test_timeout_refused(value: bytes) -> None:
    with pytest.raises(HTTPError) as info:
        parse_timeout(value)
    assert info.value.status == 400


# ------------------------------------------------------------ Destination


@pytest.mark.parametrize(
    ("value", "segments", "slash"),
    [
        (b"http://example.com/a/b.txt", ("a", "b.txt"), False),
        (b"http://EXAMPLE.com:80/a/", ("a",), True),
        (b"/a%20b/c", ("a b", "c"), False),
        (b"http://example.com", (), True),  # "/" (RFC 9112 §3.2.2)
        (b"http://example.com/caf%C3%A9", ("caf\u00e9",), False),
    ],
)
def test_destination_on_this_server(value: bytes, segments: tuple[str, ...], slash: bool) -> None:
    dest = parse_destination(value, scheme="http", host="example.com")
    assert not dest.foreign and dest.target is not None
    assert dest.target.segments == segments
    assert dest.target.slash is slash


@pytest.mark.parametrize(
    "value",
    [
        b"http://other.example/a",
        b"https://example.com/a",  # another scheme
        b"http://example.com:8080/a",  # another port
        b"ftp://example.com/a",
        b"mailto:someone@example.com",
        b"http://user@other.example/a",
    ],
)
def test_destination_elsewhere_is_foreign(value: bytes) -> None:
    dest = parse_destination(value, scheme="http", host="example.com")
    assert dest.foreign and dest.target is None


def test_destination_default_ports_and_ipv6() -> None:
    assert not parse_destination(b"https://h:443/x", scheme="https", host="h").foreign
    assert not parse_destination(b"http://[::1]:8000/x", scheme="http", host="[::1]:8000").foreign
    assert parse_destination(b"http://[::1]:8001/x", scheme="http", host="[::1]:8000").foreign


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"",
        b"a/b",  # relative
        b"//other/a",  # network-path reference
        b"/a/../b",  # dot-segments: the reads' rules
        b"http://example.com/a/%2e%2e/b",
        b"/a%2Fb",  # an encoded slash
        b"/a\\b",
        b"/a#frag",
        b"http://example.com/\xff",
        b"http://example.com:99999/a",
    ],
)
def test_destination_refused(value: bytes | None) -> None:
    with pytest.raises(HTTPError) as info:
        parse_destination(value, scheme="http", host="example.com")
    assert info.value.status == 400
    assert not info.value.close
