"""Listing order and rendering: entries in, bytes out (pure, no event loop)."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from serverio.http.listing import (
    Entry,
    ListingQuery,
    human_size,
    listing_etag,
    parse_listing_query,
    render_html,
    render_json,
    sort_entries,
)

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
    assert "script" not in p.tags  # no tag came from a name
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
    assert "<script" not in page
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
