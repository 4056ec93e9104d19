"""Request-target parsing: accepted forms, refusals, and Location round-trips."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from serverio.errors import HTTPError
from serverio.http.target import MAX_SEGMENTS, Target, parse_target

ACCEPTED: list[tuple[bytes, tuple[str, ...], bool, str | None, bool]] = [
    # raw, segments, slash, query, hidden
    (b"/", (), True, None, False),
    (b"/a", ("a",), False, None, False),
    (b"/a/b.txt", ("a", "b.txt"), False, None, False),
    (b"/a/b/", ("a", "b"), True, None, False),
    (b"/a?x=1", ("a",), False, "x=1", False),
    (b"/a?", ("a",), False, "", False),
    (b"/?q", (), True, "q", False),
    # The query is split off first and never looked at for lookup.
    (b"/a?x=/../%00%zz", ("a",), False, "x=/../%00%zz", False),
    (b"/a?b?c", ("a",), False, "b?c", False),
    # Empty segments are dropped.
    (b"//a//b//", ("a", "b"), True, None, False),
    (b"///", (), True, None, False),
    # absolute-form (RFC 9112 §3.2.2).
    (b"http://host/path?q", ("path",), False, "q", False),
    (b"http://host:8080/a/b/", ("a", "b"), True, None, False),
    (b"HTTP://HOST", (), True, None, False),
    (b"https://h?x", (), True, "x", False),
    (b"hTTpS://h/a", ("a",), False, None, False),
    (b"http://user@h/a", ("a",), False, None, False),
    # Percent-decoding happens exactly once.
    (b"/%252e", ("%2e",), False, None, False),
    (b"/%252e%252e/x", ("%2e%2e", "x"), False, None, False),
    (b"/%252f", ("%2f",), False, None, False),
    (b"/a%20b", ("a b",), False, None, False),
    (b"/a+b", ("a+b",), False, None, False),
    (b"/%41%62c", ("Abc",), False, None, False),
    (b"/caf%C3%A9", ("caf\u00e9",), False, None, False),
    (b"/caf%c3%a9", ("caf\u00e9",), False, None, False),
    (b"/caf\xc3\xa9", ("caf\u00e9",), False, None, False),
    (b"/%E2%82%AC", ("\u20ac",), False, None, False),
    (b"/%F0%9F%98%80", ("\U0001f600",), False, None, False),
    (b"/a;b=c", ("a;b=c",), False, None, False),
    (b"/a..b", ("a..b",), False, None, False),
    (b"/b.", ("b.",), False, None, False),
    # An encoded backslash is part of a POSIX name, never a separator.
    (b"/%5c", ("\\",), False, None, False),
    (b"/%5C..%5Cx", ("\\..\\x",), False, None, False),
    # Hidden segments are reported, not refused.
    (b"/...", ("...",), False, None, True),
    (b"/.hidden", (".hidden",), False, None, True),
    (b"/%2Ehidden", (".hidden",), False, None, True),
    (b"/a/.git/config", ("a", ".git", "config"), False, None, True),
    (b"/.well-known/x", (".well-known", "x"), False, None, False),
    (b"/.well-known/", (".well-known",), True, None, False),
    (b"/%2ewell-known/x", (".well-known", "x"), False, None, False),
    (b"/a/.well-known/x", ("a", ".well-known", "x"), False, None, True),
    (b"/.well-known/.x", (".well-known", ".x"), False, None, True),
    (b"/.well-known/.well-known", (".well-known", ".well-known"), False, None, True),
]


@pytest.mark.parametrize(
    ("raw", "segments", "slash", "query", "hidden"),
    ACCEPTED,
    ids=[c[0].decode("latin-1") for c in ACCEPTED],
)
def test_accepted(
    raw: bytes, segments: tuple[str, ...], slash: bool, query: str | None, hidden: bool
) -> None:
    for method in (b"GET", b"HEAD", b"OPTIONS"):
        target = parse_target(method, raw)
        assert target == Target(segments, slash, query, asterisk=False, hidden=hidden)


def test_asterisk_form_only_for_options() -> None:
    assert parse_target(b"OPTIONS", b"*") == Target((), False, None, asterisk=True)
    for method in (b"GET", b"HEAD", b"POST", b"options"):
        with pytest.raises(HTTPError) as exc:
            parse_target(method, b"*")
        assert exc.value.status == 400
    with pytest.raises(HTTPError) as exc:
        parse_target(b"OPTIONS", b"**")
    assert exc.value.status == 400


REJECTED: list[tuple[bytes, int]] = [
    # Dot-segments, raw or encoded.
    (b"/..", 400),
    (b"/../etc/passwd", 400),
    (b"/a/../b", 400),
    (b"/a/..", 400),
    (b"/a/../", 400),
    (b"/.", 400),
    (b"/a/./b", 400),
    (b"/%2e", 400),
    (b"/%2e%2e", 400),
    (b"/%2E%2E/x", 400),
    (b"/%2E.", 400),
    (b"/.%2e", 400),
    (b"/a/%2e%2E/b", 400),
    (b"http://h/../x", 400),
    # An encoded slash inside a segment.
    (b"/a%2fb", 404),
    (b"/a%2Fb", 404),
    (b"/%2F%2Fevil.com", 404),
    (b"/%2f", 404),
    (b"/..%2f..%2fetc", 404),
    # Raw backslash; NUL.  (An encoded backslash is a name character: below.)
    (b"/a\\b", 400),
    (b"/\\evil", 400),
    (b"/a%5c\\b", 400),
    (b"/a%00", 400),
    (b"/%00", 400),
    (b"/a\x00b", 400),
    # Invalid percent escapes.
    (b"/%zz", 400),
    (b"/%4", 400),
    (b"/a%4", 400),
    (b"/a%", 400),
    (b"/%", 400),
    (b"/%g1", 400),
    (b"/%1g", 400),
    (b"/%%41", 400),
    (b"/%-1", 400),
    (b"/% 1", 400),
    # Forms we do not serve.
    (b"", 400),
    (b"a/b", 400),
    (b"example.com:443", 400),
    (b"ftp://h/x", 400),
    (b"http:/h/x", 400),
    (b"http:///x", 400),
    (b"http://?x", 400),
    (b"/a#frag", 400),
]


@pytest.mark.parametrize(
    ("raw", "status"), REJECTED, ids=[c[0].decode("latin-1") for c in REJECTED]
)
def test_rejected(raw: bytes, status: int) -> None:
    with pytest.raises(HTTPError) as exc:
        parse_target(b"GET", raw)
    assert exc.value.status == status


def test_target_length_limit() -> None:
    at_limit = b"/" + b"a" * 8191
    assert len(at_limit) == 8192
    assert parse_target(b"GET", at_limit).segments == ("a" * 8191,)
    over = at_limit + b"a"
    with pytest.raises(HTTPError) as exc:
        parse_target(b"GET", over)
    assert exc.value.status == 414
    # The length check comes first: even a target that is also invalid is 414.
    with pytest.raises(HTTPError) as exc:
        parse_target(b"GET", b"/%zz" + b"a" * 8192)
    assert exc.value.status == 414
    # The limit is a parameter.
    with pytest.raises(HTTPError) as exc:
        parse_target(b"GET", b"/abcd", max_size=4)
    assert exc.value.status == 414
    assert parse_target(b"GET", b"/abc", max_size=4).segments == ("abc",)


ROUND_TRIP = [
    b"/",
    b"/a/b/",
    b"/a/b",
    b"/sp%20ace/x",
    b"/caf\xc3\xa9",
    b"/100%25",
    b"/%252e",
    b"/a%3Fb",
    b"/a%23b",
    b"/a%09b",
    b"/q?x",
    b"/%E2%82%AC/%F0%9F%98%80/",
    b"/!$&'()*+,;=:@~-._",
    b"/%22%3C%3E%60%7B%7D%7C%5E",
    b"//evil.com/",
    b"/.hidden/",
]


@pytest.mark.parametrize("raw", ROUND_TRIP, ids=[r.decode("latin-1") for r in ROUND_TRIP])
def test_url_path_round_trips(raw: bytes) -> None:
    target = parse_target(b"GET", raw)
    for slash in (None, True, False):
        path = target.url_path(slash=slash)
        assert path.isascii() and path.startswith("/") and not path.startswith("//")
        assert "?" not in path and "#" not in path and "\\" not in path
        assert all(0x21 <= ord(c) < 0x7F for c in path)
        again = parse_target(b"GET", path.encode("ascii"))
        assert again.segments == target.segments
        want_slash = target.slash if slash is None else slash
        assert again.slash == (want_slash if target.segments else True)


@pytest.mark.parametrize(
    ("segments", "slash", "path", "relpath"),
    [
        ((), True, "/", "."),
        (("a",), False, "/a", "a"),
        (("a", "b"), True, "/a/b/", "a/b"),
        (("a b", "c\u00e9"), False, "/a%20b/c%C3%A9", "a b/c\u00e9"),
        (("%", "?", "#"), False, "/%25/%3F/%23", "%/?/#"),
    ],
)
def test_url_path_and_relpath(
    segments: tuple[str, ...], slash: bool, path: str, relpath: str
) -> None:
    target = Target(segments, slash, None)
    assert target.url_path() == path
    assert target.relpath == relpath


def test_segment_limit() -> None:
    at_limit = b"/a" * MAX_SEGMENTS
    assert len(parse_target(b"GET", at_limit).segments) == MAX_SEGMENTS
    # Neither empty segments nor a trailing slash count.
    assert len(parse_target(b"GET", b"//" + b"a//" * MAX_SEGMENTS).segments) == MAX_SEGMENTS
    assert parse_target(b"GET", at_limit + b"/").slash
    for over in (at_limit + b"/a", b"/a" * 2040, b"/%61" * (MAX_SEGMENTS + 1)):
        with pytest.raises(HTTPError) as exc:
            parse_target(b"GET", over)
        assert exc.value.status == 414


# Bytes that are not UTF-8 (a POSIX name is bytes): each undecodable byte is
# carried as U+DC80+byte (surrogateescape), one spelling per name.
NOT_UTF8 = [
    # raw, the bytes of the name
    (b"/%ff", b"\xff"),
    (b"/\xff", b"\xff"),  # raw obs-text bytes in the target name the same file
    (b"/%c3", b"\xc3"),
    (b"/caf\xe9", b"caf\xe9"),  # Latin-1
    (b"/%ed%a0%80", b"\xed\xa0\x80"),  # an encoded surrogate
    (b"/%f4%90%80%80", b"\xf4\x90\x80\x80"),  # beyond U+10FFFF
    # Overlong forms of '.', '/' and '\\': names of their own bytes, never
    # a dot segment, a separator or a backslash.
    (b"/%c0%ae", b"\xc0\xae"),
    (b"/%c0%ae%c0%ae", b"\xc0\xae\xc0\xae"),
    (b"/%e0%80%ae", b"\xe0\x80\xae"),
    (b"/%c0%af", b"\xc0\xaf"),
    (b"/%c1%9c", b"\xc1\x9c"),
    (b"/%f0%80%80%ae", b"\xf0\x80\x80\xae"),
    (b"/%c0%ae%2f", None),  # the encoded slash is still refused (404)
]


@pytest.mark.parametrize(("raw", "name"), NOT_UTF8, ids=[c[0].decode("latin-1") for c in NOT_UTF8])
def test_names_outside_utf8_decode_to_their_own_bytes(raw: bytes, name: bytes | None) -> None:
    if name is None:
        with pytest.raises(HTTPError) as exc:
            parse_target(b"GET", raw)
        assert exc.value.status == 404
        return
    target = parse_target(b"GET", raw)
    [seg] = target.segments
    assert seg.encode("utf-8", "surrogateescape") == name
    assert seg not in (".", "..") and "/" not in seg and "\\" not in seg
    assert not target.hidden
    # The canonical spelling is the percent-encoded bytes, and it parses back.
    again = parse_target(b"GET", target.url_path().encode("ascii"))
    assert again.segments == target.segments
    assert target.url_path() == "/" + "".join(f"%{b:02X}" if b >= 0x80 else chr(b) for b in name)


_SEGMENT_BYTES = st.binary(min_size=1, max_size=12).filter(
    lambda b: b"/" not in b and b"\x00" not in b
)


@example(b".")
@example(b"..")
@example(b"\xc0\xae\xc0\xae")
@example(b".well-known")
@given(_SEGMENT_BYTES)
def test_every_byte_string_is_one_segment_that_is_a_dot_only_if_its_bytes_are(
    name: bytes,
) -> None:
    """Percent-encode arbitrary bytes: the segment is exactly those bytes,
    and it is ``.``/``..`` or contains a separator only when they do."""
    raw = b"/" + "".join(f"%{b:02X}" for b in name).encode("ascii")
    try:
        target = parse_target(b"GET", raw)
    except HTTPError as exc:
        assert exc.status == 400 and name in (b".", b"..")
        return
    [seg] = target.segments
    assert seg.encode("utf-8", "surrogateescape") == name
    assert seg not in (".", "..")
    assert ("\\" in seg) == (b"\\" in name)
    assert target.hidden == (name.startswith(b".") and name != b".well-known")


# The plain-path shortcut (serverio.http.target._PLAIN_PATH) against the
# general walk: the same Target, or the same refusal, for any target.
_PIECES = st.sampled_from(
    [
        "/",
        "//",
        "a",
        "Z",
        "0",
        "-",
        "_",
        "~",
        ".",
        "..",
        ".well-known",
        "%2F",
        "%41",
        "%",
        "?",
        "#",
        "\\",
        "x.y",
        "é",
        "\x00",
        "*",
        ":",
    ]
)


def _outcome(parse, raw: bytes):  # type: ignore[no-untyped-def]
    try:
        return parse(raw)
    except HTTPError as exc:
        return ("refused", exc.status)


@given(st.lists(_PIECES, max_size=12).map(lambda p: ("/" + "".join(p)).encode("utf-8")))
@example(b"/a/b.txt")
@example(b"/a/b/")
@example(b"/.a")
@example(b"/a/./b")
@example(b"/a" * (MAX_SEGMENTS + 1))
@example(b"/a/" * MAX_SEGMENTS)
def test_plain_path_shortcut_agrees_with_the_walk(raw: bytes) -> None:
    from serverio.http import target as t

    fast = _outcome(lambda r: t._parse_target(b"GET", r, 8192), raw)
    walk = _outcome(lambda r: t._parse_target_walk(b"GET", r), raw)
    assert fast == walk


def test_plain_path_shortcut_takes_the_common_paths() -> None:
    """The shortcut matches what it is for (so the test above compares
    both ways on them), and nothing with an escape, a dot at a segment's
    start, an empty segment, a query or a fragment."""
    from serverio.http.target import _PLAIN_PATH

    for raw in (b"/a", b"/d07/f000123.bin", b"/docs/", b"/a-b_c~d/e.f.g"):
        assert _PLAIN_PATH.fullmatch(raw), raw
    for raw in (b"/", b"/.git", b"/a/../b", b"/a//b", b"/a%20b", b"/a?x", b"/a#f", b"/a\\b", b"a"):
        assert not _PLAIN_PATH.fullmatch(raw), raw
