"""Content-Digest / Repr-Digest on requests (serverio.writes.digest, RFC 9530):
the field parsed as an RFC 8941 dictionary, sha-256 and sha-512 kept,
unknown algorithms ignored, malformed fields a 400; the streaming verifier."""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serverio.errors import HTTPError
from serverio.writes.digest import MAX_DIGEST_FIELD, DigestVerifier, parse_digests

BODY = b'{"hello": "world"}\n'
S256 = hashlib.sha256(BODY).digest()
S512 = hashlib.sha512(BODY).digest()


def sf(raw: bytes) -> bytes:
    return b":" + base64.b64encode(raw) + b":"


# RFC 9530 Appendix B.1 / B.2: {"hello": "world"} with a newline.
RFC_256 = b"sha-256=:RK/0qy18MlBSVnWgjwz6lZEWjP/lF5HF9bvEF8FabDg=:"
RFC_512 = (
    b"sha-512=:YMAam51Jz/jOATT6/zvHrLVgOYTGFy1d6GJiOHTohq4yP+pgk4"
    b"vf2aCsyRZOtw8MjkM7iw7yZ/WkppmM44T3qg==:"
)

PARSED: list[tuple[list[bytes], dict[str, bytes]]] = [
    ([], {}),
    ([RFC_256], {"sha-256": S256}),
    ([RFC_512], {"sha-512": S512}),
    ([RFC_256 + b", " + RFC_512], {"sha-256": S256, "sha-512": S512}),
    ([RFC_256, RFC_512], {"sha-256": S256, "sha-512": S512}),  # two lines, one list
    # Unknown, insecure and deprecated algorithms are ignored (RFC 9530 §2, §5).
    ([b"md5=:" + base64.b64encode(b"x" * 16) + b":, " + RFC_256], {"sha-256": S256}),
    ([b"unixsum=:AAAA:, crc32c=:AAAAAA==:"], {}),
    ([b"id-sha-256=:" + base64.b64encode(S256) + b":"], {}),
    ([b"future-algo=?1, other=42, third=token;p=1"], {}),  # other types for unknown keys
    # Parameters on a member are allowed and ignored; the last duplicate wins.
    ([RFC_256 + b";x=1"], {"sha-256": S256}),
    ([b"sha-256=:" + base64.b64encode(b"\0" * 32) + b":, " + RFC_256], {"sha-256": S256}),
    # Leading/trailing spaces; "=" padding may be missing (RFC 8941 §4.2.7).
    ([b"  " + RFC_256 + b"  "], {"sha-256": S256}),
    ([b"sha-256=" + sf(S256) + b"\t,\tx=1"], {"sha-256": S256}),  # OWS around ","
    ([b"sha-256=:" + base64.b64encode(S256).rstrip(b"=") + b":"], {"sha-256": S256}),
]


@pytest.mark.parametrize(("lines", "expected"), PARSED)
def test_digests_parsed(lines: list[bytes], expected: dict[str, bytes]) -> None:
    assert parse_digests(lines) == expected


MALFORMED: list[bytes] = [
    b"sha-256",  # a bare key is Boolean true, not a byte sequence
    b"sha-256=abc",  # a token
    b"sha-256=42",
    b'sha-256="abc"',
    b"sha-256=:" + base64.b64encode(b"short") + b":",  # wrong length
    b"sha-512=" + sf(S256)[:-1],  # unterminated
    b"sha-256=:not*base64:",
    b"SHA-256=" + sf(S256),  # keys are lower case (RFC 8941 §3.1.2)
    RFC_256 + b",",  # trailing comma
    RFC_256 + b" " + RFC_512,  # no comma
    b"sha-256=(" + sf(S256) + b")",  # an inner list
    b"\xff=1",
    b"sha-256=" + sf(S256) + b"; =1",
    b'x="unterminated',
    b'x="bad \\q escape"',
    b"sha-256=?2",
]


@pytest.mark.parametrize("line", MALFORMED)
def test_malformed_fields_are_a_400(line: bytes) -> None:
    with pytest.raises(HTTPError) as info:
        parse_digests([line])
    assert info.value.status == 400


def test_an_overlong_field_is_a_400_before_parsing() -> None:
    line = b", ".join([b"x%d=1" % i for i in range(MAX_DIGEST_FIELD)])
    with pytest.raises(HTTPError) as info:
        parse_digests([line])
    assert info.value.status == 400
    assert "too long" in info.value.detail


def test_too_many_members_are_a_400() -> None:
    line = b",".join([b"k%d" % i for i in range(65)])
    assert len(line) < MAX_DIGEST_FIELD
    with pytest.raises(HTTPError):
        parse_digests([line])


@given(st.binary(max_size=300))
def test_any_bytes_parse_or_raise_400(line: bytes) -> None:
    try:
        result = parse_digests([line])
    except HTTPError as exc:
        assert exc.status == 400
    else:
        assert set(result) <= {"sha-256", "sha-512"}


# ------------------------------------------------------------ verifier


@given(st.lists(st.binary(max_size=64), max_size=10))
def test_verifier_over_any_split(pieces: list[bytes]) -> None:
    body = b"".join(pieces)
    expected = {"sha-256": hashlib.sha256(body).digest(), "sha-512": hashlib.sha512(body).digest()}
    ok = DigestVerifier(expected)
    for piece in pieces:
        ok.update(piece)
    assert ok.verify()
    bad = DigestVerifier(expected)
    for piece in pieces:
        bad.update(piece)
    bad.update(b"!")
    assert not bad.verify()


def test_verifier_needs_every_digest_to_match() -> None:
    half = DigestVerifier({"sha-256": S256, "sha-512": b"\0" * 64})
    half.update(BODY)
    assert not half.verify()
    both = DigestVerifier(parse_digests([RFC_256 + b", " + RFC_512]))
    both.update(memoryview(BODY))
    assert both.verify()


def test_no_digest_verifies_anything() -> None:
    v = DigestVerifier({})
    v.update(b"anything")
    assert v.verify()
