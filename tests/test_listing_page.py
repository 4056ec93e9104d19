"""The listing page (issue 46): natural order, the plain-text form, the
toolbar, --title, the rows' actions cell, icons, times, the page weight."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote_to_bytes

import pytest

from serverio.http.listing import (
    Entry,
    ListingQuery,
    natural_key,
    parse_listing_query,
    render_html,
    render_listing,
    render_text,
    sort_entries,
    text_line,
)
from serverio.http.negotiate import prefers_text
from serverio.http.pageassets import ACTIONS_SCRIPT, LISTING_CSP, icon_of

from .conftest import make_config, memory_connection

NAMES = ["file_10.txt", "file_2.txt", "File_1.txt", "file_02.txt", "a", "b10", "b9", "10", "9"]


def test_natural_order_numbers_compare_as_numbers() -> None:
    ordered = sorted(NAMES, key=natural_key)
    assert ordered == ["9", "10", "a", "b9", "b10", "File_1.txt", "file_02.txt", "file_2.txt",
                       "file_10.txt"]  # fmt: skip
    # Total: equal numbers with different zeros, different cases, are told apart.
    assert natural_key("file_02") != natural_key("file_2")
    assert natural_key("A") != natural_key("a")
    # Long runs and non-ASCII digits do not break the comparison.
    assert sorted(["x" + "9" * 40, "x1", "x\u0663"], key=natural_key)[:2] == ["x1", "x" + "9" * 40]


def test_directories_first_then_natural_order_in_html_and_json() -> None:
    entries = [Entry(n, False, 1, 0) for n in ("file_10", "file_2", "file_1")]
    entries += [Entry("dir_10", True, -1, 0), Entry("dir_9", True, -1, 0)]
    ordered = sort_entries(entries, ListingQuery())
    want = ["dir_9", "dir_10", "file_1", "file_2", "file_10"]
    assert [e.name for e in ordered] == want
    body, ctype, _ = render_listing((), entries, ListingQuery(json=True), False, 100)
    assert ctype == b"application/json"
    assert [e["name"] for e in json.loads(body)["entries"]] == want
    page = render_listing((), entries, ListingQuery(), False, 100)[0].decode()
    assert [m for m in re.findall(r'<a href="\./([^"]+?)/?">', page)] == want
    desc = sort_entries(entries, ListingQuery(order="desc"))
    assert [e.name for e in desc] == ["dir_10", "dir_9", "file_10", "file_2", "file_1"]


@pytest.mark.parametrize(
    "name",
    [
        "plain.txt",
        "a%41b",
        "line\nbreak",
        "tab\there",
        "cr\r",
        "\x7f\x85",
        "ls\u2028x",
        "caf\u00e9",
        "bad\udcff.bin",
        "100%",
    ],
)
def test_text_lines_round_trip_to_the_exact_bytes(name: str) -> None:
    line = text_line(name)
    assert "\n" not in line and "\r" not in line and "\u2028" not in line
    assert unquote_to_bytes(line) == name.encode("utf-8", "surrogateescape")
    if name == "plain.txt" or name == "caf\u00e9":
        assert line == name  # an ordinary name is its own line


def test_text_listing_one_name_per_line_folders_with_a_slash() -> None:
    entries = [Entry("b", True, -1, 0), Entry("a\nb.txt", False, 1, 0), Entry("f_10", False, 1, 0)]
    entries.append(Entry("f_9", False, 1, 0))
    body = render_text(sort_entries(entries, ListingQuery()))
    assert body == b"b/\na%0Ab.txt\nf_9\nf_10\n"


def test_format_and_accept_choose_the_representation() -> None:
    assert parse_listing_query({"format": "text"}, accept_json=True).text
    q = parse_listing_query({}, accept_json=False, accept_text=True)
    assert q.text and not q.json
    assert (
        parse_listing_query({"format": "html"}, accept_json=False, accept_text=True).text is False
    )
    assert prefers_text("text/plain")
    assert not prefers_text("*/*") and not prefers_text(None)
    assert not prefers_text("text/html,application/xhtml+xml,*/*;q=0.8")
    assert not prefers_text("text/plain;q=0.5, text/html")
    q = parse_listing_query({"filter": "x", "search": "1"}, accept_json=False)
    assert q.q == "x" and q.filter == ""


async def test_curl_gets_html_and_accept_text_plain_gets_the_list(tmp_path: Path) -> None:
    for name in ("file_10.txt", "file_2.txt"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "sub").mkdir()
    async with memory_connection(make_config(tmp_path)) as (client, _, _):
        curl = await client.get("/", "Accept: */*\r\n")
        assert (curl.header("content-type") or "").startswith("text/html")
        text = await client.get("/", "Accept: text/plain\r\n")
        assert text.status == 200 and text.header("content-type") == "text/plain; charset=utf-8"
        assert text.body == b"sub/\nfile_2.txt\nfile_10.txt\n"
        assert "accept" in (text.header("vary") or "").lower()
        query = await client.get("/?format=text")
        assert query.body == text.body


def test_toolbar_on_top_with_archives_theme_and_title() -> None:
    entries = [Entry("x.txt", False, 1, 0)]
    page = render_html((), entries, ListingQuery(), archives=True, title='My <"files">').decode()
    assert "<h1>My &lt;&quot;files&quot;&gt; \u2014 /</h1>" in page
    assert "<title>My &lt;&quot;files&quot;&gt; \u2014 /</title>" in page
    bar = page.index('class="bar"')
    assert bar < page.index("<table>")  # the toolbar is above the rows
    assert page.index('href="?archive=zip"') > bar and page.index(
        'href="?archive=zip"'
    ) < page.index("<table>")
    assert 'id="theme"' in page and 'role="search"' in page
    footer = page[page.index("<footer>") : page.index("</footer>")]
    assert "archive" not in footer


def test_actions_slot_and_script_only_when_allowed() -> None:
    entries = [Entry("x.txt", False, 1, 0), Entry("d", True, -1, 0)]
    plain = render_html(("s",), entries, ListingQuery()).decode()
    assert "data-may" not in plain and 'id="actions"' not in plain
    page = render_html(("s",), entries, ListingQuery(), upload=True, actions=True).decode()
    # The rows' cells are the actions script's: nothing per row is sent.
    assert 'class="act"' not in page
    assert '<table data-may="upload mkdir delete overwrite">' in page
    assert 'id="actions"' in page and f"<script>{ACTIONS_SCRIPT}</script>" in page


def test_icons_are_inline_symbols_by_type() -> None:
    assert [icon_of(n, d) for n, d in [("x", True), ("a.PNG", False), ("a.tar.gz", False)]] == [
        "d",
        "i",
        "a",
    ]
    assert icon_of(".bashrc", False) == "f" and icon_of("notes.md", False) == "t"
    page = render_html((), [Entry("a.png", False, 1, 0)], ListingQuery()).decode()
    assert '<use href="#i-i"/>' in page and '<symbol id="i-i"' in page
    assert "http://" not in page.replace("http://www.w3.org", "")  # nothing external


def test_times_are_utc_in_a_time_element_for_the_script_to_localise() -> None:
    page = render_html((), [Entry("a", False, 1, 1_700_000_000)], ListingQuery()).decode()
    assert '<time datetime="2023-11-14T22:13:20Z">2023-11-14<span> 22:13</span></time>' in page
    assert 'id="tz">times in UTC' in page


def test_page_weight_of_a_100_entry_folder_is_under_60_kib() -> None:
    entries = [
        Entry(f"r\u00e9sum\u00e9 of the quarter number {i} (final).pdf", i % 10 == 0, 12345 * i, i)
        for i in range(100)
    ]
    page = render_html(
        ("some folder", "below"),
        sort_entries(entries, ListingQuery()),
        ListingQuery(),
        archives=True,
        upload=True,
        actions=True,
        title="Files",
    )
    # HTML, script and style are all inline: the page is the whole weight.
    assert len(page) <= 60 * 1024, len(page)
    assert b"<link" not in page and b" src=" not in page


def test_csp_allows_fetch_to_this_origin_only() -> None:
    directives = dict(d.strip().split(" ", 1) for d in LISTING_CSP.decode().split(";"))
    assert directives["connect-src"] == "'self'" and directives["default-src"] == "'none'"
