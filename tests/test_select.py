"""Representation selection (serverio.http.select): pure, table-driven."""

from __future__ import annotations

from dataclasses import replace

import pytest

from serverio import Config, RequestFacts, parse_target
from serverio.http.codecs import CODECS
from serverio.http.core import error_plan
from serverio.http.select import (
    choose_coding,
    digest_algorithm,
    digest_applies,
    file_headers,
    negotiates,
    on_the_fly,
    sidecars_wanted,
)

CFG = Config(directory=".")


def req(target: str = "/a.css", **kw: str | None) -> RequestFacts:
    return RequestFacts(method=b"GET", target=parse_target(b"GET", target.encode()), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("target", "ctype", "cfg", "disposition", "vary"),
    [
        ("/a.css", "text/css", CFG, False, True),
        ("/a.png", "image/png", CFG, False, False),  # not compressible: no Vary
        ("/a.css?download", "text/css", CFG, True, True),
        ("/a.css", "text/css", replace(CFG, precompressed=False, compress_max_size=0), 0, 0),
        ("/a.css", "text/css", replace(CFG, precompressed=False), False, True),
        ("/d/a.zip", "application/zip", replace(CFG, download=("*.zip",)), True, False),
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
    assert on_the_fly(CFG.compress_max_size + 1, CFG) == ()


@pytest.mark.parametrize(
    ("accept", "precompressed", "wanted"),
    [
        ("gzip, br", True, ["br", "gzip"]),
        ("gzip;q=0, br", True, ["br"]),
        ("gzip, br", False, []),
    ],
)
def test_sidecars_wanted(accept: str, precompressed: bool, wanted: list[str]) -> None:
    cfg = replace(CFG, precompressed=precompressed)
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
    cfg = replace(CFG, digest=digest)
    assert digest_algorithm(req(want_repr_digest=want), cfg) == expected


@pytest.mark.parametrize(
    ("status", "applies"), [(200, True), (206, True), (304, False), (412, False)]
)
def test_digest_applies(status: int, applies: bool) -> None:
    assert digest_applies(error_plan(status, 0.0)) is applies
