"""Negotiation, disposition and query rules: pure, table-driven, no event loop."""

from __future__ import annotations

import base64
import hashlib

import pytest

from serverio import Config, RequestFacts, parse_target
from serverio.http.codecs import CODECS
from serverio.http.core import error_plan
from serverio.http.disposition import ascii_fallback, content_disposition, download_matches
from serverio.http.negotiate import (
    parse_accept_encoding,
    parse_query,
    prefers_json,
    repr_digest_field,
    select_coding,
    want_digest,
    wanted_codings,
)
from serverio.http.select import (
    choice_depends_on,
    choose_coding,
    digest_algorithm,
    digest_applies,
    file_headers,
    negotiates,
    on_the_fly,
    sidecars_wanted,
)

pytestmark = pytest.mark.filterwarnings("error")

ALL = ("br", "zstd", "gzip")


# ------------------------------------------------------- Accept-Encoding


@pytest.mark.parametrize(
    ("header", "sidecars", "fly", "expected"),
    [
        # No field: identity (what every deployed server does).
        (None, (), ALL, ("", False)),
        # Empty field: only identity is acceptable (§12.5.3).
        ("", (), ALL, ("", False)),
        ("gzip", (), ALL, ("gzip", False)),
        ("GZIP", (), ALL, ("gzip", False)),
        ("x-gzip", (), ALL, ("gzip", False)),  # §8.4.1.3
        # Equal weights: our rank (br, zstd, gzip).
        ("gzip, deflate, br, zstd", (), ALL, ("br", False)),
        ("gzip, zstd", (), ALL, ("zstd", False)),
        # Higher q wins over rank.
        ("br;q=0.5, gzip", (), ALL, ("gzip", False)),
        ("br;q=0.5, gzip;q=0.8", (), ALL, ("gzip", False)),
        ("br;Q=0.9 , gzip;q=0.8", (), ALL, ("br", False)),  # parameter name case-insensitive
        # q=0 refuses.
        ("br;q=0, gzip", (), ALL, ("gzip", False)),
        ("gzip;q=0", (), ALL, ("", False)),
        ("gzip;q=0.000", (), ALL, ("", False)),
        # '*' matches codings not listed; listed q=0 still refuses.
        ("*", (), ALL, ("br", False)),
        ("*, br;q=0", (), ALL, ("zstd", False)),
        ("*;q=0", (), ALL, ("", False)),
        ("*;q=0, gzip", (), ALL, ("gzip", False)),
        # Identity explicitly preferred.
        ("gzip;q=0.5, identity", (), ALL, ("", False)),
        ("gzip;q=0.5, identity;q=0.5", (), ALL, ("gzip", False)),  # tie: the coding
        ("identity;q=0", (), ALL, ("", False)),  # nothing else offered: identity anyway
        ("gzip, identity;q=0", (), ALL, ("gzip", False)),
        # Codec not available (e.g. brotli not installed).
        ("br", (), ("gzip",), ("", False)),
        ("br, gzip;q=0.1", (), ("gzip",), ("gzip", False)),
        # Nothing compressible: no on-the-fly codings offered.
        ("gzip, br", (), (), ("", False)),
        # Sidecars: win ties over on-the-fly, lose to a higher q.
        ("gzip, br", ("gzip",), ALL, ("gzip", True)),
        ("gzip, br", ("gzip", "br"), ALL, ("br", True)),
        ("gzip;q=0.5, br", ("gzip",), ALL, ("br", False)),
        ("gzip, br", ("br",), (), ("br", True)),
        ("gzip", ("br",), ALL, ("gzip", False)),  # a sidecar the client refuses
        # Invalid qvalues: the member is ignored, not the field.
        ("br;q=2, gzip", (), ALL, ("gzip", False)),
        ("br;q=0.1234, gzip;q=0.5", (), ALL, ("gzip", False)),
        ("br;q=, gzip;q=0.5", (), ALL, ("gzip", False)),
        ("br;q=1.5", (), ALL, ("", False)),
        ("br;q=1.000", (), ALL, ("br", False)),
        # Garbage.
        ("g zip, ;;, ,", (), ALL, ("", False)),
        ("\u00e9, gzip", (), ALL, ("gzip", False)),
        # Repeated coding: the first occurrence counts.
        ("gzip;q=0, gzip", (), ALL, ("", False)),
    ],
)
def test_select_coding(
    header: str | None,
    sidecars: tuple[str, ...],
    fly: tuple[str, ...],
    expected: tuple[str, bool],
) -> None:
    assert select_coding(parse_accept_encoding(header), sidecars, fly) == expected


def test_wanted_codings() -> None:
    assert wanted_codings(parse_accept_encoding(None)) == []
    assert wanted_codings(parse_accept_encoding("gzip, br;q=0")) == ["gzip"]
    assert wanted_codings(parse_accept_encoding("*")) == ["br", "zstd", "gzip"]


# ------------------------------------------------------------------ Accept


