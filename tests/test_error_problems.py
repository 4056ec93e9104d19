"""Errors that say why (issue 46): a table of error paths, each asked three
ways (plain, ``Accept: application/problem+json``, a browser's Accept):
its status, the RFC 9457 problem document's members, and the HTML page's
text (the detail, the requested path escaped, a link to its parent)."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from serverio.site.passwords import hash_password

from .conftest import make_config, memory_connection
from .test_upload_form import BOUNDARY, form_body

CHROME = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
PROBLEM = "application/problem+json"


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    status: int
    members: dict[str, object]  # problem members beyond type/title/status
    text: str  # in the detail (plain text, problem, HTML: escaped)
    body: bytes = b""
    ctype: str = ""
    headers: str = ""
    config: tuple[tuple[str, object], ...] = ()


def _form(filename: str) -> tuple[bytes, str]:
    return (
        form_body(("file", filename, b"new")),
        f"multipart/form-data; boundary={BOUNDARY}",
    )


DUP_BODY, FORM = _form("taken & co.txt")
BAD_BODY, _ = _form(".hidden")
EVIL_BODY, _ = _form("<script>alert(1)</script>.txt")

CASES = [
    Case(
        "409 duplicate names the file and --on-duplicate",
        "POST",
        "/up/",
        409,
        {"name": "taken & co.txt", "option": "--on-duplicate"},
        "\u201ctaken & co.txt\u201d already exists",
        DUP_BODY,
        FORM,
    ),
    Case(
        "409 missing parent says so and names --upload-mkdirs",
        "PUT",
        "/up/nowhere/deep.txt",
        409,
        {"option": "--upload-mkdirs"},
        "does not exist",
        b"data",
    ),
    Case(
        "413 shows the limit",
        "PUT",
        "/up/big.bin",
        413,
        {"limit": 10, "option": "--max-upload-size"},
        "at most 10 bytes",
        b"x" * 11,
        config=(("max_upload_size", 10),),
    ),
    Case(
        "400 refused name says which rule",
        "POST",
        "/up/",
        400,
        {"rule": "leading dot (hidden file)"},
        "leading dot (hidden file)",
        BAD_BODY,
        FORM,
    ),
    Case(
        "400 hostile name is shown as text",
        "POST",
        "/up/",
        400,
        {},
        "\u201c<script>alert(1)</script>.txt\u201d is refused",
        EVIL_BODY,
        FORM,
    ),
    Case(
        "401 names what is missing, not the rule",
        "GET",
        "/private/secret.txt",
        401,
        {},
        "Sign in",
    ),
    Case("404 plain", "GET", "/up/missing.txt", 404, {}, ""),
]


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "www"
    (root / "up").mkdir(parents=True)
    (root / "up" / "taken & co.txt").write_text("old")
    (root / "private").mkdir()
    (root / "private" / "secret.txt").write_text("s")
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password('pw', 1000)}\n")
    return root, users


def _request(case: Case, accept: str) -> bytes:
    head = f"{case.method} {case.path} HTTP/1.1\r\nHost: t\r\nAccept: {accept}\r\n"
    if case.body or case.method in ("PUT", "POST"):
        head += f"Content-Length: {len(case.body)}\r\n"
    if case.ctype:
        head += f"Content-Type: {case.ctype}\r\nOrigin: http://t\r\n"
    return (head + case.headers + "\r\n").encode() + case.body


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_each_error_path_says_why_in_text_problem_json_and_html(
    site: tuple[Path, Path], case: Case
) -> None:
    root, users = site
    cfg = make_config(
        root,
        upload=True,
        auth=(("/private/**", str(users)),),
        **dict(case.config),
    )
    got = {}
    for kind, accept in (("text", "*/*"), ("problem", PROBLEM), ("html", CHROME)):
        async with memory_connection(cfg) as (client, _, _):
            await client.send_raw(_request(case, accept))
            got[kind] = await client.read_response()
    text, problem, page = got["text"], got["problem"], got["html"]
    for r in (text, problem, page):
        assert r.status == case.status, (case.name, r.status, r.body[:200])
        assert "accept" in (r.header("vary") or "").lower()
    # Plain text: the status line, then the detail.
    assert (text.header("content-type") or "").startswith("text/plain")
    assert text.body.startswith(b"%d " % case.status)
    assert case.text.encode() in text.body
    # RFC 9457: application/problem+json with the same information.
    assert problem.header("content-type") == PROBLEM
    doc = json.loads(problem.body)
    assert doc["status"] == case.status and doc["type"] == "about:blank"
    assert doc["instance"].startswith("/")
    if case.text:
        assert case.text in doc["detail"]
    for key, value in case.members.items():
        assert doc[key] == value, (key, doc)
    assert problem.body.isascii()
    # HTML: the detail escaped, the requested path, a link to its parent.
    assert (page.header("content-type") or "").startswith("text/html")
    body = page.body.decode()
    if case.text:
        assert html.escape(case.text) in body  # a name never becomes markup
    assert "<script" not in body
    assert "Requested: <code>" in body
    parent = case.path.rstrip("/").rsplit("/", 1)[0] + "/"
    assert f'<a href="{parent}">' in body


async def test_a_fetch_asking_json_gets_a_problem_and_curl_keeps_plain_text(
    site: tuple[Path, Path],
) -> None:
    root, _ = site
    async with memory_connection(make_config(root)) as (client, _, _):
        js = await client.get("/nope", "Accept: application/json\r\n")
        assert js.header("content-type") == PROBLEM
        assert json.loads(js.body) == {
            "type": "about:blank",
            "title": "Not Found",
            "status": 404,
            "instance": "/nope",
        }
        curl = await client.get("/nope")
        assert curl.body == b"404 Not Found\n"


async def test_upload_mkdirs_creates_the_missing_folders(site: tuple[Path, Path]) -> None:
    root, _ = site
    put = b"PUT /up/a/b/c.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\ndata"
    async with memory_connection(make_config(root, upload=True)) as (client, _, _):
        await client.send_raw(put)
        assert (await client.read_response()).status == 409  # RFC 4918 §9.7.1
    assert not (root / "up" / "a").exists()
    async with memory_connection(make_config(root, upload=True, upload_mkdirs=True)) as (
        client,
        _,
        _,
    ):
        await client.send_raw(put)
        assert (await client.read_response()).status == 201
        # A refused name among the folders is still refused, nothing made for it.
        await client.send_raw(put.replace(b"/a/b/", b"/x/.git/"))
        assert (await client.read_response()).status in (403, 409)
    assert (root / "up" / "a" / "b" / "c.txt").read_bytes() == b"data"
    assert not (root / "up" / "x" / ".git").exists()
