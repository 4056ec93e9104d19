"""File names chosen by an attacker: links, headers and times that stay inert.

Anyone who can create a file under the root chooses its name (and, on some
filesystems, its mtime).  These tests pin what the server makes of that:
links that are always relative paths to exactly that file, a restrictive
CSP on generated pages, ``nosniff`` on every response, visible bidi and
control characters, a safe Content-Disposition fallback, and times no
HTTP-date can express treated as unknown.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, unquote_to_bytes, urljoin, urlsplit

import pytest
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from serverio import AccessLog, Server
from serverio.fs import filecache as _filecache
from serverio.http.core import FileFacts, RequestFacts, decide_directory, decide_file
from serverio.http.dates import MAX_HTTP_SECONDS, MIN_HTTP_SECONDS, format_http_date, http_seconds
from serverio.http.disposition import ascii_fallback, content_disposition
from serverio.http.listing import (
    LISTING_CSP,
    Entry,
    ListingQuery,
    json_text,
    render_html,
    render_json,
    shown_name,
    sort_entries,
)
from serverio.http.target import parse_target, quote_segment
from testkit import simulation

from .conftest import HTTPClient, connect, make_config, memory_connection, running_server

# ------------------------------------------------------------------ encoder

UNRESERVED_OR_PCT = re.compile(r"(?:[A-Za-z0-9._~-]|%[0-9A-F]{2})*")


@pytest.mark.parametrize(
    ("name", "encoded"),
    [
        ("plain.txt", "plain.txt"),
        ("~a-b_c.d", "~a-b_c.d"),
        ("javascript:alert(1)", "javascript%3Aalert%281%29"),
        ("data:text,x", "data%3Atext%2Cx"),
        ("%2e%2e", "%252e%252e"),
        ("?#;", "%3F%23%3B"),
        ("a\\b", "a%5Cb"),
        (" lead and trail. ", "%20lead%20and%20trail.%20"),
        ("..", ".."),  # only ever used after "./" and never requested bare
        ("@:!$&'()*+,=", "%40%3A%21%24%26%27%28%29%2A%2B%2C%3D"),
        ("tab\there\r\n", "tab%09here%0D%0A"),
        ("caf\u00e9", "caf%C3%A9"),
        ("\u202egnp.exe", "%E2%80%AEgnp.exe"),
        ("\udcff\udcfe", "%FF%FE"),  # undecodable bytes, as os.listdir returns them
        ("\x7f", "%7F"),
    ],
)
def test_quote_segment_encodes_every_byte_outside_unreserved(name: str, encoded: str) -> None:
    assert quote_segment(name) == encoded
    assert UNRESERVED_OR_PCT.fullmatch(encoded)


# Undecodable bytes in a name exist only where names are bytes (POSIX):
# Windows names are UTF-16, and its os.fsdecode is strict UTF-8.
_NAMES = st.text(alphabet=st.characters(exclude_characters="/\x00"), min_size=1, max_size=40)
if os.name != "nt":
    _NAMES = _NAMES | st.binary(min_size=1, max_size=40).map(os.fsdecode)


@given(_NAMES)
def test_quote_segment_round_trips_through_the_target_parser(name: str) -> None:
    try:
        name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return  # a surrogate that stands for no byte: os.listdir never gives one
    if name in (".", "..") or "/" in name or "\x00" in name:
        return  # refused by the parser (400, 404) whatever the encoding
    href = quote_segment(name)
    assert UNRESERVED_OR_PCT.fullmatch(href)
    target = parse_target(b"GET", b"/dir/" + href.encode("ascii"))
    assert target.segments == ("dir", name)


@pytest.mark.parametrize(
    ("entry", "href"),
    [
        (Entry("javascript:alert(1)", False, 1, 0), "./javascript%3Aalert%281%29"),
        (Entry("data:text,x", False, 1, 0), "./data%3Atext%2Cx"),
        (Entry("//evil.example", True, -1, 0), "./%2F%2Fevil.example/"),
        (Entry("\\\\evil.example", False, 1, 0), "./%5C%5Cevil.example"),
        (Entry("x y#z", True, -1, 0), "./x%20y%23z/"),
    ],
)
def test_listing_links_are_dot_slash_relative_paths(entry: Entry, href: str) -> None:
    doc = json.loads(render_json(("sub",), [entry]))
    assert doc["entries"][0]["href"] == href
    rows = _rows(render_html(("sub",), [entry], ListingQuery()).decode())
    assert [h for h, _ in rows] == ["../", href]


def test_breadcrumbs_and_redirects_are_paths_that_cannot_name_a_host() -> None:
    page = render_html(("javascript:x", "b c"), [], ListingQuery()).decode()
    p = _Anchors()
    p.feed(page)
    assert p.links[:3] == ["../../", "../", "./"]
    # No scheme, no authority, no absolute path (which a proxy prefix breaks).
    assert all(h.startswith(("./", "../", "?")) for h in p.links), p.links
    # The directory redirect's Location: one "/" then encoded segments.
    req = RequestFacts(b"GET", parse_target(b"GET", b"/javascript:x/%5Cevil/b%20c"))
    plan = decide_directory(req, make_config(Path(".")), 0.0)
    assert plan.status == 301
    assert dict(plan.headers)[b"location"] == b"/javascript%3Ax/%5Cevil/b%20c/"


# ----------------------------------------------------- shown names, CSP


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("plain.txt", "plain.txt"),
        ("caf\u00e9 \u65e5\u672c.txt", "caf\u00e9 \u65e5\u672c.txt"),
        ("invoice\u202efdp.exe", "invoice<U+202E>fdp.exe"),
        ("\u2066x\u2069\u200f\u061c", "<U+2066>x<U+2069><U+200F><U+061C>"),
        ("a\tb\nc\x7f\x85", "a<U+0009>b<U+000A>c<U+007F><U+0085>"),
        ("line\u2028para\u2029", "line<U+2028>para<U+2029>"),
        ("bad\udcff", "bad<0xFF>"),
        ("family\U0001f468\u200d\U0001f469", "family\U0001f468\u200d\U0001f469"),  # ZWJ kept
    ],
)
def test_bidi_and_control_characters_are_shown_visibly(name: str, shown: str) -> None:
    assert shown_name(name) == shown


def test_shown_name_in_html_but_exact_name_in_link_and_json() -> None:
    e = Entry("invoice\u202efdp.exe", False, 3, 0)
    page = render_html((), [e], ListingQuery()).decode()
    assert "\u202e" not in page and "invoice&lt;U+202E&gt;fdp.exe" in page
    assert _rows(page) == [("./invoice%E2%80%AEfdp.exe", "invoice<U+202E>fdp.exe")]
    assert json.loads(render_json((), [e]))["entries"][0]["name"] == e.name


def test_csp_allows_exactly_the_inline_style_and_filter_script() -> None:
    page = render_html((), [], ListingQuery()).decode()
    [style] = re.findall(r"<style>(.*?)</style>", page, re.S)
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert len(scripts) == 2  # the theme's (head) and the page's
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    script_digests = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in scripts
    )
    policy = LISTING_CSP.decode()
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives == {
        "default-src": "'none'",
        "style-src": f"'sha256-{digest}'",
        "script-src": script_digests,  # the page's own two, nothing else
        "img-src": "'self'",  # a README's relative images
        "connect-src": "'self'",  # the page's fetch() calls: this origin only
        "base-uri": "'none'",
        "form-action": "'self'",  # the filter box is a GET form to the page itself
        "frame-ancestors": "'none'",
    }


# ---------------------------------------------------------------- dates


@pytest.mark.parametrize(
    ("mtime_ns", "seconds"),
    [
        (0, 0),
        (1_700_000_000_999_999_999, 1_700_000_000),
        (-1, -1),  # 1969-12-31T23:59:59: a real (if odd) time
        (MAX_HTTP_SECONDS * 10**9, MAX_HTTP_SECONDS),
        ((MAX_HTTP_SECONDS + 1) * 10**9, None),  # year 10000
        (300_000_000_000 * 10**9, None),  # year 11476 (tmpfs, btrfs allow it)
        (MIN_HTTP_SECONDS * 10**9, MIN_HTTP_SECONDS),
        (MIN_HTTP_SECONDS * 10**9 - 1, None),
        (-(10**26), None),  # os.utime(path, (t, -1e17)) on tmpfs
    ],
)
def test_http_seconds_is_none_outside_four_digit_years(mtime_ns: int, seconds: int | None) -> None:
    assert http_seconds(mtime_ns) == seconds
    if seconds is None:
        with pytest.raises(ValueError):
            format_http_date(mtime_ns // 10**9)
    else:
        assert re.fullmatch(
            r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", format_http_date(seconds)
        )


FAR = 300_000_000_000 * 10**9
FAR_FACTS = FileFacts(size=5, mtime_ns=FAR, dev=1, ino=2, content_type="text/plain")


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 200),
        ({"if_modified_since": "Sat, 01 Jan 2000 00:00:00 GMT"}, 200),  # ignored: no date
        ({"if_unmodified_since": "Sat, 01 Jan 2000 00:00:00 GMT"}, 200),  # ignored: no date
        ({"if_none_match": FAR_FACTS.etag}, 304),  # the ETag still validates
        ({"if_match": '"other"'}, 412),
        ({"range": "bytes=0-0", "if_range": "Sat, 01 Jan 2000 00:00:00 GMT"}, 200),
        ({"range": "bytes=0-0", "if_range": FAR_FACTS.etag}, 206),
    ],
)
def test_unknown_mtime_has_no_last_modified_and_no_date_validation(
    headers: dict[str, str], status: int
) -> None:
    req = RequestFacts(b"GET", parse_target(b"GET", b"/f.txt"), **headers)  # type: ignore[arg-type]
    plan = decide_file(req, FAR_FACTS, make_config(Path(".")), 1_700_000_000.0)
    assert plan.status == status
    hs = dict(plan.headers)
    assert b"last-modified" not in hs
    if status in (200, 206, 304):
        assert hs[b"etag"] == FAR_FACTS.etag.encode()


def test_listing_shows_unknown_times_and_sorts_them_last() -> None:
    entries = [Entry("far", False, 1, None), Entry("old", False, 1, 0), Entry("new", False, 1, 9)]
    asc = sort_entries(entries, ListingQuery("mtime", "asc"))
    assert [e.name for e in asc] == ["old", "new", "far"]
    desc = sort_entries(entries, ListingQuery("mtime", "desc"))
    assert [e.name for e in desc] == ["far", "new", "old"]
    doc = json.loads(render_json((), asc))
    assert [e["mtime"] for e in doc["entries"]] == [0, 9, None]
    page = render_html((), asc, ListingQuery()).decode()
    assert '<td class="time" title="unknown">\u2014</td>' in page
    assert '<time datetime="1970-01-01T00:00:00Z">1970-01-01<span> 00:00</span></time>' in page


@contextlib.contextmanager
def _odd_time_tree() -> Iterator[Path]:
    """A tree on a filesystem that stores any 64-bit time (tmpfs)."""
    base = Path("/dev/shm")
    if not base.is_dir():
        pytest.skip("no /dev/shm tmpfs to store an out-of-range mtime")
    tmp = Path(tempfile.mkdtemp(dir=base))
    try:
        (tmp / "dir").mkdir()
        for name, t in (("far.txt", 3e11), ("before.txt", -1e17), ("ok.txt", 1.6e9)):
            (tmp / "dir" / name).write_bytes(name.encode())
            try:
                os.utime(tmp / "dir" / name, (t, t))
            except OSError as exc:  # Windows: FILETIME starts in 1601
                pytest.skip(f"this platform cannot store an mtime of {t:g} s ({exc})")
        if os.stat(tmp / "dir" / "far.txt").st_mtime < 2e11:
            pytest.skip("this /dev/shm clamps file times")
        yield tmp
    finally:
        shutil.rmtree(tmp)


@pytest.fixture
def settled_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files just written count as settled, so the warm file cache takes them."""
    monkeypatch.setattr(_filecache, "RACY_SECONDS", -3600.0)


