"""The listing page's upload form (``--upload``): shown only where this
request may write (the access hook's ``Kind.WRITE`` answer), under the
listing's strict CSP (its drag-and-drop script allowed by hash), names
escaped as on every listing.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from serverio.http.listing import (
    LISTING_CSP,
    LISTING_UPLOAD_CSP,
    Entry,
    ListingQuery,
    listing_csp,
    render_html,
)
from serverio.site.passwords import hash_password

from .conftest import make_config, memory_connection
from .test_upload import upload_config

FORM = 'form class="files" method="post" action="./" enctype="multipart/form-data"'
MKDIR = 'input type="text" name="mkdir"'


def _sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_form_is_rendered_only_when_asked_and_its_script_is_allowed_by_hash() -> None:
    plain = render_html((), [], ListingQuery()).decode()
    assert FORM not in plain and MKDIR not in plain and plain.count("<script>") == 2
    page = render_html(("d",), [], ListingQuery(), upload=True).decode()
    assert FORM in page and MKDIR in page and 'name="file" multiple' in page
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert len(scripts) == 3  # the theme's, the page's, the drop's
    directives = dict(d.strip().split(" ", 1) for d in LISTING_UPLOAD_CSP.decode().split(";"))
    assert directives["script-src"].split() == [_sha(s) for s in scripts]
    assert directives["form-action"] == "'self'"  # the forms post to this origin only
    assert "on" + "drop=" not in page and "javascript:" not in page  # no inline handler
    others = {k: v for k, v in directives.items() if k != "script-src"}
    plain_directives = dict(d.strip().split(" ", 1) for d in LISTING_CSP.decode().split(";"))
    assert others == {k: v for k, v in plain_directives.items() if k != "script-src"}


def test_hostile_names_stay_escaped_on_the_upload_page() -> None:
    hostile = [
        Entry('"><script>alert(1)</script>', False, 1, 0),
        Entry("</form><form action=//evil>", True, -1, 0),
    ]
    page = render_html(("<svg onload=x>",), hostile, ListingQuery(), upload=True).decode()
    assert page.count("<script>") == 3 and page.count("<form") == 3  # search, files, mkdir
    assert "<svg onload" not in page and "<form action=//evil" not in page
    assert "&lt;/form&gt;&lt;form action=//evil&gt;" in page


async def test_the_listing_shows_the_form_with_upload_and_not_without(root: Path) -> None:
    async with memory_connection(upload_config(root)) as (client, _srv, _):
        r = await client.get("/noindex/")
        assert r.status == 200 and FORM in r.body.decode()
        # The uploader's hash, the rows' actions' and the selection's.
        assert (
            r.header("content-security-policy")
            == listing_csp(True, False, True, select=True).decode()
        )
        j = await client.get("/noindex/?format=json")
        assert b"form" not in j.body
    async with memory_connection(make_config(root)) as (client, _srv, _):
        r = await client.get("/noindex/")
        assert r.status == 200 and FORM not in r.body.decode()
        assert r.header("content-security-policy") == LISTING_CSP.decode()


async def test_the_form_only_under_a_writable_table(root: Path) -> None:
    (root / "up").mkdir()
    cfg = upload_config(root, writable=(("/up/**", ("put",)),))
    async with memory_connection(cfg) as (client, _srv, _):
        up = await client.get("/up/")
        other = await client.get("/noindex/")
        assert FORM in up.body.decode() and FORM not in other.body.decode()
        etags = {up.header("etag"), other.header("etag")}
        assert len(etags) == 2
    cfg = upload_config(root, writable=(("/up/**", ("delete",)),))  # no "put": no form
    async with memory_connection(cfg) as (client, _srv, _):
        assert FORM not in (await client.get("/up/")).body.decode()


async def test_under_an_auth_rule_the_form_needs_the_credentials(
    root: Path, tmp_path: Path
) -> None:
    (root / "up").mkdir()
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password('pw', 1000)}\n")
    cfg = upload_config(
        root, auth=(("/up/**", str(users)),), writable=(("/up/**", ("put", "delete")),)
    )
    good = "Basic " + base64.b64encode(b"alice:pw").decode()
    async with memory_connection(cfg) as (client, _srv, _):
        assert (await client.get("/up/")).status == 401
        r = await client.get("/up/", headers=f"Authorization: {good}\r\n")
        assert r.status == 200 and FORM in r.body.decode()
        top = await client.get("/")  # not under a writable table: no form
        assert top.status == 200 and FORM not in top.body.decode()


async def test_no_form_with_webdav_and_its_post_is_405(root: Path) -> None:
    """With --webdav the form is off (its POST is not a DAV method: the
    WebDAV locks would not guard it); a POST goes the read path.  The
    rows' actions stay (WebDAV's own MOVE and DELETE)."""
    cfg = upload_config(root, webdav=True)
    async with memory_connection(cfg) as (client, _srv, _):
        r = await client.get("/noindex/")
        assert r.status == 200 and FORM not in r.body.decode() and MKDIR not in r.body.decode()
        assert '<table data-may="delete overwrite">' in r.body.decode()
        assert (
            r.header("content-security-policy")
            == listing_csp(False, False, True, select=True).decode()
        )
        post = await client.get("/noindex/", method="POST")
        assert post.status == 405
