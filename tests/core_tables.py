"""Shared constants and helpers of the pure-core table tests
(test_conditionals.py, test_ranges.py, test_decisions.py)."""

from __future__ import annotations

from serverio.config import Config
from serverio.http.core import (
    FileFacts,
    FileSpan,
    Plan,
    RequestFacts,
)
from serverio.http.dates import format_http_date
from serverio.http.target import parse_target

NOW = 1_700_000_000.75
MTIME = 1_699_990_000  # a few hours before NOW
# A sub-second part must not matter: HTTP-dates have one-second resolution.
MTIME_NS = MTIME * 1_000_000_000 + 999_999_999
ETAG = '"1-2-14-abc"'
OTHER = '"1-2-14-abd"'
DATA = bytes(range(20)) + b"\r\n--\r\n" + bytes(range(200, 214))  # 40 bytes, has CRLF
CFG = Config()
CC = "public, max-age=60"
CFG_CC = Config.of(cache_control=CC)


def imf(epoch: int) -> str:
    return format_http_date(epoch)


def file_facts(size: int = len(DATA), etag: str = ETAG, ctype: str = "text/plain") -> FileFacts:
    return FileFacts(size=size, mtime_ns=MTIME_NS, dev=1, ino=2, content_type=ctype, etag=etag)


def request(method: bytes = b"GET", raw: bytes = b"/f.txt", **kw: str | None) -> RequestFacts:
    return RequestFacts(method=method, target=parse_target(method, raw), **kw)  # type: ignore[arg-type]


def header_map(plan: Plan) -> dict[bytes, bytes]:
    names = [n for n, _ in plan.headers]
    assert len(names) == len(set(names)), f"duplicate header in {plan.headers}"
    assert all(n == n.lower() for n in names)
    return dict(plan.headers)


def materialise(body: tuple[bytes | FileSpan, ...], data: bytes) -> bytes:
    """The bytes a connection would write, reading FileSpans from ``data``."""
    out = bytearray()
    for piece in body:
        if isinstance(piece, FileSpan):
            assert 0 <= piece.offset and piece.offset + piece.length <= len(data)
            out += data[piece.offset : piece.offset + piece.length]
        else:
            out += piece
    return bytes(out)
