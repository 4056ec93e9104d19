"""HTTP-dates, media types, and the response head serialiser.

The serialiser's output is fed to h11's client parser whole, one byte at a
time, and with trailing data, as h11's own tests do.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace as dataclasses_replace
from datetime import UTC, datetime

import h11
import pytest

from serverio.config import Config
from serverio.http.core import (
    FileFacts,
    FileSpan,
    Plan,
    RequestFacts,
    decide_file,
    error_plan,
    route,
)
from serverio.http.dates import format_http_date, parse_http_date
from serverio.http.mime import DEFAULT_TYPE, guess_type, is_compressible
from serverio.http.target import parse_target
from serverio.wire.h1 import head_bytes


def epoch(year: int, month: int, day: int, hour: int = 0, minute: int = 0, sec: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, sec, tzinfo=UTC).timestamp())


RFC_EXAMPLE = 784111777  # Sun, 06 Nov 1994 08:49:37 GMT (RFC 9110 §5.6.7)

# -------------------------------------------------------------------- dates


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Sun, 06 Nov 1994 08:49:37 GMT", RFC_EXAMPLE),  # IMF-fixdate
        ("Sunday, 06-Nov-94 08:49:37 GMT", RFC_EXAMPLE),  # RFC 850
        ("Sun Nov  6 08:49:37 1994", RFC_EXAMPLE),  # asctime
        ("Sun Nov 06 08:49:37 1994", RFC_EXAMPLE),
        ("  Sun, 06 Nov 1994 08:49:37 GMT\t", RFC_EXAMPLE),  # surrounding OWS
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0),
        ("Thu, 29 Feb 2024 12:00:00 GMT", epoch(2024, 2, 29, 12)),
        ("Tue, 29 Feb 2000 23:59:59 GMT", epoch(2000, 2, 29, 23, 59, 59)),
        ("Fri, 31 Dec 9999 23:59:59 GMT", epoch(9999, 12, 31, 23, 59, 59)),
        ("Tue, 19 Jan 2038 03:14:08 GMT", 2**31),
        ("Wednesday, 01-Jan-25 00:00:00 GMT", epoch(2025, 1, 1)),
        ("Thursday, 01-Jan-70 00:00:00 GMT", 0),
        ("Wed Jan  1 00:00:00 2025", epoch(2025, 1, 1)),
        ("Sun Nov 16 08:49:37 1994", epoch(1994, 11, 16, 8, 49, 37)),
    ],
)
def test_parse_http_date_accepts(value: str, expected: int) -> None:
    assert parse_http_date(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "0",
        "784111777",
        "1994-11-06T08:49:37Z",
        # Weekday names in the wrong format for the date format.
        "Sunday, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06-Nov-94 08:49:37 GMT",
        "Sunday Nov  6 08:49:37 1994",
        "Sun 06 Nov 1994 08:49:37 GMT",
        "sun, 06 Nov 1994 08:49:37 GMT",
        "Dim, 06 Nov 1994 08:49:37 GMT",
        "Sun., 06 Nov 1994 08:49:37 GMT",
        # Days that do not exist.
        "Thu, 31 Feb 1994 08:49:37 GMT",
        "Wed, 29 Feb 2023 08:49:37 GMT",
        "Thu, 31 Nov 1994 08:49:37 GMT",
        "Sun, 00 Nov 1994 08:49:37 GMT",
        "Sun Nov 31 08:49:37 1994",
        "Sunday, 31-Feb-94 08:49:37 GMT",
        # GMT missing or another zone.
        "Sun, 06 Nov 1994 08:49:37",
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 06 Nov 1994 08:49:37 +0000",
        "Sun, 06 Nov 1994 08:49:37 gmt",
        "Sunday, 06-Nov-94 08:49:37",
        # Extra members (a repeated header joined with a comma).
        "Sun, 06 Nov 1994 08:49:37 GMT, Mon, 07 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT,",
        "Sun, 06 Nov 1994 08:49:37 GMT x",
        # Field shapes.
        "Sun, 6 Nov 1994 08:49:37 GMT",
        "Sun, 006 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 94 08:49:37 GMT",
        "Sun, 06 nov 1994 08:49:37 GMT",
        "Sun, 06 November 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 8:49:37 GMT",
        "Sun, 06 Nov 1994 08:49 GMT",
        "Sun, 06 Nov 1994 08:49:37:00 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 1994 08:60:00 GMT",
        "Sun, 06 Nov 1994 08:49:61 GMT",
        "Sun, 06 Nov 1994 -8:49:37 GMT",
        "Sunday, 06-Nov-1994 08:49:37 GMT",
        "Sunday, 6-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 94",
        "Sun Nov 006 08:49:37 1994",
        "Sun Nov  6 08:49:37 1994 GMT",
        # Non-ASCII digits (superscript two is in latin-1; fullwidth digits).
        "Sun, 06 Nov 1994 08:49:3\u00b2 GMT",
        "Sun, 06 Nov 1994 \uff10\uff18:49:37 GMT",
        "Sun, \uff10\uff16 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov \uff11\uff19\uff19\uff14 08:49:37 GMT",
    ],
)
def test_parse_http_date_rejects(value: str) -> None:
    assert parse_http_date(value) is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (RFC_EXAMPLE, "Sun, 06 Nov 1994 08:49:37 GMT"),
        (RFC_EXAMPLE + 0.999, "Sun, 06 Nov 1994 08:49:37 GMT"),  # truncated
        (0, "Thu, 01 Jan 1970 00:00:00 GMT"),
        (951782400, "Tue, 29 Feb 2000 00:00:00 GMT"),
        (1_700_000_000, "Tue, 14 Nov 2023 22:13:20 GMT"),
        (2**31, "Tue, 19 Jan 2038 03:14:08 GMT"),
        (253402300799, "Fri, 31 Dec 9999 23:59:59 GMT"),
        # Outside Windows' gmtime (1970..3000): found by the Wine run.
        (-1, "Wed, 31 Dec 1969 23:59:59 GMT"),
        (-62135596800, "Mon, 01 Jan 0001 00:00:00 GMT"),
        (32535216000, "Thu, 01 Jan 3001 00:00:00 GMT"),
    ],
)
def test_format_http_date(seconds: float, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every platform formats the same: the C runtime's gmtime is bounded
    # where it is Windows' (its range stood in for here, so Linux's
    # unbounded one cannot hide a dependence on it).
    real_gmtime = time.gmtime

    def windows_gmtime(secs: float | None = None) -> time.struct_time:
        if secs is not None and not 0 <= secs < 32535216000:
            raise OSError(22, "Invalid argument")
        return real_gmtime(secs)

    monkeypatch.setattr(time, "gmtime", windows_gmtime)
    assert format_http_date(seconds) == text
    assert re.fullmatch(r"[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT", text)
    assert parse_http_date(text) == int(seconds)


def test_format_parse_round_trip() -> None:
    # Every day of a leap year and of the years around 2000 and 2038, at odd times.
    t = epoch(1999, 12, 1, 1, 2, 3)
    stop = epoch(2001, 3, 1)
    while t < stop:
        assert parse_http_date(format_http_date(t)) == t
        t += 86400 + 3661
    for t in (2**31 - 1, 2**31, 2**32, epoch(2100, 3, 1), epoch(2400, 2, 29, 23, 59, 59)):
        assert parse_http_date(format_http_date(t)) == t


# --------------------------------------------------------------------- mime

CHARSET = "; charset=utf-8"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("index.html", "text/html" + CHARSET),
        ("index.htm", "text/html" + CHARSET),
        ("style.css", "text/css" + CHARSET),
        ("app.js", "text/javascript" + CHARSET),  # RFC 9239
        ("mod.mjs", "text/javascript" + CHARSET),
        ("notes.txt", "text/plain" + CHARSET),
        ("feed.xml", "text/xml" + CHARSET),
        ("data.json", "application/json"),
        ("logo.svg", "image/svg+xml"),
        ("app.wasm", "application/wasm"),
        ("pic.webp", "image/webp"),
        ("pic.avif", "image/avif"),
        ("font.woff2", "font/woff2"),
        ("pic.png", "image/png"),
        ("pic.jpg", "image/jpeg"),
        ("pic.jpeg", "image/jpeg"),
        ("anim.gif", "image/gif"),
        ("favicon.ico", "image/vnd.microsoft.icon"),
        ("doc.pdf", "application/pdf"),
        ("movie.mp4", "video/mp4"),
        ("movie.webm", "video/webm"),
        # Case-insensitive extension, last extension wins.
        ("INDEX.HTML", "text/html" + CHARSET),
        ("Photo.JpG", "image/jpeg"),
        ("archive.html.png", "image/png"),
        ("my.dir.name.CSS", "text/css" + CHARSET),
        # Unknown, none, dotfiles.
        ("file.unknownext", DEFAULT_TYPE),
        ("Makefile", DEFAULT_TYPE),
        ("README", DEFAULT_TYPE),
        ("trailingdot.", DEFAULT_TYPE),
        (".bashrc", DEFAULT_TYPE),
        (".html", DEFAULT_TYPE),
        (".env", DEFAULT_TYPE),
        ("", DEFAULT_TYPE),
    ],
)
def test_guess_type(name: str, expected: str) -> None:
    got = guess_type(name)
    if expected.endswith(CHARSET) or expected == DEFAULT_TYPE:
        assert got == expected
    else:
        # Non-text types: the base type is fixed; a charset is only for text.
        base, _, params = got.partition(";")
        assert base == expected
        assert params in ("", " charset=utf-8")
        if not expected.endswith(("json", "+xml")):
            assert params == ""


def test_default_type_and_text_charset() -> None:
    assert DEFAULT_TYPE == "application/octet-stream"
    for name in ("a.html", "a.css", "a.js", "a.mjs", "a.txt", "a.xml", "a.csv", "a.md"):
        t = guess_type(name)
        assert t.startswith("text/") and t.endswith("; charset=utf-8"), name
    for name in ("a.png", "a.jpg", "a.gif", "a.webp", "a.avif", "a.woff2", "a.mp4", "a.pdf"):
        assert "charset" not in guess_type(name), name


@pytest.mark.parametrize(
    ("ctype", "expected"),
    [
        ("text/html; charset=utf-8", True),
        ("text/css", True),
        ("application/json", True),
        ("image/svg+xml", True),
        ("application/wasm", True),
        (" text/plain ; charset=utf-8", True),
        ("image/png", False),
        ("image/jpeg", False),
        ("video/mp4", False),
        ("font/woff2", False),
        ("application/octet-stream", False),
        ("application/gzip", False),
    ],
)
def test_is_compressible(ctype: str, expected: bool) -> None:
    assert is_compressible(ctype) is expected


# --------------------------------------------------------------------- wire


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        (b"date", b"Date"),
        (b"last-modified", b"Last-Modified"),
        (b"etag", b"ETag"),
        (b"cache-control", b"Cache-Control"),
        (b"accept-ranges", b"Accept-Ranges"),
        (b"content-type", b"Content-Type"),
        (b"content-length", b"Content-Length"),
        (b"content-range", b"Content-Range"),
        (b"content-encoding", b"Content-Encoding"),
        (b"location", b"Location"),
        (b"allow", b"Allow"),
        (b"retry-after", b"Retry-After"),
        (b"vary", b"Vary"),
        (b"x-content-type-options", b"X-Content-Type-Options"),
    ],
)
def test_canonical_header_names(name: bytes, canonical: bytes) -> None:
    # The serialiser adds no field: what it writes is the plan's (one header
    # policy, serverio.http.core.common_fields).
    out = head_bytes(200, [(name, b"v")], close=False, keep_alive_10=False)
    assert out == b"HTTP/1.1 200 OK\r\n" + canonical + b": v\r\n\r\n"


def test_head_bytes_exact() -> None:
    out = head_bytes(
        206,
        [(b"content-range", b"bytes 0-0/9"), (b"content-length", b"1"), (b"x-other", b"y")],
        close=False,
        keep_alive_10=False,
    )
    assert out == (
        b"HTTP/1.1 206 Partial Content\r\n"
        b"Content-Range: bytes 0-0/9\r\n"
        b"Content-Length: 1\r\n"
        b"x-other: y\r\n"
        b"\r\n"
    )


@pytest.mark.parametrize(
    ("close", "keep_alive_10", "connection"),
    [
        (False, False, None),
        (True, False, b"close"),
        (False, True, b"keep-alive"),
        (True, True, b"close"),  # closing wins
    ],
)
def test_connection_header(close: bool, keep_alive_10: bool, connection: bytes | None) -> None:
    out = head_bytes(200, [(b"content-length", b"0")], close=close, keep_alive_10=keep_alive_10)
    lines = out.split(b"\r\n")
    conn = [ln for ln in lines if ln.lower().startswith(b"connection:")]
    assert conn == ([] if connection is None else [b"Connection: " + connection])


@pytest.mark.parametrize("status", [100, 200, 204, 206, 299, 304, 404, 416, 418, 451, 503, 599])
def test_status_lines(status: int) -> None:
    out = head_bytes(status, [], close=False, keep_alive_10=False)
    assert re.fullmatch(
        rb"HTTP/1\.1 %d [\x21-\x7e][\x20-\x7e]*\r\n\r\n" % status,
        out,
    ), out
    assert head_bytes(status, [], close=False, keep_alive_10=False) == out  # memo is stable


def assert_crlf_only(data: bytes) -> None:
    stripped = data.replace(b"\r\n", b"")
    assert b"\n" not in stripped and b"\r" not in stripped


# h11-style feeding: a client parser receives our bytes whole and one byte at
# a time, followed by the start of another response that must be left over.

DATA = b"0123456789abcdefghijklmnopqrstuvwxyz\r\nEND"
NOW = 1_700_000_000.0
FACTS = FileFacts(
    size=len(DATA), mtime_ns=1_690_000_000 * 10**9, dev=3, ino=4, content_type="text/plain"
)
CFG = Config.of(cache_control="no-cache")
NEXT = b"HTTP/1.1 200 OK\r\n"


def wire(plan: Plan, *, keep_alive_10: bool = False) -> tuple[bytes, bytes]:
    """The head and the body bytes a connection would write for ``plan``."""
    head = head_bytes(plan.status, plan.headers, close=plan.close, keep_alive_10=keep_alive_10)
    assert_crlf_only(head)
    assert head.endswith(b"\r\n\r\n") and head.count(b"\r\n\r\n") == 1
    body = bytearray()
    if plan.send_body:
        for piece in plan.body:
            if isinstance(piece, FileSpan):
                body += DATA[piece.offset : piece.offset + piece.length]
            else:
                body += piece
    return head, bytes(body)


def client_parse(
    data: bytes, method: str, *, bytewise: bool
) -> tuple[h11.Response, bytes, h11.Connection, bytes]:
    """Parse one response; returns it, its body, the parser and the leftover bytes."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method=method, target="/", headers=[("Host", "t")]))
    conn.send(h11.EndOfMessage())
    step = 1 if bytewise else len(data)
    response: h11.Response | None = None
    body = bytearray()
    i = 0
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            assert i < len(data), "the parser wants more bytes than were sent"
            conn.receive_data(data[i : i + step])
            i += step
        elif isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            break
        else:
            raise AssertionError(f"unexpected event {event!r}")
    assert response is not None
    return response, bytes(body), conn, conn.trailing_data[0] + data[i:]


