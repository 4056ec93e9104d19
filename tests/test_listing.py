"""Listing order and rendering: entries in, bytes out (pure, no event loop)."""

from __future__ import annotations

import json
import os
from html.parser import HTMLParser
from pathlib import Path

import pytest

from serverio.http.listing import (
    FILTER_MAX,
    LISTING_CSP,
    Entry,
    ListingQuery,
    filter_entries,
    human_size,
    listing_etag,
    parse_listing_query,
    render_html,
    render_json,
    sort_entries,
)
from serverio.http.pageassets import HEAD_SCRIPT, SCRIPT
from serverio.ops.metrics import caches_of
from testkit import simulation
from testkit.reliability import MiB, ServerProcess

from .conftest import make_config, memory_connection
from .test_transport import KiB, _connect, _read_response, _request, stalled_readers_rss

ENTRIES = [
    Entry("b.txt", False, 300, 1_700_000_300),
    Entry("A.txt", False, 100, 1_700_000_200),
    Entry("zdir", True, -1, 1_700_000_100),
    Entry("adir", True, -1, 1_700_000_400),
    Entry("c.txt", False, 200, 1_700_000_100),
]


@pytest.mark.parametrize(
    ("sort", "order", "names"),
    [
        ("name", "asc", ["adir", "zdir", "A.txt", "b.txt", "c.txt"]),
        ("name", "desc", ["zdir", "adir", "c.txt", "b.txt", "A.txt"]),
        ("size", "asc", ["adir", "zdir", "A.txt", "c.txt", "b.txt"]),
        ("size", "desc", ["zdir", "adir", "b.txt", "c.txt", "A.txt"]),
        ("mtime", "asc", ["zdir", "adir", "c.txt", "A.txt", "b.txt"]),
        ("mtime", "desc", ["adir", "zdir", "b.txt", "A.txt", "c.txt"]),
    ],
)
def test_sort_directories_first(sort: str, order: str, names: list[str]) -> None:
    got = sort_entries(ENTRIES, ListingQuery(sort, order))
    assert [e.name for e in got] == names


@pytest.mark.parametrize(
    ("params", "accept_json", "expected"),
    [
        ({}, False, ListingQuery("name", "asc", False)),
        ({}, True, ListingQuery("name", "asc", True)),
        ({"sort": "size", "order": "desc"}, False, ListingQuery("size", "desc", False)),
        ({"sort": "bogus", "order": "sideways"}, False, ListingQuery("name", "asc", False)),
        ({"format": "json"}, False, ListingQuery("name", "asc", True)),
        ({"format": "html"}, True, ListingQuery("name", "asc", False)),
        ({"format": "xml"}, True, ListingQuery("name", "asc", True)),  # unknown: Accept decides
    ],
)
def test_parse_listing_query(
    params: dict[str, str], accept_json: bool, expected: ListingQuery
) -> None:
    assert parse_listing_query(params, accept_json=accept_json) == expected


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (5 << 20, "5.0 MiB")],
)
def test_human_size(n: int, text: str) -> None:
    assert human_size(n) == text


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.text: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "a":
            self.links.append(dict(attrs)["href"] or "")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


EVIL = [
    Entry("<script>alert(1)</script>.txt", False, 5, 1_700_000_000),
    Entry("a\"b'c&d.txt", False, 5, 1_700_000_000),
    Entry("sp ace#?%.txt", False, 5, 1_700_000_000),
    Entry("d\u00e9j\u00e0", True, -1, 1_700_000_000),
]


