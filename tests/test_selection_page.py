"""The listing's selection and text editor, server side (issue 46): the
selection script only where it has something to offer, every script and
style it brings allowed by hash under the page's CSP, the tools served by
the listing itself (``?asset=tools``), and the editor's round trip:
``Range: bytes=0-`` gives the file's own ETag even to a client that
accepts gzip, a PUT with ``If-Match`` of it saves, a stale one is 412
(problem+json for the page's fetch) and the file keeps the other
writer's bytes; the overwrite right is the server's to enforce."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from serverio.http.listing import (
    Entry,
    ListingQuery,
    PageRights,
    listing_csp,
    parse_listing_query,
    render_html,
    render_listing,
)
from serverio.http.pageassets import LISTING_CSP, STYLE
from serverio.http.selection import (
    SELECT_CSS,
    SELECT_SCRIPT,
    SELECT_SOURCE,
    TOOLS_ASSET,
    TOOLS_CSS,
    TOOLS_SCRIPT,
    TOOLS_SOURCE,
    TOOLS_STYLE_SOURCE,
)
from serverio.site.passwords import hash_password

from .conftest import make_config, memory_connection

ENTRIES = [Entry("notes.txt", False, 5, 0), Entry("d", True, -1, 0)]


def _source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _put(path: str, body: bytes, extra: str = "") -> bytes:
    return (
        f"PUT {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def test_the_selection_script_only_with_archives_or_actions() -> None:
    tag = f"<script>{SELECT_SCRIPT}</script>"
    assert tag not in render_html(("s",), ENTRIES, ListingQuery()).decode()
    assert tag in render_html(("s",), ENTRIES, ListingQuery(), archives=True).decode()
    assert tag in render_html(("s",), ENTRIES, ListingQuery(), actions=True).decode()
    # The search page (no selection there) never has it.
    assert SELECT_CSS in STYLE


def test_every_script_and_style_is_allowed_by_its_hash_and_nothing_else() -> None:
    # Only on a page that has the selection's script.
    for source in (SELECT_SOURCE, TOOLS_SOURCE, TOOLS_STYLE_SOURCE):
        assert source not in LISTING_CSP.decode()
        assert source not in listing_csp(True, True).decode()
    policy = listing_csp(False, False, select=True).decode()
    assert listing_csp(True, True, select=True).decode().count(SELECT_SOURCE) == 1
    csp = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert SELECT_SOURCE == _source(SELECT_SCRIPT) and SELECT_SOURCE in csp["script-src"]
    assert TOOLS_SOURCE == _source(TOOLS_SCRIPT) and TOOLS_SOURCE in csp["script-src"]
    assert TOOLS_STYLE_SOURCE == _source(TOOLS_CSS) and TOOLS_STYLE_SOURCE in csp["style-src"]
    for directive in ("script-src", "style-src"):
        assert all(s.startswith("'sha256-") for s in csp[directive].split()), csp[directive]
    assert csp["default-src"] == "'none'" and csp["connect-src"] == "'self'"
    # The tools' style is inserted by the tools, as the exact hashed text.
    assert f"'{TOOLS_CSS}'" in TOOLS_SCRIPT
    # ASCII: the hash is over exactly the bytes the listing serves.
    assert TOOLS_ASSET == TOOLS_SCRIPT.encode("ascii")
    SELECT_SCRIPT.encode("ascii")


def test_the_asset_query_answers_with_the_tools() -> None:
    q = parse_listing_query({"asset": "tools"}, accept_json=True)
    assert q.asset
    body, ctype, etag = render_listing((), list(ENTRIES), q, False, 10)
    assert body == TOOLS_ASSET and ctype == b"text/javascript; charset=utf-8"
    assert etag.startswith('W/"')
    assert not parse_listing_query({"asset": "other"}, accept_json=False).asset


async def test_the_tools_over_http_where_the_listing_is_readable(
    tmp_path: Path,
) -> None:
    (tmp_path / "d").mkdir()
    async with memory_connection(make_config(tmp_path, archives=True)) as (c, _, _):
        page = await c.get("/d/")
        csp = page.header("content-security-policy") or ""
        assert SELECT_SOURCE in csp and TOOLS_SOURCE in csp and TOOLS_STYLE_SOURCE in csp
        assert SELECT_SCRIPT.encode() in page.body
        r = await c.get("/d/?asset=tools")
        assert r.status == 200 and r.body == TOOLS_ASSET
        assert r.header("content-type") == "text/javascript; charset=utf-8"
        etag = r.header("etag")
        assert etag is not None
        again = await c.get("/d/?asset=tools", f"If-None-Match: {etag}\r\n")
        assert again.status == 304 and again.body == b""
        # The page's fetch asks for JSON first: still the script.
        j = await c.get("/d/?asset=tools", "Accept: application/problem+json\r\n")
        assert j.body == TOOLS_ASSET
    async with memory_connection(make_config(tmp_path)) as (c, _, _):
        page = await c.get("/d/")
        assert SELECT_SCRIPT.encode() not in page.body
        assert SELECT_SOURCE not in (page.header("content-security-policy") or "")


async def test_the_editor_round_trip_and_a_stale_etag_is_412(tmp_path: Path) -> None:
    text = ("une ligne accentu\u00e9e\n" * 200).encode()  # over the compression floor
    (tmp_path / "notes.txt").write_bytes(text)
    cfg = make_config(tmp_path, upload=True, min_free_space=0)
    async with memory_connection(cfg) as (c, _, _):
        gz = await c.get("/notes.txt", "Accept-Encoding: gzip\r\n")
        assert gz.header("content-encoding") == "gzip"  # a coded ETag: not for If-Match
        # The editor's load: a range is never coded, its ETag is the file's.
        r = await c.get("/notes.txt", "Accept-Encoding: gzip\r\nRange: bytes=0-1048575\r\n")
        assert r.status == 206 and r.body == text and r.header("content-encoding") is None
        assert r.header("content-range") == f"bytes 0-{len(text) - 1}/{len(text)}"
        tag = r.header("etag")
        assert tag is not None and not tag.startswith("W/") and tag != gz.header("etag")
        # Editor A saves: If-Match holds; the answer names the new ETag.
        await c.send_raw(_put("/notes.txt", b"A's text\n", f"If-Match: {tag}\r\n"))
        a = await c.read_response()
        assert a.status in (200, 204) and a.header("etag") not in (None, tag)
        # Editor B loaded before A saved: its If-Match is stale.
        await c.send_raw(
            _put(
                "/notes.txt",
                b"B's text\n",
                f"If-Match: {tag}\r\nAccept: application/problem+json\r\n",
            )
        )
        b = await c.read_response()
        assert b.status == 412 and b.header("content-type") == "application/problem+json"
        assert json.loads(b.body)["status"] == 412
        assert (tmp_path / "notes.txt").read_bytes() == b"A's text\n"
        # A saves again with the ETag its save returned.
        await c.send_raw(_put("/notes.txt", b"A again\n", f"If-Match: {a.header('etag')}\r\n"))
        assert (await c.read_response()).status in (200, 204)
        # "Save as copy": If-None-Match: * never replaces a file.
        await c.send_raw(_put("/notes.txt", b"copy\n", "If-None-Match: *\r\n"))
        assert (await c.read_response()).status == 412
        await c.send_raw(_put("/notes%20(copy).txt", b"copy\n", "If-None-Match: *\r\n"))
        assert (await c.read_response()).status == 201
    assert (tmp_path / "notes.txt").read_bytes() == b"A again\n"
    assert (tmp_path / "notes (copy).txt").read_bytes() == b"copy\n"
    # An empty file: no range to give (416), the plain GET is identity.
    (tmp_path / "empty.txt").write_bytes(b"")
    async with memory_connection(cfg) as (c, _, _):
        r = await c.get("/empty.txt", "Range: bytes=0-1048575\r\n")
        assert r.status == 416
        plain = await c.get("/empty.txt", "Accept-Encoding: gzip\r\n")
        assert plain.status == 200 and plain.header("content-encoding") is None
        assert plain.header("etag") is not None


async def test_without_the_overwrite_right_the_save_is_refused(tmp_path: Path) -> None:
    users = tmp_path / "users.htpasswd"
    users.write_text(f"alice:{hash_password('wonderland', 1000)}\n")
    www = tmp_path / "www"
    www.mkdir()
    (www / "notes.txt").write_bytes(b"mine\n")
    basic = "Authorization: Basic " + base64.b64encode(b"alice:wonderland").decode() + "\r\n"
    cfg = make_config(
        www,
        upload=True,
        min_free_space=0,
        auth_file=str(users),
        allow=("anonymous:read,list@/", "alice:read,list,upload@/"),
    )
    async with memory_connection(cfg) as (c, _, _):
        tag = (await c.get("/notes.txt", "Range: bytes=0-\r\n")).header("etag")
        await c.send_raw(
            _put(
                "/notes.txt", b"theirs\n", f"If-Match: {tag}\r\n{basic}Accept: application/json\r\n"
            )
        )
        r = await c.read_response()
        assert r.status == 403 and r.header("content-type") == "application/problem+json"
    assert (www / "notes.txt").read_bytes() == b"mine\n"


def test_a_row_whose_rights_differ_carries_its_own_tokens() -> None:
    entries = [
        Entry("a.txt", False, 1, 0),
        Entry("b.txt", False, 1, 0),
        Entry("c.txt", False, 1, 0),
    ]
    rights = PageRights(
        delete=True, odd=frozenset({"a.txt"}), overwrite=True, odd_overwrite=frozenset({"b.txt"})
    )
    page = render_html(("s",), entries, ListingQuery(), rights=rights).decode()
    assert '<table data-may="delete overwrite">' in page
    assert '<tr class="entry file" data-may="overwrite"><td class="name">' in page  # a.txt
    assert page.count('data-may="delete"') == 1  # b.txt
    assert '<tr class="entry file"><td class="name">' in page  # c.txt: the folder's
    assert SELECT_SCRIPT in page
    # Only the rows' share right: no selection script.
    assert (
        SELECT_SCRIPT
        not in render_html(("s",), entries, ListingQuery(), rights=PageRights(share=True)).decode()
    )