def _req(method: bytes, **kw: str) -> RequestFacts:
    return RequestFacts(method, parse_target(method, b"/f.txt"), **kw)  # type: ignore[arg-type]


def _plans() -> list[tuple[str, str, Plan]]:
    options = route(_req(b"OPTIONS"), CFG, NOW)
    assert options is not None
    return [
        ("get-200", "GET", decide_file(_req(b"GET"), FACTS, CFG, NOW)),
        ("head-200", "HEAD", decide_file(_req(b"HEAD"), FACTS, CFG, NOW)),
        ("range-206", "GET", decide_file(_req(b"GET", range="bytes=3-5"), FACTS, CFG, NOW)),
        (
            "multipart-206",
            "GET",
            decide_file(_req(b"GET", range="bytes=0-1,30-"), FACTS, CFG, NOW, boundary="BND"),
        ),
        ("304", "GET", decide_file(_req(b"GET", if_none_match="*"), FACTS, CFG, NOW)),
        ("304-head", "HEAD", decide_file(_req(b"HEAD", if_none_match="*"), FACTS, CFG, NOW)),
        ("412", "GET", decide_file(_req(b"GET", if_match='"x"'), FACTS, CFG, NOW)),
        ("416", "GET", decide_file(_req(b"GET", range="bytes=99-"), FACTS, CFG, NOW)),
        ("404-close", "GET", error_plan(404, NOW, close=True)),
        ("options-204", "OPTIONS", options),
    ]