@pytest.mark.usefixtures("settled_files")
async def test_out_of_range_mtimes_never_break_a_listing_or_a_connection() -> None:
    with _odd_time_tree() as tree:
        async with memory_connection(make_config(tree)) as (client, srv, _):
            for _ in range(2):  # the second round is answered from the warm file cache
                page = await client.get("/dir/")
                assert page.status == 200 and page.header("content-security-policy")
                assert page.body.count(b'title="unknown"') == 2
                doc = json.loads((await client.get("/dir/?format=json")).body)
                times = {e["name"]: e["mtime"] for e in doc["entries"]}
                assert times == {"far.txt": None, "before.txt": None, "ok.txt": 1_600_000_000}
                for name in ("far.txt", "before.txt"):
                    r = await client.get(f"/dir/{name}")
                    assert r.status == 200 and r.body == name.encode()
                    assert r.header("last-modified") is None and r.header("etag")
                    ims = await client.get(
                        f"/dir/{name}", "If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\n"
                    )
                    assert ims.status == 200  # no date to compare with
                    inm = await client.get(f"/dir/{name}", f"If-None-Match: {r.header('etag')}\r\n")
                    assert inm.status == 304
                ok = await client.get("/dir/ok.txt")
                assert ok.header("last-modified") == "Sun, 13 Sep 2020 12:26:40 GMT"
            assert srv.files.stats.hits > 0