@pytest.mark.parametrize(
    ("header", "json"),
    [
        (None, False),
        ("*/*", False),
        ("application/json", True),
        ("application/*", True),
        ("APPLICATION/JSON", True),
        ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", False),
        ("application/json, text/html;q=0.9", True),
        ("application/json;q=0.5, text/html", False),
        ("application/json;q=0.5, */*;q=0.1", True),
        ("application/json;q=0, */*", False),
        ("application/json;charset=utf-8;q=0.9", True),
        ("text/*, application/json", False),  # tie: HTML
        ("application/json;q=x", False),  # invalid member ignored
        ("json", False),
    ],
)
def test_prefers_json(header: str | None, json: bool) -> None:
    assert prefers_json(header) is json


# -------------------------------------------------------- Want-Repr-Digest


@pytest.mark.parametrize(
    ("header", "algorithm"),
    [
        (None, "sha-256"),
        ("sha-256=1", "sha-256"),
        ("sha-512=3, sha-256=1", "sha-512"),
        ("sha-512=3, sha-256=3", "sha-256"),  # tie: the cheaper
        ("sha-512=1", "sha-512"),
        ("md5=10", None),  # only unsupported ones: none
        ("sha-256=0, sha-512=0", None),
        ("sha-256=11", "sha-256"),  # out of range: field ignored
        ("sha-256", "sha-256"),  # not a dictionary of integers: ignored
        ("SHA-512=5", "sha-256"),  # keys are lowercase in Structured Fields
        ("unixsum=2, sha-512=1", "sha-512"),
    ],
)
def test_want_digest(header: str | None, algorithm: str | None) -> None:
    assert want_digest(header) == algorithm


def test_repr_digest_field_format() -> None:
    digest = hashlib.sha256(b"hello").digest()
    value = repr_digest_field("sha-256", digest)
    assert value == b"sha-256=:" + base64.b64encode(digest) + b":"
    assert value.decode("ascii").isprintable()


# ------------------------------------------------------------------- query


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (None, {}),
        ("", {}),
        ("download", {"download": ""}),
        ("download=1&format=json", {"download": "1", "format": "json"}),
        ("sort=size&sort=name", {"sort": "size"}),
        ("format=%6Ason", {"format": "json"}),
        ("x=%ff", {"x": "\ufffd"}),
        ("=&&a", {"a": ""}),
    ],
)
def test_parse_query(query: str | None, expected: dict[str, str]) -> None:
    assert parse_query(query) == expected


# ----------------------------------------------------- Content-Disposition


@pytest.mark.parametrize(
    ("name", "fallback", "encoded"),
    [
        ("report.pdf", "report.pdf", "report.pdf"),
        ("caf\u00e9.txt", "cafe.txt", "caf%C3%A9.txt"),
        ("a b.txt", "a b.txt", "a%20b.txt"),
        ('evil".txt', "evil_.txt", "evil%22.txt"),
        ("back\\slash", "back_slash", "back%5Cslash"),
        ("100%.txt", "100_.txt", "100%25.txt"),
        ("line\r\nSet-Cookie: x=1", "line__Set-Cookie: x=1", "line%0D%0ASet-Cookie%3A%20x%3D1"),
        ("tab\there\x00\x7f", "tab_here__", "tab%09here%00%7F"),
        ("\u65e5\u672c\u8a9e.txt", "___.txt", "%E6%97%A5%E6%9C%AC%E8%AA%9E.txt"),
        ("\u2603", "_", "%E2%98%83"),
        ("...", "download", "..."),
        ("';filename=x", "';filename=x", "%27%3Bfilename%3Dx"),
    ],
)
def test_content_disposition(name: str, fallback: str, encoded: str) -> None:
    value = content_disposition(name)
    assert value == (
        f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}".encode("ascii")
    )
    # Whatever the name: one header line of visible ASCII, one quoted-string.
    assert all(0x20 <= b < 0x7F for b in value)
    quoted = value.split(b'filename="', 1)[1].split(b'"; filename*=', 1)[0]
    assert b'"' not in quoted and b"\\" not in quoted
    assert ascii_fallback(name) == fallback


@pytest.mark.parametrize(
    ("name", "relpath", "globs", "match"),
    [
        ("a.zip", "a.zip", ("*.zip",), True),
        ("a.zip", "deep/dir/a.zip", ("*.zip",), True),
        ("a.ZIP", "a.ZIP", ("*.zip",), False),  # case-sensitive, like the filesystem
        ("a.txt", "a.txt", ("*.zip", "*.txt"), True),
        ("a.bin", "releases/a.bin", ("releases/*",), True),
        ("a.bin", "other/a.bin", ("releases/*",), False),
        ("a.bin", "a.bin", (), False),
    ],
)
def test_download_matches(name: str, relpath: str, globs: tuple[str, ...], match: bool) -> None:
    assert download_matches(name, relpath, globs) is match


# ---- representation selection (serverio.http.select)


CFG = Config.of(directory=".")


