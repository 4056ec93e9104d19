"""The recursive search ``?q=`` (issue 46): substring and glob, HTML, JSON
and text; dotfiles, ``--hide`` and the access rules applied to every
result; symlinks by their resolved target, loops entered once; bounded in
entries visited; and ``--hide`` on listings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from serverio.fs.hide import HideRules
from serverio.fs.search import name_matcher
from serverio.site.passwords import hash_password

from .conftest import make_config, memory_connection


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "www"
    for rel in (
        "docs/report_2.pdf",
        "docs/report_10.pdf",
        "docs/deep/er/Report final.PDF",
        "docs/notes.txt",
        "docs/.secret-report.pdf",
        "docs/tmp/report.tmp",
        "private/report-salaries.pdf",
        "other/readme.md",
    ):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(rel)
    (root / "docs" / "reports").mkdir()
    os.symlink("../docs", root / "docs" / "deep" / "loop")  # a loop inside the root
    os.symlink("../private", root / "other" / "via-link")  # leads into a protected dir
    return root


def test_matcher_substring_and_glob_ignore_case() -> None:
    sub, glob = name_matcher("REPORT"), name_matcher("*.pdf")
    assert sub("Q3 report.txt") and not sub("notes")
    assert glob("a.PDF") and not glob("a.pdf.txt")
    assert name_matcher("report_?.pdf")("report_2.pdf")
    assert not name_matcher("report_?.pdf")("report_10.pdf")


def test_hide_rules_by_name_and_by_path() -> None:
    h = HideRules(("*.tmp", "private/*"))
    assert h.hides("docs", "x.tmp") and h.hides("private", "a")
    assert not h.hides("", "private") and not h.hides("a/private", "x")
    assert not HideRules(()).active


async def test_search_finds_below_folder_by_folder_as_html_json_and_text(tree: Path) -> None:
    async with memory_connection(make_config(tree)) as (client, _, _):
        r = await client.get("/docs/?q=report&format=json")
        assert r.header("transfer-encoding") == "chunked" and r.header("etag") is None
        doc = json.loads(r.body)
        names = [e["name"] for e in doc["entries"]]
        # Below /docs/ only, dotfiles left out, the loop entered once;
        # streamed as found: breadth first, each batch in natural order.
        assert names == [
            "report_2.pdf",
            "report_10.pdf",
            "reports",
            "tmp/report.tmp",
            "deep/er/Report final.PDF",
        ]
        assert doc["q"] == "report" and doc["truncated"] is False and doc["visited"] > 5
        assert doc["stopped"] is None and doc["path"] == "/docs/"
        assert doc["entries"][-1]["href"] == "./deep/er/Report%20final.PDF"
        glob = json.loads((await client.get("/?q=*.pdf&format=json")).body)
        assert "private/report-salaries.pdf" in [e["name"] for e in glob["entries"]]
        text = await client.get("/docs/?q=report_", "Accept: text/plain\r\n")
        assert text.body == b"report_2.pdf\nreport_10.pdf\n"
        page = await client.get("/docs/?filter=report_&search=1", "Accept: text/html\r\n")
        assert page.status == 200
        assert b'<a href="./report_2.pdf">report_2.pdf</a>' in page.body
        assert b"2 matches for \xe2\x80\x9creport_\xe2\x80\x9d" in page.body
        assert b"<script>" in page.body and page.header("content-security-policy")


async def test_search_applies_hide_and_the_access_rules(tree: Path) -> None:
    users = tree.parent / "users"
    users.write_text(f"alice:{hash_password('pw', 1000)}\n")
    cfg = make_config(tree, hide=("*.tmp",), auth=(("/private/**", str(users)),))
    async with memory_connection(cfg) as (client, _, _):
        doc = json.loads((await client.get("/?q=report&format=json")).body)
        names = [e["name"] for e in doc["entries"]]
        assert "docs/tmp/report.tmp" not in names  # --hide
        # Neither the protected folder's file nor the same file through a link.
        assert not any("salaries" in n for n in names), names
        assert "docs/report_2.pdf" in names
        # --hide on the listing too; the hidden file is still served by URL.
        listing = json.loads((await client.get("/docs/tmp/?format=json")).body)
        assert listing["entries"] == []
        assert (await client.get("/docs/tmp/report.tmp")).status == 200


async def test_the_search_stops_at_its_entry_bound_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / "www"
    for d in range(20):
        for f in range(20):
            p = root / f"d{d}" / f"file{f}.txt"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(b"")
    cfg = make_config(root, search_max_entries=50)
    async with memory_connection(cfg) as (client, _, _):
        doc = json.loads((await client.get("/?q=file&format=json")).body)
        assert doc["truncated"] is True and doc["visited"] <= 50
        assert doc["stopped"] == "entries"
        assert 0 < len(doc["entries"]) <= 50
        page = await client.get("/?q=file", "Accept: text/html\r\n")
        assert b"The search stopped at --search-max-entries" in page.body
        assert page.body.endswith(b"</html>\n")
        text = await client.get("/?q=file", "Accept: text/plain\r\n")
        assert text.body.endswith(
            b"\n\n# search stopped at --search-max-entries (50 entries looked at)\n"
        )
    async with memory_connection(make_config(root, listing_max_entries=7)) as (client, _, _):
        doc = json.loads((await client.get("/?q=file&format=json")).body)
        assert doc["stopped"] == "results" and len(doc["entries"]) == 7
    async with memory_connection(make_config(root)) as (client, _, _):
        doc = json.loads((await client.get("/?q=file&format=json")).body)
        assert doc["truncated"] is False and len(doc["entries"]) == 400


async def test_hide_applies_to_archives_and_propfind_members(tmp_path: Path) -> None:
    import io
    import zipfile

    root = tmp_path / "www"
    (root / "d" / "build").mkdir(parents=True)
    (root / "d" / "keep.txt").write_text("k")
    (root / "d" / "junk.tmp").write_text("j")
    (root / "d" / "build" / "out.o").write_text("o")
    cfg = make_config(root, hide=("*.tmp", "d/build"), archives=True, webdav=True, min_free_space=0)
    async with memory_connection(cfg) as (client, _, _):
        z = await client.get("/d/?archive=zip")
        assert z.status == 200
        names = zipfile.ZipFile(io.BytesIO(z.body)).namelist()
        assert names == ["d/keep.txt"], names
        r = await client.get("/d/", "Depth: 1\r\n", method="PROPFIND")
        assert r.status == 207
        assert b"keep.txt" in r.body and b"junk.tmp" not in r.body and b"build" not in r.body
        # Not an access rule: each is still served by its URL.
        assert (await client.get("/d/junk.tmp")).status == 200
        assert (await client.get("/d/build/out.o")).status == 200


async def test_the_search_stops_at_its_time_bound_and_hostile_queries_stay_text(
    tree: Path,
) -> None:
    async with memory_connection(make_config(tree, search_time=1e-6)) as (client, _, _):
        doc = json.loads((await client.get("/?q=report&format=json")).body)
        assert doc["truncated"] is True and doc["stopped"] == "time"
    async with memory_connection(make_config(tree)) as (client, _, _):
        q = "%3Cscript%3Ealert(1)%3C%2Fscript%3E%22%27"
        page = await client.get(f"/?q={q}", "Accept: text/html\r\n")
        assert page.status == 200 and b"<script>alert" not in page.body
        assert b"&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27;" in page.body
        doc = json.loads((await client.get(f"/?q={q}&format=json")).body)
        assert doc["q"] == "<script>alert(1)</script>\"'" and doc["entries"] == []