# ------------------------------------------------------- Content-Disposition


@pytest.mark.parametrize(
    ("name", "fallback"),
    [
        ("x\uff0f..\uff0f..\uff0f.bashrc", "x_.._.._.bashrc"),
        ("\uff0e\uff0e\uff0f\uff0e\uff0e\uff0fevil.sh", "_.._evil.sh"),
        ("..\uff3c..\uff3cboot.ini", "_.._boot.ini"),
        ("\u2024\u2025hidden", "hidden"),  # one- and two-dot leaders decompose to dots
        ("a/b\\c", "a_b_c"),
        ("\uff0e\uff0e\uff0e", "download"),
        (".bashrc", "bashrc"),
        ("tab\t\x00\x1b[31m.txt", "tab___[31m.txt"),
        ('q"uote%41.txt', "q_uote_41.txt"),
        ("caf\u00e9.txt", "cafe.txt"),
    ],
)
def test_ascii_fallback_never_carries_a_path_a_dotfile_or_controls(
    name: str, fallback: str
) -> None:
    assert ascii_fallback(name) == fallback
    value = content_disposition(name).decode("ascii")
    m = re.fullmatch(r"attachment; filename=\"([^\"]*)\"; filename\*=UTF-8''(.*)", value)
    assert m and m.group(1) == fallback
    # RFC 8187: the exact name, percent-encoded UTF-8 over attr-char.
    assert re.fullmatch(r"(?:[A-Za-z0-9!#$&+.^_`|~-]|%[0-9A-F]{2})*", m.group(2))
    assert unquote(m.group(2), errors="strict") == name