def req(target: str = "/a.css", **kw: str | None) -> RequestFacts:
    return RequestFacts(method=b"GET", target=parse_target(b"GET", target.encode()), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("target", "ctype", "cfg", "disposition", "vary"),
    [
        ("/a.css", "text/css", CFG, False, True),
        ("/a.png", "image/png", CFG, False, False),  # not compressible: no Vary
        ("/a.css?download", "text/css", CFG, True, True),
        ("/a.css", "text/css", CFG.evolve(precompressed=False, compress_max_size=0), 0, 0),
        ("/a.css", "text/css", CFG.evolve(precompressed=False), False, True),
        ("/d/a.zip", "application/zip", CFG.evolve(download=("*.zip",)), True, False),
    ],
)
def test_file_headers(target: str, ctype: str, cfg: Config, disposition: bool, vary: bool) -> None:
    r = req(target)
    extra, v = file_headers(r, cfg, r.target.relpath, ctype)
    assert v is bool(vary)
    assert any(name == b"content-disposition" for name, _ in extra) is bool(disposition)


@pytest.mark.parametrize(
    ("fields", "vary", "expected"),
    [
        ({"accept_encoding": "gzip"}, True, True),
        ({"accept_encoding": "gzip"}, False, False),
        ({}, True, False),  # no Accept-Encoding: identity, nothing to negotiate
        ({"accept_encoding": "gzip", "range": "bytes=0-1"}, True, False),  # Range: identity
    ],
)
def test_negotiates(fields: dict[str, str], vary: bool, expected: bool) -> None:
    assert negotiates(req(**fields), vary) is expected


def test_on_the_fly_size_window() -> None:
    assert on_the_fly(10, CFG) == ()
    assert on_the_fly(100_000, CFG) == tuple(CODECS)
    assert on_the_fly(CFG.content.compress_max_size + 1, CFG) == ()


@pytest.mark.parametrize(
    ("accept", "precompressed", "wanted"),
    [
        ("gzip, br", True, ["br", "gzip"]),
        ("gzip;q=0, br", True, ["br"]),
        ("gzip, br", False, []),
    ],
)
def test_sidecars_wanted(accept: str, precompressed: bool, wanted: list[str]) -> None:
    cfg = CFG.evolve(precompressed=precompressed)
    assert sidecars_wanted(req(accept_encoding=accept), cfg) == wanted


@pytest.mark.parametrize(
    ("accept", "size", "sidecars", "expected"),
    [
        ("gzip", 100_000, (), ("gzip", False)),
        ("gzip", 100_000, ("gzip",), ("gzip", True)),  # a sidecar beats compressing
        ("gzip", 10, (), ("", False)),  # too small to compress, no sidecar
        ("gzip", 10, ("gzip",), ("gzip", True)),
        ("identity", 100_000, ("gzip",), ("", False)),
    ],
)
def test_choose_coding(
    accept: str, size: int, sidecars: tuple[str, ...], expected: tuple[str, bool]
) -> None:
    assert choose_coding(req(accept_encoding=accept), CFG, size, sidecars) == expected


@pytest.mark.parametrize(
    ("digest", "want", "expected"),
    [
        (False, None, ""),
        (True, None, "sha-256"),
        (True, "sha-512=5, sha-256=1", "sha-512"),
        (True, "md5=9", ""),  # only unsupported algorithms wanted: none
    ],
)
def test_digest_algorithm(digest: bool, want: str | None, expected: str) -> None:
    cfg = CFG.evolve(digest=digest)
    assert digest_algorithm(req(want_repr_digest=want), cfg) == expected


@pytest.mark.parametrize(
    ("status", "applies"), [(200, True), (206, True), (304, False), (412, False)]
)
def test_digest_applies(status: int, applies: bool) -> None:
    assert digest_applies(error_plan(status, 0.0)) is applies


@pytest.mark.parametrize(
    ("accept", "sidecars", "depends"),
    [
        # br wins at q=1: a .gz (lower q) cannot change that.
        ("br;q=1, gzip;q=0.8", ("br", "gzip"), ["br"]),
        # gzip chosen (no .br): a .br appearing would win, so it counts.
        ("br;q=1, gzip;q=0.8", ("gzip",), ["br", "gzip"]),
        # Equal weights: br is ranked first and wins the tie whatever gzip does.
        ("gzip, br", ("br", "gzip"), ["br"]),
        ("gzip, br", ("gzip",), ["br", "gzip"]),
        # zstd (via *) ties with br, which is ranked before it.
        ("*, gzip;q=0.5", ("zstd", "gzip"), ["br", "zstd"]),
        # Identity or on the fly: every wanted coding's sidecar counts.
        ("br, gzip", (), ["br", "gzip"]),
        ("br;q=0.5, identity", ("br",), ["br"]),
    ],
)
def test_the_choice_depends_only_on_the_sidecars_that_could_change_it(
    accept: str, sidecars: tuple[str, ...], depends: list[str]
) -> None:
    r = req(accept_encoding=accept)
    wanted = sidecars_wanted(r, CFG)
    coding, from_sidecar = choose_coding(r, CFG, 100_000, sidecars)
    assert choice_depends_on(r, wanted, coding, from_sidecar) == depends
    # Whatever happens to a sidecar outside ``depends``, the choice is the same.
    others = [c for c in wanted if c not in depends]
    for present in ((), tuple(others)):
        kept = tuple(c for c in sidecars if c in depends) + present
        assert choose_coding(r, CFG, 100_000, kept) == (coding, from_sidecar)