def test_html_escapes_names_and_encodes_links() -> None:
    body = render_html(("sub", "<b>"), sort_entries(EVIL, ListingQuery()), ListingQuery())
    page = body.decode("utf-8")
    assert "<script>alert" not in page
    p = _Collect()
    p.feed(page)
    assert p.tags.count("script") == 2  # the page's own (theme, page); none from a name
    assert "./d%C3%A9j%C3%A0/" in p.links
    # Every byte outside RFC 3986 unreserved is encoded, ( ) ' & included.
    assert "./%3Cscript%3Ealert%281%29%3C%2Fscript%3E.txt" in p.links
    assert "./a%22b%27c%26d.txt" in p.links
    assert "./sp%20ace%23%3F%25.txt" in p.links
    text = "".join(p.text)
    assert "<script>alert(1)</script>.txt" in text and "a\"b'c&d.txt" in text
    # Breadcrumb, relative to /sub/<b>/: root, /sub/, the page itself.
    assert p.links[:3] == ["../../", "../", "./"]
    assert "../" in p.links
    assert "Index of /sub/&lt;b&gt;/" in page
    # Sort links in the header toggle the order of the current key.
    assert "?sort=name&order=desc" in p.links and "?sort=size&order=asc" in p.links


def test_html_self_contained_and_dark_mode() -> None:
    page = render_html((), ENTRIES, ListingQuery()).decode()
    assert "prefers-color-scheme:dark" in page and "color-scheme" in page
    assert "http://" not in page and "https://" not in page and "<link" not in page
    # Two scripts, constants the CSP allows by their hashes: the theme's
    # (in the head, before the first paint) and the page's.
    assert page.count("<script") == 2 and f"<script>{SCRIPT}</script>" in page
    assert f"<script>{HEAD_SCRIPT}</script>" in page
    assert "../" not in page  # no parent link at the root


def test_html_truncation_notice() -> None:
    page = render_html((), ENTRIES[:2], ListingQuery(), truncated=True, limit=2).decode()
    assert 'class="notice"' in page and "first 2 entries" in page
    assert 'class="notice"' not in render_html((), ENTRIES, ListingQuery()).decode()


def test_json_listing() -> None:
    doc = json.loads(render_json(("sub",), sort_entries(EVIL, ListingQuery()), truncated=True))
    assert doc["path"] == "/sub/" and doc["truncated"] is True
    first = doc["entries"][0]
    assert first == {
        "name": "d\u00e9j\u00e0",
        "type": "dir",
        "size": None,
        "mtime": 1_700_000_000,
        "href": "./d%C3%A9j%C3%A0/",
    }
    names = [e["name"] for e in doc["entries"]]
    assert "<script>alert(1)</script>.txt" in names
    assert render_json((), []).isascii()


def test_etag_weak_and_per_body() -> None:
    a = listing_etag(b"one")
    assert a.startswith('W/"') and a.endswith('"')
    assert a == listing_etag(b"one") and a != listing_etag(b"two")


# ---- shared rendered listings (the listing cache)


def _listing_stats(srv: object) -> tuple[int, int]:
    numbers = caches_of(srv)  # type: ignore[arg-type]
    return numbers["listing"]["hits"], numbers["listing"]["stored"]