@given(st.text(max_size=30))
def test_ascii_fallback_property(name: str) -> None:
    out = ascii_fallback(name)
    assert out and out.isascii() and out.isprintable()
    assert not set(out) & set('/\\"%') and not out.startswith((".", " "))


@pytest.mark.skipif(
    os.name == "nt", reason="needs byte file names (POSIX): Windows names are UTF-16"
)
def test_disposition_of_a_name_outside_utf8_carries_its_bytes() -> None:
    name = os.fsdecode(b"caf\xe9 \xff\xc0\xae.txt")
    value = content_disposition(name).decode("ascii")
    assert value == (
        "attachment; filename=\"caf_ ___.txt\"; filename*=UTF-8''caf%E9%20%FF%C0%AE.txt"
    )


@pytest.mark.skipif(
    simulation.WINDOWS_SHAPED,
    reason="names with undecodable bytes, ':' or control characters cannot exist on Windows",
)
@pytest.mark.parametrize("fmt", ["common", "json"])
async def test_names_outside_utf8_through_every_emitter(tmp_path: Path, fmt: str) -> None:
    """A directory and a file whose names are not UTF-8: the redirect, the
    listing (HTML, JSON), the file, ``?download`` and the access log."""
    base = os.fsencode(tmp_path)
    os.mkdir(os.path.join(base, b"d\xe9"))
    _make(Path(os.fsdecode(os.path.join(base, b"d\xe9"))), [], [], [b"\xff\n.txt"])
    out = io.StringIO()
    cfg = make_config(tmp_path)
    srv = Server(cfg, access_log=AccessLog(fmt, out))
    async with memory_connection(cfg, server=srv) as (client, _, _):
        moved = await client.get("/d%E9")
        assert moved.status == 301 and moved.header("location") == "/d%E9/"
        page = await client.get("/d%E9/")
        assert page.status == 200
        text = page.body.decode("utf-8")
        assert _rows(text) == [("../", "../"), ("./%FF%0A.txt", "<0xFF><U+000A>.txt")]
        assert "<title>Index of /d&lt;0xE9&gt;/</title>" in text
        doc = json.loads((await client.get("/d%E9/?format=json")).body)
        assert doc["path"] == "/d\ufffd/"
        [entry] = doc["entries"]
        assert entry["name"] == "\ufffd\n.txt" and entry["href"] == "./%FF%0A.txt"
        got = await client.get("/d%E9/%FF%0A.txt")
        assert got.status == 200 and got.body == b"file:\xff\n.txt"
        down = await client.get("/d%E9/%FF%0A.txt?download")
        assert down.header("content-disposition") == (
            "attachment; filename=\"__.txt\"; filename*=UTF-8''%FF%0A.txt"
        )
        # Raw bytes outside ASCII in a target are not a request-target at all
        # (RFC 9112 §3.2): refused by the parser before any lookup or log.
        await client.send_raw(b"GET /d\xe9/\xff\x1b[2J.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        assert (await client.read_response()).status == 400
    lines = out.getvalue().splitlines()
    assert len(lines) == 6  # one line per response: no name can add one
    for line in lines:
        assert line.isascii() and line.isprintable(), repr(line)
    targets = ["/d%E9", "/d%E9/", "/d%E9/?format=json", "/d%E9/%FF%0A.txt"]
    targets += ["/d%E9/%FF%0A.txt?download", "-"]
    if fmt == "json":
        assert [json.loads(x)["target"] for x in lines] == targets
    else:
        assert [x.split('"')[1].split(" ")[1] for x in lines] == targets


# ----------------------------------------------------- nosniff everywhere


@pytest.mark.usefixtures("settled_files")
async def test_every_response_says_nosniff(root: Path) -> None:
    async with memory_connection(make_config(root)) as (client, srv, _):
        responses = [await client.get("/data.bin") for _ in range(4)]  # miss, hits, memo
        responses += [
            await client.get("/noindex/"),
            await client.get("/noindex"),  # 301
            await client.get("/missing"),  # 404
            await client.get("/data.bin", "Range: bytes=9999-\r\n"),  # 416
            await client.get("/hello.txt", method="HEAD"),
        ]
        await client.send_raw(b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n")
        responses.append(await client.read_response(head=True))
        responses.append(await client.get("/%zz"))  # 400, and the connection closes
        assert srv.files.stats.hits >= 2
    assert [r.status for r in responses] == [200] * 4 + [200, 301, 404, 416, 200, 204, 400]
    for r in responses:
        assert r.header("x-content-type-options") == "nosniff", r.status
    assert responses[4].header("content-security-policy") == LISTING_CSP.decode()
    assert responses[5].header("location") == "/noindex/"


# ------------------------------------------------ round trip over a socket


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.rows: list[tuple[str, str]] = []
        self._in_name = False
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "td":
            self._in_name = a.get("class") == "name"
        elif tag == "a":
            self.links.append(a.get("href") or "")
            if self._in_name:
                self._href, self._text = a.get("href") or "", []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.rows.append((self._href, "".join(self._text)))
            self._href = None


def _rows(page: str) -> list[tuple[str, str]]:
    p = _Anchors()
    p.feed(page)
    return p.rows


HOSTILE = [
    "javascript:alert(1)",
    "JaVaScRiPt:alert(document.domain)",
    "data:text,x",
    "vbscript:x",
    "%2e%2e",
    "%2F",
    "..%2f..%2fetc",
    "?#;",
    "a?b#c;d",
    "back\\slash",
    "\\\\host\\share",
    " lead",
    "trail ",
    "trail.",
    "...",
    "..a",
    "a" * 255,
    "\u00e9" * 127,  # 254 bytes
    "\u202egnp.exe",
    "x\u2066y\u2069",
    "tab\tnl\ncr\r",
    "<img src=x onerror=alert(1)>",
    "&amp;",
    "@evil.example",
    "http:evil.example:80",
    "+ %20 +",
    ".hidden",
]
PIECES = st.sampled_from([*HOSTILE, ":", "%", "?", "#", " ", ".", "\\", "\u202e", "~"])
NAMES = st.lists(
    PIECES | st.text(st.characters(exclude_characters="/\x00"), max_size=6), max_size=4
)
NAME = NAMES.map("".join).filter(lambda n: n not in ("", ".", "..") and _fits(n))


def _fits(name: str) -> bool:
    try:
        return len(name.encode("utf-8")) <= 255
    except UnicodeEncodeError:
        return False


def _make(base: Path, names: list[str], dirs: list[str], raw: list[bytes]) -> None:
    for name in names:
        (base / name).write_bytes(b"file:" + os.fsencode(name))
    for name in dirs:
        (base / name).mkdir()
    for b in raw:  # names that are not UTF-8: listed and served by their bytes
        with open(os.path.join(os.fsencode(base), b), "wb") as f:
            f.write(b"file:" + b)


def _href_bytes(href: str) -> bytes:
    """The name an entry's ``./...`` href names, as bytes."""
    return unquote_to_bytes(href[2:].removesuffix("/"))


async def _check_listing(
    client: HTTPClient, port: int, names: list[str], dirs: list[str], raw: list[bytes]
) -> None:
    listing = f"http://127.0.0.1:{port}/t/"
    want = {os.fsencode(n): False for n in names if not n.startswith(".")}
    want.update({os.fsencode(d): True for d in dirs if not d.startswith(".")})
    want.update({b: False for b in raw if not b.startswith(b".")})
    html_r = await client.get("/t/")
    assert html_r.status == 200
    assert html_r.header("content-security-policy") == LISTING_CSP.decode()
    rows = [r for r in _rows(html_r.body.decode("utf-8")) if r[0] != "../"]
    json_r = await client.get("/t/?format=json")
    entries = json.loads(json_r.body)["entries"]
    # Every entry once, each href naming exactly its bytes.
    assert sorted(_href_bytes(e["href"]) for e in entries) == sorted(want)
    assert sorted(h for h, _ in rows) == sorted(e["href"] for e in entries)
    shown = {h: text for h, text in rows}
    for e in entries:
        href = e["href"]
        raw_name = _href_bytes(href)
        name, is_dir = os.fsdecode(raw_name), want[raw_name]
        assert e["name"] == json_text(name)
        assert re.fullmatch(r"\./(?:[A-Za-z0-9._~-]|%[0-9A-F]{2})+/?", href), href
        assert shown[href] == shown_name(name) + ("/" if is_dir else "")
        url = urlsplit(urljoin(listing, href))
        assert (url.scheme, url.netloc, url.query, url.fragment) == (
            "http",
            f"127.0.0.1:{port}",
            "",
            "",
        )
        if is_dir:
            r = await client.get(url.path + "?format=json")
            assert r.status == 200 and json.loads(r.body)["path"] == f"/t/{json_text(name)}/"
        else:
            r = await client.get(url.path)
            assert r.status == 200 and r.body == b"file:" + raw_name, raw_name


RAW_HOSTILE = [
    b"\xff\xfe.txt",
    b"ok\x80",
    b"caf\xe9.txt",  # Latin-1
    b"\xc0\xae",  # an overlong '.'
    b"\xc0\xae\xc0\xae",  # an overlong '..'
    b"\xc0\xaf",  # an overlong '/'
    b"\xed\xa0\x80",  # an encoded surrogate
    b"\xe2\x80",  # a truncated sequence
    b"%ff\xff",
    b".\xff",  # hidden: never listed
]
RAW_NAME = (
    st.sampled_from(RAW_HOSTILE)
    | st.binary(min_size=1, max_size=12).filter(lambda b: b"/" not in b and b"\x00" not in b)
).filter(lambda b: b not in (b".", b".."))


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@example(names=HOSTILE[: len(HOSTILE) // 2], dirs=HOSTILE[len(HOSTILE) // 2 :], raw=[])
@example(names=[], dirs=[], raw=RAW_HOSTILE)
@given(
    names=st.lists(NAME, max_size=8, unique_by=str.casefold),
    dirs=st.lists(NAME, max_size=3, unique_by=str.casefold),
    raw=st.lists(RAW_NAME, max_size=4, unique=True),
)
@pytest.mark.skipif(
    simulation.WINDOWS_SHAPED,
    reason="names with undecodable bytes, ':' or control characters cannot exist on Windows",
)
@pytest.mark.slow
def test_every_listed_href_fetches_exactly_its_entry(
    names: list[str], dirs: list[str], raw: list[bytes]
) -> None:
    dirs = [d for d in dirs if d not in names]
    taken = {os.fsencode(n) for n in names + dirs}
    raw = [b for b in raw if b not in taken]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "t"
        base.mkdir()
        _make(base, names, dirs, raw)

        async def main() -> None:
            with trio.fail_after(30):
                async with running_server(make_config(Path(tmp))) as (_, port):
                    client = await connect(port)
                    async with client.stream:
                        await _check_listing(client, port, names, dirs, raw)

        trio.run(main)
