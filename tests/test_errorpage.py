"""Built-in HTML error pages (issue 28): the Accept choice, the page, its
CSP, and the same fields over HTTP/1.1 and HTTP/2 (serverio.http.errorpage)."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import pytest

from serverio.http.core import NOSNIFF_FIELD, Plan, error_plan
from serverio.http.errorpage import ERROR_CSP, error_html, negotiated_error
from serverio.http.negotiate import prefers_html
from serverio.http.plans import page_plan, redirect_plan

from .conftest import make_config
from .test_parity import Answer, Row, _run, differences

CHROME = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"
FIREFOX = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@pytest.mark.parametrize(
    ("accept", "html"),
    [
        (None, False),  # no field: a script, nc, an old client
        ("", False),
        ("*/*", False),  # curl, wget, fetch() by default: plain text, as before
        ("text/*", False),
        ("text/plain", False),
        ("application/json", False),
        ("application/xhtml+xml", False),
        (CHROME, True),
        (FIREFOX, True),
        ("text/html", True),
        ("TEXT/HTML", True),
        ("text/html, text/plain", True),  # a tie: HTML was named
        ("text/plain, text/html;q=0.5", False),  # plain weighted higher
        ("text/html;q=0.5, */*", False),  # */* covers text/plain at q=1
        ("text/html;q=0.5, text/plain;q=0.5", True),
        ("text/html;q=0", False),  # refused (RFC 9110 §12.4.2)
        ("text/html;q=bogus", False),  # an invalid member is ignored
        ("text/htmlx", False),
        ("application/html", False),
        ("text/html;level=1;q=0.9, text/plain;q=0.8", True),
    ],
)
def test_prefers_html(accept: str | None, html: bool) -> None:
    assert prefers_html(accept) is html
    assert prefers_html(accept) is html  # again: from the memo, the same answer


def _field(plan: Plan, name: bytes) -> list[bytes]:
    return [v for k, v in plan.headers if k == name]


def test_html_variant_fields() -> None:
    plan = negotiated_error(error_plan(404, 0.0), FIREFOX)
    assert plan.status == 404
    assert plan.headers[0] == NOSNIFF_FIELD
    assert _field(plan, b"content-type") == [b"text/html; charset=utf-8"]
    assert _field(plan, b"content-length") == [b"%d" % len(plan.body[0])]
    assert _field(plan, b"vary") == [b"Accept"]
    assert _field(plan, b"content-security-policy") == [ERROR_CSP]
    body = plan.body[0]
    assert isinstance(body, bytes)
    assert b"<title>404 Not Found</title>" in body
    assert b"<h1>404 Not Found</h1>" in body
    assert b"<p>There is nothing at this address.</p>" in body
    assert b'<a href="/">Home</a>' in body


def test_plain_variant_keeps_text_and_adds_vary() -> None:
    base = error_plan(404, 0.0)
    plan = negotiated_error(base, "*/*")
    assert plan.body == base.body == (b"404 Not Found\n",)
    assert _field(plan, b"content-type") == [b"text/plain; charset=utf-8"]
    assert _field(plan, b"vary") == [b"Accept"]
    assert not _field(plan, b"content-security-policy")


def test_head_gets_the_same_fields() -> None:
    get = negotiated_error(error_plan(404, 0.0), CHROME)
    head = negotiated_error(error_plan(404, 0.0, head_only=True), CHROME)
    assert head.headers == get.headers
    assert not head.send_body and get.send_body


def test_other_fields_and_close_are_kept() -> None:
    plan = negotiated_error(error_plan(503, 0.0, close=True), CHROME)
    assert _field(plan, b"retry-after") == [b"1"] and plan.close
    plan = negotiated_error(error_plan(405, 0.0), CHROME)
    assert _field(plan, b"allow")
    www = (b"www-authenticate", b'Basic realm="x"')
    plan = negotiated_error(error_plan(401, 0.0, headers=[www]), CHROME)
    assert www in plan.headers


def test_vary_merges_into_an_existing_field() -> None:
    base = error_plan(404, 0.0, headers=[(b"vary", b"Origin")])
    assert _field(negotiated_error(base, CHROME), b"vary") == [b"Origin, Accept"]
    base = error_plan(404, 0.0, headers=[(b"vary", b"accept")])
    assert _field(negotiated_error(base, CHROME), b"vary") == [b"accept"]


def test_only_the_builtin_body_is_replaced() -> None:
    site_page = page_plan(error_plan(404, 0.0), b"<h1>mine</h1>", b"text/html")
    assert negotiated_error(site_page, CHROME) is site_page
    plain_page = page_plan(error_plan(404, 0.0), b"my text", b"text/plain; charset=utf-8")
    assert negotiated_error(plain_page, CHROME) is plain_page
    redirect = redirect_plan(301, b"/x/", 0.0, head=False)
    assert negotiated_error(redirect, CHROME) is redirect  # 3xx: not an error page
    ok = Plan(200, ((b"content-type", b"text/plain; charset=utf-8"),), (b"200 OK\n",))
    assert negotiated_error(ok, CHROME) is ok


def _style_hash(body: bytes) -> str:
    m = re.search(rb"<style>(.*?)</style>", body, re.S)
    assert m is not None
    digest = hashlib.sha256(m.group(1)).digest()
    return "'sha256-" + base64.b64encode(digest).decode() + "'"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 412, 416, 429, 431, 500, 503, 599])
def test_page_is_allowed_by_its_csp_and_has_no_script(status: int) -> None:
    body = error_html(status)
    csp = ERROR_CSP.decode()
    assert f"style-src {_style_hash(body)}" in csp
    for rule in ("default-src 'none'", "base-uri 'none'", "frame-ancestors 'none'"):
        assert rule in csp
    assert "script-src" not in csp and b"<script" not in body.lower()
    assert body.count(b"<style>") == 1 and b" style=" not in body  # no inline attribute
    assert b"<p>" in body and b'href="/"' in body
    assert body.isascii()


# A literal "/" (an encoded one, %2F, is refused while the request's facts are
# built: that answer, like every refusal of a malformed head, stays plain text).
HOSTILE = "/%3Cscript%3Ealert(1)%3C/script%3E%22%27%3E"


@pytest.fixture
def tree(root: Path) -> Path:
    (root / "hello.txt").write_text("hello\n")
    (root / "404.html").write_text("<h1>custom 404</h1>\n")
    return root


PLAIN_ROWS = [
    Row("404 browser", "GET", "/missing.txt", (("accept", CHROME),), 404),
    Row("404 head browser", "HEAD", "/missing.txt", (("accept", CHROME),), 404),
    Row("404 curl", "GET", "/missing.txt", (("accept", "*/*"),), 404),
    Row("404 no accept", "GET", "/missing.txt", (), 404),
    Row("hostile path", "GET", HOSTILE, (("accept", CHROME),), 404),
    Row("hidden 404", "GET", "/.secret", (("accept", CHROME),), 404),
    Row("405 browser", "POST", "/hello.txt", (("accept", CHROME),), 405),
    Row("416 browser", "GET", "/hello.txt", (("accept", CHROME), ("range", "bytes=99-")), 416),
    Row("412 browser", "GET", "/hello.txt", (("accept", CHROME), ("if-match", '"x"')), 412),
    Row("200 untouched", "GET", "/hello.txt", (("accept", CHROME),), 200),
]


def _ctype(a: Answer) -> bytes:
    return dict(a.fields)[b"content-type"]


async def test_both_protocols_choose_alike_without_site_rules(tree: Path) -> None:
    h1, h2 = await _run(make_config(tree), PLAIN_ROWS)
    assert differences(PLAIN_ROWS, h1, h2) == []
    by = {row.name: a for row, a in zip(PLAIN_ROWS, h1, strict=True)}
    for name in ("404 browser", "hostile path", "hidden 404", "405 browser", "416 browser"):
        a = by[name]
        assert _ctype(a) == b"text/html; charset=utf-8", name
        assert dict(a.fields)[b"content-security-policy"] == ERROR_CSP
        assert b"Accept" in dict(a.fields)[b"vary"].split(b", ")  # 416: Accept-Encoding too
        # The page names the requested path (escaped) and links its parent.
        segments = {
            "hostile path": ("<script>alert(1)<", "script>\"'>"),
            "hidden 404": (".secret",),
        }
        path = segments.get(name, ("missing.txt",) if "404" in name else ("hello.txt",))
        assert a.body == error_html(a.status, None, path), name
    assert (
        b"&lt;script&gt;" in by["hostile path"].body and b"<script" not in by["hostile path"].body
    )
    for name in ("404 curl", "404 no accept"):
        assert _ctype(by[name]) == b"text/plain; charset=utf-8"
        assert by[name].body == b"404 Not Found\n"
        assert dict(by[name].fields)[b"vary"] == b"Accept"
    assert by["404 head browser"].fields == by["404 browser"].fields
    assert by["404 head browser"].body == b""
    ok = dict(by["200 untouched"].fields)
    assert b"Accept" not in ok.get(b"vary", b"").split(b", ")
    assert b"content-security-policy" not in ok and ok[b"content-type"].startswith(b"text/plain")


async def test_hostile_path_is_shown_only_as_escaped_text(tree: Path) -> None:
    # The page names the requested path (issue 46): as text, HTML-escaped;
    # its parent link percent-encoded; never markup.
    h1, h2 = await _run(make_config(tree), PLAIN_ROWS[4:5])
    for a in (h1[0], h2[0]):
        assert b"<script" not in a.body.lower() and b"alert(1)<" not in a.body
        assert b"<code>/&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27;&gt;</code>" in a.body
        assert b'<a href="/%3Cscript%3Ealert%281%29%3C/">' in a.body


SITE_ROWS = [
    Row("404 site page wins", "GET", "/missing.txt", (("accept", CHROME),), 404),
    Row("404 site page curl", "GET", "/missing.txt", (("accept", "*/*"),), 404),
    Row("405 built-in page", "POST", "/hello.txt", (("accept", CHROME),), 405),
    Row("405 built-in head", "DELETE", "/hello.txt", (("accept", "*/*"),), 405),
]


async def test_site_error_pages_keep_priority(tree: Path) -> None:
    cfg = make_config(tree, error_pages=(("404", "404.html"),), headers=("X-Frame-Options: DENY",))
    h1, h2 = await _run(cfg, SITE_ROWS)
    assert differences(SITE_ROWS, h1, h2) == []
    page, curl, builtin, plain = h1
    for a in (page, curl):
        assert a.body == b"<h1>custom 404</h1>\n"
        assert b"content-security-policy" not in dict(a.fields)
    assert _ctype(builtin) == b"text/html; charset=utf-8"
    assert builtin.body == error_html(405, None, ("hello.txt",))
    fields = dict(builtin.fields)
    assert fields[b"content-security-policy"] == ERROR_CSP
    assert fields[b"x-frame-options"] == b"DENY"  # the header rules still apply
    assert fields[b"vary"] == b"Accept"
    assert plain.body == b"405 Method Not Allowed\n"


async def test_a_header_rules_csp_is_sent_beside_the_pages(tree: Path) -> None:
    # As for listings (serverio.site.rules.header_ops): both policies are
    # enforced (CSP Level 3 §8.1), so a rule can only tighten the page's.
    mine = "default-src 'self'"
    rules = (("/**", (("Content-Security-Policy", mine),), ()),)
    rows = SITE_ROWS[2:3]
    h1, h2 = await _run(make_config(tree, header_rules=rules), rows)
    assert differences(rows, h1, h2) == []
    csp = [v for k, v in h1[0].fields if k == b"content-security-policy"]
    assert csp == [ERROR_CSP, mine.encode()]
    assert h1[0].body == error_html(405, None, ("hello.txt",))