async def test_a_changed_directory_gets_a_new_listing_not_the_cached_one(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.txt").write_bytes(b"a")
    os.symlink("d", tmp_path / "alias")  # the same directory by another path
    async with memory_connection(make_config(tmp_path)) as (client, srv, _):
        first = await client.get("/d/")
        again = await client.get("/d/")
        assert first.status == again.status == 200 and again.body == first.body
        assert again.header("etag") == first.header("etag")
        assert _listing_stats(srv) == (1, 1)  # the second was answered from the cache

        # Another path to the same inode has its own title and breadcrumbs.
        alias = await client.get("/alias/")
        assert b"Index of /alias/" in alias.body and alias.body != first.body

        # A file added.
        (d / "b.txt").write_bytes(b"bb")
        added = await client.get("/d/?format=json")
        names = [e["name"] for e in json.loads(added.body)["entries"]]
        assert names == ["a.txt", "b.txt"]
        html = await client.get("/d/")
        assert b"b.txt" in html.body and html.header("etag") != first.header("etag")

        # A size changed (same names, same inode).
        before = json.loads((await client.get("/d/?format=json")).body)
        (d / "a.txt").write_bytes(b"a" * 1000)
        after = json.loads((await client.get("/d/?format=json")).body)
        assert [e["size"] for e in before["entries"]] == [1, 2]
        assert [e["size"] for e in after["entries"]] == [1000, 2]

        # A time changed, nothing else.
        os.utime(d / "b.txt", (1_000_000_000, 1_000_000_000))
        timed = json.loads((await client.get("/d/?format=json")).body)
        assert [e["mtime"] for e in timed["entries"]][1] == 1_000_000_000

        # A conditional request for the cached listing still revalidates.
        etag = html.header("etag")
        assert etag is not None
        (d / "a.txt").unlink()
        gone = await client.get("/d/", f"If-None-Match: {etag}\r\n")
        assert gone.status == 200 and b"a.txt" not in gone.body
        same = await client.get("/d/", f"If-None-Match: {gone.header('etag')}\r\n")
        assert same.status == 304


async def test_each_query_has_its_own_listing_and_zero_turns_the_cache_off(
    tmp_path: Path,
) -> None:
    for name, size in (("small", 1), ("big", 300)):
        (tmp_path / name).write_bytes(b"x" * size)
    async with memory_connection(make_config(tmp_path)) as (client, srv, _):
        by_name = await client.get("/")
        by_size = await client.get("/?sort=size&order=desc")
        as_json = await client.get("/?format=json")
        assert len({by_name.body, by_size.body, as_json.body}) == 3
        assert by_size.body.index(b"big") < by_size.body.index(b"small")
        assert by_name.body.index(b"big") < by_name.body.index(b"small")  # b < s
        assert (await client.get("/?sort=size&order=desc")).body == by_size.body
        assert _listing_stats(srv) == (1, 3)
    async with memory_connection(make_config(tmp_path, listing_cache_size=0)) as (client, srv, _):
        for _ in range(2):
            r = await client.get("/")
            assert r.status == 200 and r.body == by_name.body
        assert _listing_stats(srv) == (0, 0)
        assert srv.content.listings.size == 0


@pytest.mark.slow
@pytest.mark.skipif(simulation.measuring_proc() is None, reason="reads VmRSS through a procfs")
def test_stalled_readers_of_a_large_listing_share_one_body(tmp_path: Path) -> None:
    """N clients ask for a ~3 MB listing, read 100 bytes and stall: the
    server's RSS grows by less than 64 KiB each (plus a fixed allowance),
    not by a rendered copy of the listing each."""
    www = tmp_path / "www"
    big = www / "big"
    big.mkdir(parents=True)
    for i in range(7000):
        (big / f"{i:06d}-{'n' * 120}.txt").touch()
    conns = 20
    with ServerProcess(www, "--write-timeout", "60", probed=False) as srv:
        with _connect(srv.port) as sock:  # warm: one full read
            sock.sendall(_request("/big/", "Connection: close\r\n"))
            status, _, body = _read_response(sock)
        assert status == 200 and len(body) > 2 * MiB
        before, after = stalled_readers_rss(srv, conns, _request("/big/"))
    grown = after - before
    per_conn = grown / conns
    print(
        f"\nstalled listing readers: {conns}, listing {len(body) / MiB:.2f} MiB, "
        f"RSS {before / MiB:.1f} -> {after / MiB:.1f} MiB ({per_conn / KiB:.0f} KiB each)"
    )
    assert grown < conns * 64 * KiB + 8 * MiB, (
        f"RSS grew {grown / MiB:.1f} MiB for {conns} stalled readers "
        f"({per_conn / KiB:.0f} KiB each; listing {len(body) / KiB:.0f} KiB)"
    )


# ---- the filter box (?filter=, issue 28)

FILTERED = [
    Entry("Report-2026.PDF", False, 1, 1_700_000_000),
    Entry("notes.txt", False, 1, 1_700_000_000),
    Entry("reports", True, -1, 1_700_000_000),
    Entry("evil\u202etxt.exe", False, 1, 1_700_000_000),
]


def test_parse_listing_query_filter_is_bounded_and_printable() -> None:
    q = parse_listing_query({"filter": "  Rep\x00ort\n "}, accept_json=False)
    assert q.filter == "Report"
    long = parse_listing_query({"filter": "x" * 10_000}, accept_json=False)
    assert long.filter == "x" * FILTER_MAX
    assert parse_listing_query({}, accept_json=False).filter == ""


def test_filter_entries_matches_the_shown_name_ignoring_case() -> None:
    names = [e.name for e in filter_entries(FILTERED, "REPORT")]
    assert names == ["Report-2026.PDF", "reports"]
    assert filter_entries(FILTERED, "") == FILTERED
    # The shown name is what is matched: the override character is shown as
    # <U+202E>, so that is what a reader can type and find.
    assert [e.name for e in filter_entries(FILTERED, "<u+202e>")] == ["evil\u202etxt.exe"]
    assert filter_entries(FILTERED, "evil\u202e") == []  # the raw name is not matched


def test_html_filter_form_escapes_the_query_and_links_keep_it() -> None:
    hostile = '"><script>alert(1)</script>&x=1'
    query = ListingQuery("size", "desc", False, hostile)
    page = render_html((), filter_entries(FILTERED, hostile), query, scanned=4).decode()
    assert "<script>alert" not in page
    p = _Collect()
    p.feed(page)
    assert p.tags.count("script") == 2
    # The box shows the text as typed, in an attribute, escaped.
    assert 'value="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&amp;x=1"' in page
    assert f'maxlength="{FILTER_MAX}"' in page
    # Sort and JSON links keep the filter, percent-encoded; the form keeps the sort.
    tail = "&filter=%22%3E%3Cscript%3Ealert%281%29%3C%2Fscript%3E%26x%3D1"
    assert "?sort=size&order=asc" + tail in p.links and "?format=json" + tail in p.links
    assert '<input type="hidden" name="sort" value="size">' in page
    assert '<input type="hidden" name="order" value="desc">' in page
    assert "0 of 4 entries match" in page
    rows = render_html((), sort_entries(FILTERED, ListingQuery()), ListingQuery()).decode()
    # The script filters on each row's shown name (its link's text).
    assert ">Report-2026.PDF</a>" in rows and ">evil&lt;U+202E&gt;txt.exe</a>" in rows


async def test_the_server_filters_and_keys_the_cache_and_validator_by_the_filter(
    tmp_path: Path,
) -> None:
    for name in ("Alpha.txt", "beta.txt", "alphabet.md"):
        (tmp_path / name).write_bytes(b"x")
    async with memory_connection(make_config(tmp_path)) as (client, srv, _):
        whole = await client.get("/")
        some = await client.get("/?filter=ALPHA")
        assert some.status == 200 and b"beta.txt" not in some.body
        assert b"Alpha.txt" in some.body and b"alphabet.md" in some.body
        assert b"2 of 3 entries match" in some.body
        assert some.header("etag") != whole.header("etag")
        assert _listing_stats(srv) == (0, 2)
        again = await client.get("/?filter=ALPHA", f"If-None-Match: {some.header('etag')}\r\n")
        assert again.status == 304
        assert _listing_stats(srv) == (1, 2)
        as_json = json.loads((await client.get("/?filter=bet&format=json")).body)
        assert [e["name"] for e in as_json["entries"]] == ["alphabet.md", "beta.txt"]
        # Hostile and huge filters: escaped, bounded, still a 200.
        hostile = await client.get("/?filter=%3Cscript%3E" + "y" * 5000)
        assert hostile.status == 200 and b"<script>y" not in hostile.body
        assert b"y" * FILTER_MAX not in hostile.body
        assert hostile.header("content-security-policy") == LISTING_CSP.decode()