PLANS = _plans()


@pytest.mark.parametrize(("method", "plan"), [p[1:] for p in PLANS], ids=[p[0] for p in PLANS])
@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
def test_h11_parses_our_responses(method: str, plan: Plan, bytewise: bool) -> None:
    head, body = wire(plan)
    response, got, conn, leftover = client_parse(head + body + NEXT, method, bytewise=bytewise)
    assert response.status_code == plan.status
    # h11 found exactly our body, framed by our Content-Length (or by the status).
    assert got == body and leftover == NEXT
    sent = dict(plan.headers)
    received = list(response.headers)
    expected = sorted(sent.items()) + ([(b"connection", b"close")] if plan.close else [])
    assert plan.headers[0] == (b"x-content-type-options", b"nosniff")  # every plan, first
    assert sorted(received) == sorted(expected)
    if plan.close:
        assert conn.their_state is h11.MUST_CLOSE
    else:
        assert conn.their_state is h11.DONE


def test_h11_sees_full_file_and_multipart_bodies() -> None:
    get = {name: plan for name, _, plan in PLANS}
    _, body = wire(get["get-200"])
    assert body == DATA
    _, body = wire(get["range-206"])
    assert body == DATA[3:6]
    _, body = wire(get["multipart-206"])
    assert body.startswith(b"--BND\r\n") and body.endswith(b"\r\n--BND--\r\n")
    assert DATA[0:2] in body and DATA[30:] in body


def test_http10_keep_alive_head_is_parsed() -> None:
    plan = decide_file(_req(b"GET"), FACTS, CFG, NOW)
    head, body = wire(plan, keep_alive_10=True)
    assert head.endswith(b"\r\nConnection: keep-alive\r\n\r\n")
    response, got, _, leftover = client_parse(head + body, "GET", bytewise=False)
    assert response.status_code == 200 and got == DATA and leftover == b""
    assert (b"connection", b"keep-alive") in list(response.headers)


# ------------------------------------------------- head cache, canned responses


def test_a_plan_carries_no_wire_bytes() -> None:
    """The pure Plan is protocol-free: the HTTP/1.1 head of a shared plan
    lives in the transport's cache (wire.h1.shared_head), not on it."""
    import dataclasses

    fields = {f.name: f.type for f in dataclasses.fields(Plan)}
    assert "head" not in fields
    assert not [n for n, t in fields.items() if "bytes | None" in str(t)]


def test_shared_head_is_serialised_once_per_plan_and_bounded() -> None:
    from serverio.wire import h1 as wire

    wire.SHARED_HEADS.clear()
    a = dataclasses_replace(error_plan(404, 1.7e9), shared=True)
    b = dataclasses_replace(a)  # equal, but another object: its own entry
    first = wire.shared_head(a)
    assert first == head_bytes(a.status, a.headers, close=False, keep_alive_10=False)
    assert wire.shared_head(a) is first  # cached, not rebuilt
    assert wire.shared_head(b) == first and wire.shared_head(b) is not first
    # An id reused by a plan with other headers is a miss, never a stale head.
    wire.SHARED_HEADS[id(b)] = (a.headers[:1], a.status, b"stale")
    assert wire.shared_head(b) == first
    plans = [dataclasses_replace(a) for _ in range(wire.SHARED_HEADS_MAX + 10)]
    for p in plans:
        wire.shared_head(p)
    assert len(wire.SHARED_HEADS) <= wire.SHARED_HEADS_MAX
    wire.SHARED_HEADS.clear()


@pytest.mark.parametrize(
    ("status", "allow"), [(503, b"GET, HEAD, OPTIONS"), (400, b""), (405, b"GET, HEAD")]
)
@pytest.mark.parametrize("head_only", [False, True])
def test_canned_is_the_error_plan_serialised(status: int, allow: bytes, head_only: bool) -> None:
    """A canned response is exactly what head_bytes writes for the same
    error_plan at that second (its Date included), body and all."""
    from serverio.wire.h1 import Canned

    kw = {"allow": allow} if allow else {}
    canned = Canned(error_plan(status, 0.0, close=True, **kw))  # type: ignore[arg-type]
    for now in (1.7e9, 1.7e9 + 0.5, 1.7e9 + 3):
        plan = error_plan(status, now, close=True, **kw)  # type: ignore[arg-type]
        head = head_bytes(plan.status, plan.headers, close=True, keep_alive_10=False)
        want = head if head_only else head + plan.body[0]  # type: ignore[operator]
        assert canned.at(now, head_only=head_only) == want
